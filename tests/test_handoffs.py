"""What other people's code reads from us (issue 39): tokenizers in `pipeline("fill-mask")` and token classification,
intermediate checkpoints as models, words-seen checkpoints.

Token classification is tested with oracle logits (the gold labels fed in as the model's output), so that what is
measured is the hand-off (tokenizer offsets, word starts, the pipeline's aggregation), not the model's quality.
"""

import json
from pathlib import Path

import pytest
import torch
from helpers import HANDOFFS_RUN_STEPS as STEPS
from tokenizers import Tokenizer, models
from transformers import AutoModelForMaskedLM, AutoTokenizer, PreTrainedTokenizerFast, pipeline

from elc_bert import (
    ElcBertConfig,
    ElcBertForMaskedLM,
    ElcBertForTokenClassification,
    LayerFusionConfig,
    LayerFusionForTokenClassification,
    runs,
)
from elc_bert.data.corpus import packed_samples
from elc_bert.data.ner import load_conll03
from elc_bert.data.pretraining_batches import sample_words
from elc_bert.data.tokenizer import load_tokenizer, pipeline_ready, save_tokenizer, train_tokenizer
from elc_bert.evaluation.blimp import evaluate_blimp
from elc_bert.pretrained import load_model

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "wikitext2_train.txt"
SHARED = REPO.parent / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not beside the repository")


def _held_out_prompts(tokenizer, lines: list[str], count: int) -> list[tuple[str, list[int]]]:
    """(text with one word replaced by [MASK], the ids of the unmasked text with that word's token masked) for
    `count` held-out sentences: a word that is one token, in the middle of a sentence without digits."""
    prompts = []
    for line in lines:
        words = line.split()
        if not 6 <= len(words) <= 40 or any(ch.isdigit() for ch in line):
            continue
        text = " ".join(words)
        encoding = tokenizer(text)
        tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
        # a word that is one token: it starts a word and the next token starts one too
        whole = [
            i
            for i in range(2, len(tokens) - 2)
            if tokens[i].startswith("Ġ") and tokens[i][1:].isalpha() and tokens[i + 1].startswith("Ġ")
        ]
        if not whole or "Ġ" in tokens:  # a lone space token stands before digits and rare characters
            continue
        position = whole[len(whole) // 2]
        span = encoding.token_to_chars(position)
        masked_text = text[: span.start].rstrip() + " [MASK]" + text[span.end :]
        expected = list(encoding["input_ids"])
        expected[position] = tokenizer.mask_token_id
        prompts.append((masked_text, expected))
        if len(prompts) == count:
            break
    assert len(prompts) == count
    return prompts


def test_fill_mask_pipeline_feeds_the_masked_word_as_in_pretraining(run):
    run_dir, held_out = run
    fill = pipeline("fill-mask", model=str(run_dir), tokenizer=str(run_dir))
    fed = []
    fill.model.register_forward_pre_hook(lambda _, args, kw: fed.append(kw["input_ids"][0].tolist()), with_kwargs=True)
    prompts = _held_out_prompts(fill.tokenizer, held_out, 100)
    lone_space = fill.tokenizer.convert_tokens_to_ids("Ġ")
    for text, expected in prompts:
        answers = fill(text, top_k=3)
        assert len(answers) == 3 and all(answer["token"] >= 0 for answer in answers)
        assert fed[-1] == expected, (text, fill.tokenizer.convert_ids_to_tokens(fed[-1]))
        assert lone_space not in fed[-1]


def test_tokenizer_fix_keeps_the_ids_of_ordinary_text_and_applies_to_old_saves(tmp_path):
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:3000]
    tokenizer = train_tokenizer(lines, 500, 2)
    # A tokenizer as earlier versions saved it: [MASK] without lstrip, a template post-processor only, a
    # pre-tokenizer that keeps the spaces ending a piece of text.
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    for token in backend["added_tokens"]:
        token["lstrip"] = False
    backend["post_processor"] = backend["post_processor"]["processors"][1]
    assert backend["post_processor"]["type"] == "TemplateProcessing"
    assert backend["pre_tokenizer"]["pretokenizers"][0]["type"] == "Split"
    del backend["pre_tokenizer"]["pretokenizers"][0]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "tokenizer.json").write_text(json.dumps(backend))
    old = AutoTokenizer.from_pretrained(tmp_path / "old", mask_token="[MASK]", pad_token="[PAD]")
    assert "Ġ" in old.convert_ids_to_tokens(old("a [MASK] b")["input_ids"])  # the defect, as old folders have it
    fixed = load_tokenizer(tmp_path / "old", mask_token="[MASK]", pad_token="[PAD]")
    for line in lines[100:400]:
        line = line.strip()  # the sample's lines end in a space, which made a lone `Ġ` at their end before
        assert fixed(line)["input_ids"] == old(line)["input_ids"] == tokenizer(line)["input_ids"]
    assert fixed.convert_ids_to_tokens(fixed("a [MASK] b")["input_ids"]) == ["[CLS]", "Ġa", "[MASK]", "Ġb", "[SEP]"]
    encoding = fixed("New York", return_offsets_mapping=True)
    tokens = fixed.convert_ids_to_tokens(encoding["input_ids"])
    starts = [start for token, (start, _) in zip(tokens, encoding["offset_mapping"]) if token.startswith("Ġ")]
    assert starts == [0, 4]  # "York" starts after the space, not at it
    # Decoded words keep the space that starts them, so that decoding them again (as a token-classification
    # pipeline makes an entity's text from its words) keeps them apart.
    words = [fixed.convert_tokens_to_string(fixed.tokenize(word)) for word in ("New", "York")]
    assert words == [" New", " York"] and fixed.convert_tokens_to_string(words) == " New York"
    # Other tokenizers (here a WordLevel one) pass through unchanged; saved tokenizers name a class every
    # transformers version has.
    other = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    assert pipeline_ready(other) is other
    save_tokenizer(fixed, tmp_path / "new")
    config = json.loads((tmp_path / "new" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and "auto_map" not in config


def _oracle_logits(tokenizer, words: list[str], tags: list[str], labels: list[str]):
    """The text (words joined by spaces), its encoding, and logits that put each token's gold label first: a word's
    first token gets the word's tag, its later tokens the I- tag of the word's entity (O outside entities)."""
    text = " ".join(words)
    starts, position = [], 0
    for word in words:
        starts.append(position)
        position += len(word) + 1
    encoding = tokenizer(text, return_offsets_mapping=True)
    logits = torch.full((len(encoding["input_ids"]), len(labels)), -10.0)
    word_of = {start: i for i, start in enumerate(starts)}
    current = None
    for index, (start, end) in enumerate(encoding["offset_mapping"]):
        if start == end and index in (0, len(encoding["input_ids"]) - 1):
            label = "O"
        elif start in word_of and (current is None or word_of[start] != current[0]):
            current = (word_of[start], tags[word_of[start]])
            label = current[1]
        else:
            label = "O" if current[1] == "O" else "I-" + current[1][2:]
        logits[index, labels.index(label)] = 10.0
    return text, encoding["input_ids"], logits


def _spans(words: list[str], tags: list[str]) -> set:
    """Gold (start, end, type) character spans of the IOB2 tags over the space-joined words."""
    spans, position, current = set(), 0, None
    for word, tag in zip(words, tags):
        if tag.startswith("B-") or (tag.startswith("I-") and (current is None or current[2] != tag[2:])):
            if current:
                spans.add(tuple(current))
            current = [position, position + len(word), tag[2:]]
        elif tag.startswith("I-"):
            current[1] = position + len(word)
        else:
            if current:
                spans.add(tuple(current))
            current = None
        position += len(word) + 1
    if current:
        spans.add(tuple(current))
    return spans


def _f1(gold: set, predicted: set) -> float:
    hits = len(gold & predicted)
    return 100.0 if not gold and not predicted else 200.0 * hits / (len(gold) + len(predicted))


@needs_shared
@pytest.mark.parametrize("kind", ["elc_bert", "fusion"])
@pytest.mark.slow
def test_token_classification_spans_with_oracle_logits(run, kind):
    run_dir, _ = run
    data = load_conll03(SHARED / "conll2003")["validation"].select(range(300))
    labels = data.features["ner_tags"].feature.names
    config = dict(
        num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={name: i for i, name in enumerate(labels)}
    )
    if kind == "elc_bert":
        model = ElcBertForTokenClassification(ElcBertConfig.from_pretrained(run_dir, **config))
    else:
        backbone = ElcBertConfig.from_pretrained(run_dir)
        model = LayerFusionForTokenClassification(LayerFusionConfig(backbone_config=backbone, fusion="dwatt", **config))
    tokenizer = load_tokenizer(run_dir)
    oracle, gold = {}, set()
    sentences = []
    for row in data:
        words, tags = row["tokens"], [labels[t] for t in row["ner_tags"]]
        text, ids, logits = _oracle_logits(tokenizer, words, tags, labels)
        oracle[tuple(ids)] = logits
        sentences.append(text)
        gold |= {(len(sentences), *span) for span in _spans(words, tags)}
    model.register_forward_hook(
        lambda module, args, kwargs, output: output.__setitem__(
            "logits", oracle[tuple(kwargs["input_ids"][0].tolist())][None]
        ),
        with_kwargs=True,
    )
    tagger = pipeline("token-classification", model=model.eval(), tokenizer=tokenizer)
    scores = {}
    for strategy in ("simple", "first", "average", "max"):
        predicted = set()
        for number, (text, entities) in enumerate(zip(sentences, tagger(sentences, aggregation_strategy=strategy)), 1):
            for entity in entities:
                assert entity["word"].strip() == text[entity["start"] : entity["end"]], entity
                assert text[entity["start"] : entity["end"]].strip() == text[entity["start"] : entity["end"]]
                predicted.add((number, entity["start"], entity["end"], entity["entity_group"]))
        scores[strategy] = _f1(gold, predicted)
    assert scores["simple"] == 100.0, scores
    assert min(scores.values()) >= 99.0, scores


# Raw text (punctuation next to words) and its gold entities: (surface form, type), in order.
RAW_TEXT = [
    ("George Washington, the first president, went to New York.", [("George Washington", "PER"), ("New York", "LOC")]),
    (
        "Angela Merkel met Emmanuel Macron in Paris on Monday.",
        [("Angela Merkel", "PER"), ("Emmanuel Macron", "PER"), ("Paris", "LOC")],
    ),
    (
        "The United Nations opened an office in South Africa in 1999.",
        [("United Nations", "ORG"), ("South Africa", "LOC")],
    ),
]
RAW_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]


def _raw_oracle(tokenizer, text: str, entities: list[tuple[str, str]]) -> tuple[tuple, torch.Tensor]:
    """(ids, logits that put each token's gold label first): B- on the first token of an entity, I- on its others,
    O elsewhere (a token's entity is the one its start offset lies in; a lone space token starts the word after it)."""
    spans, position = [], 0
    for surface, kind in entities:
        start = text.index(surface, position)
        spans.append((start, start + len(surface), kind))
        position = start + len(surface)
    encoding = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    logits = torch.full((len(encoding["input_ids"]), len(RAW_LABELS)), -10.0)
    begun = set()
    for index, ((start, _), special) in enumerate(zip(encoding["offset_mapping"], encoding["special_tokens_mask"])):
        span = None if special else next((s for s in spans if s[0] <= start < s[1]), None)
        label = "O" if span is None else ("I-" if span in begun else "B-") + span[2]
        begun.add(span)
        logits[index, RAW_LABELS.index(label)] = 10.0
    return tuple(encoding["input_ids"]), logits


def test_token_classification_on_raw_text_keeps_the_words_apart(tmp_path):
    """On raw text, `first` and `max` (which build words from tokens, then entities from words) give each entity's
    words as the text has them ("George Washington", not "GeorgeWashington") and every entity, as `simple` does: for
    a newly trained tokenizer, the same saved and loaded (with or without the package), and one saved by an earlier
    version, loaded."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:3000]
    trained = train_tokenizer(lines, 500, 2)
    save_tokenizer(trained, tmp_path / "saved")
    old = json.loads(trained.backend_tokenizer.to_str())  # as earlier versions saved it: a decoder that strips
    old["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "tokenizer.json").write_text(json.dumps(old))
    config = dict(
        vocab_size=len(trained),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=len(RAW_LABELS),
        id2label=dict(enumerate(RAW_LABELS)),
        label2id={name: i for i, name in enumerate(RAW_LABELS)},
    )
    model = ElcBertForTokenClassification(ElcBertConfig(**config)).eval()
    oracle = {}
    model.register_forward_hook(
        lambda module, args, kwargs, output: output.__setitem__(
            "logits", oracle[tuple(kwargs["input_ids"][0].tolist())][None]
        ),
        with_kwargs=True,
    )
    tokenizers = {
        "trained": trained,
        "saved": load_tokenizer(tmp_path / "saved"),
        "saved, read without the package": AutoTokenizer.from_pretrained(tmp_path / "saved"),
        "old": load_tokenizer(tmp_path / "old", mask_token="[MASK]", pad_token="[PAD]"),
    }
    for name, tokenizer in tokenizers.items():
        for text, entities in RAW_TEXT:
            ids, logits = _raw_oracle(tokenizer, text, entities)
            oracle[ids] = logits
        tagger = pipeline("token-classification", model=model, tokenizer=tokenizer)
        for strategy in ("simple", "first", "max"):
            for text, entities in RAW_TEXT:
                found = tagger(text, aggregation_strategy=strategy)
                for entity in found:
                    assert entity["word"].strip() == text[entity["start"] : entity["end"]], (name, strategy, entity)
                # transformers' fallback rule for tokenizers without a continuing-subword prefix (a token starts a
                # word when a space precedes it) makes the punctuation after a word part of it: "New York."
                got = [(text[e["start"] : e["end"]].rstrip(".,"), e["entity_group"]) for e in found]
                assert got == entities, (name, strategy, text, found)


def test_pipelines_present_words_as_roberta_does(tmp_path):
    """Issue 68 asked to strip the space that starts a `word` (" George Washington") and a `token_str`. RoBERTa's
    pipelines keep it too: a byte-level BPE tokenizer trained on the same lines, loaded as `RobertaTokenizerFast` with
    `add_prefix_space=True` (ours always adds it, as the reference recipe does), gives the same words, spaces
    included, in token classification (oracle logits, as above) and the same `token_str` in fill-mask."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaForTokenClassification, RobertaTokenizerFast

    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:3000]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines, 500, 2, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(tmp_path))
    roberta = RobertaTokenizerFast.from_pretrained(tmp_path, add_prefix_space=True)
    ours = train_tokenizer(lines, 500, 2)
    size = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    labels = dict(
        num_labels=len(RAW_LABELS),
        id2label=dict(enumerate(RAW_LABELS)),
        label2id={name: i for i, name in enumerate(RAW_LABELS)},
    )
    models_of = {
        "roberta": (
            RobertaForTokenClassification(RobertaConfig(vocab_size=len(roberta), pad_token_id=1, **size, **labels)),
            RobertaForMaskedLM(RobertaConfig(vocab_size=len(roberta), pad_token_id=1, **size)),
        ),
        "ours": (
            ElcBertForTokenClassification(ElcBertConfig(vocab_size=len(ours), **size, **labels)),
            ElcBertForMaskedLM(ElcBertConfig(vocab_size=len(ours), **size)),
        ),
    }
    words, token_strs = {}, {}
    for name, tokenizer in (("roberta", roberta), ("ours", ours)):
        tagger_model, mlm = models_of[name]
        oracle = dict(_raw_oracle(tokenizer, text, entities) for text, entities in RAW_TEXT)
        tagger_model.eval().register_forward_hook(
            lambda module, args, kwargs, output, oracle=oracle: output.__setitem__(
                "logits", oracle[tuple(kwargs["input_ids"][0].tolist())][None]
            ),
            with_kwargs=True,
        )
        tagger = pipeline("token-classification", model=tagger_model, tokenizer=tokenizer)
        words[name] = [
            [(e["word"], e["start"], e["end"]) for e in tagger(text, aggregation_strategy=strategy)]
            for strategy in ("simple", "first", "max")
            for text, _ in RAW_TEXT
        ]
        fill = pipeline("fill-mask", model=mlm.eval(), tokenizer=tokenizer)
        token_strs[name] = [
            fill(f"He went to {tokenizer.mask_token} city .", targets=[target])[0]["token_str"]
            for target in ("Ġthe", "Ġof")
        ]
    assert words["ours"] == words["roberta"]
    assert words["ours"][0] == [(" George Washington", 0, 17), (" New York", 48, 56)]
    assert token_strs["ours"] == token_strs["roberta"] == [" the", " of"]


def test_tokens_added_later_take_the_space_before_them(tmp_path):
    """A token added with transformers' own `add_tokens` or `add_special_tokens` after the tokenizer was made (a
    relation marker, say) stands as the special tokens do, without a lone space token before it; also on a
    tokenizer saved and loaded, with or without the package, and after a save of one with added tokens."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:3000]
    tokenizer = train_tokenizer(lines, 500, 2)
    save_tokenizer(tokenizer, tmp_path / "plain")
    expected = ["[CLS]", "Ġa", "<e1>", "Ġb", "<e2>", "Ġc", "[MASK]", "Ġd", "[SEP]"]
    for made in (tokenizer, load_tokenizer(tmp_path / "plain"), AutoTokenizer.from_pretrained(tmp_path / "plain")):
        made.add_tokens(["<e1>"])
        made.add_special_tokens({"additional_special_tokens": ["<e2>"]})
        assert made.convert_ids_to_tokens(made("a <e1> b <e2> c [MASK] d")["input_ids"]) == expected
    save_tokenizer(tokenizer, tmp_path / "added")
    for loaded in (load_tokenizer(tmp_path / "added"), AutoTokenizer.from_pretrained(tmp_path / "added")):
        assert loaded.convert_ids_to_tokens(loaded("a <e1> b <e2> c [MASK] d")["input_ids"]) == expected
    # Spaces inside ordinary text still make their tokens (before digits, say)
    assert tokenizer.convert_ids_to_tokens(tokenizer("in  1999")["input_ids"])[1:4] == ["Ġin", "Ġ", "Ġ"]


def test_checkpoints_are_models_like_the_final_one(run, tmp_path):
    run_dir, held_out = run
    checkpoint = run_dir / f"checkpoint-{STEPS}"
    assert json.loads((checkpoint / "config.json").read_text())["sparse_prediction"] is False
    assert (checkpoint / "tokenizer.json").is_file()
    assert json.loads((run_dir / "checkpoint-3" / "config.json").read_text())["sparse_prediction"] is False
    # fill-mask: the same answers
    text = _held_out_prompts(AutoTokenizer.from_pretrained(run_dir), held_out, 1)[0][0]
    answers = [pipeline("fill-mask", model=str(folder))(text, top_k=5) for folder in (checkpoint, run_dir)]
    assert answers[0] == answers[1]
    # run_mlm-style metrics: predictions of the labels' shape (B x T) from the logits, accuracy over labelled ones
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    batch = tokenizer(held_out[5:9], padding=True, truncation=True, max_length=32, return_tensors="pt")
    labels = batch["input_ids"].clone()
    labels[:, ::2] = -100
    accuracies = []
    for folder in (checkpoint, run_dir):
        model = AutoModelForMaskedLM.from_pretrained(folder).eval()
        with torch.no_grad():
            predictions = model(**batch, labels=labels).logits.argmax(-1)
        assert predictions.shape == labels.shape
        scored = labels != -100
        accuracies.append((predictions[scored] == labels[scored]).float().mean().item())
    assert accuracies[0] == accuracies[1]
    # eval-blimp
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "\n".join(
            json.dumps({"sentence_good": good, "sentence_bad": bad, "UID": "toy"})
            for good, bad in [("The cat is here.", "The cat are here."), ("He ran home.", "He run home.")]
        )
    )
    results = []
    for folder in (checkpoint, run_dir):
        model, tokenizer, _ = load_model(str(folder))
        results.append(evaluate_blimp(model, tokenizer, pairs, progress=False))
    assert results[0]["overall"] == results[1]["overall"]


def test_words_seen_checkpoints(run):
    run_dir, _ = run
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    assert not (run_dir / "words-1B").exists()  # beyond the run's words
    for words in (200, 500):
        folder = run_dir / f"words-{words}"
        seen = json.loads((folder / runs.WORDS_SEEN).read_text())
        assert seen["milestone"] == words and seen["words"] >= words
        assert json.loads((folder / "config.json").read_text())["sparse_prediction"] is False
        assert AutoModelForMaskedLM.from_pretrained(folder) is not None and (folder / "tokenizer.json").is_file()
    # words of the samples: the whitespace-separated words of the text, each counted once in an epoch
    import datasets

    documents = datasets.Dataset.from_dict({"sentences": [["a b, c (d) 1999", "x"], ["y z"]], "words": [6, 2]})
    samples = packed_samples(documents, tokenizer, 8, progress=False)
    assert len(samples) > 2 and sample_words(samples).sum() == 8


@pytest.mark.slow
def test_remote_code_says_to_import_the_package_when_it_is_installed(run, tmp_path):
    """A checkpoint loaded as remote code where the package is installed but not imported says to import it."""
    import subprocess
    import sys

    script = (
        "import transformers\n"
        f"transformers.AutoModelForMaskedLM.from_pretrained({str(run[0])!r}, trust_remote_code=True)\n"
        "import sys; assert 'elc_bert' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "HF_HOME": str(tmp_path / "hf")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "`import elc_bert` before loading" in result.stderr
