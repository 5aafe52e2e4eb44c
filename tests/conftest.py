"""Shared fixtures of the test suite: tiny configs and models, padded batches, reference checkpoints on disk.

Numerics are always checked against the naive implementation in `reference_impl.py` (float64, Python loops), never
against the package itself. Everything here is tiny so that the whole suite runs in well under a minute on 2 CPU cores.
"""

import json
import os
import sys
import tempfile

# The jobs cache their prepared corpora with `datasets`: the suite's go to a folder of its own, not the user's cache
# (set before `datasets` reads its configuration; subprocesses inherit it).
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="elc-bert-tests-datasets-"))

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))  # `reference_impl` sits next to this file

from reference_impl import random_reference_state_dict  # noqa: E402

import elc_bert  # noqa: E402,F401  (registers the Auto classes)
from elc_bert import (  # noqa: E402
    ElcBertConfig,
    ElcBertForMaskedLM,
    ElcBertForMultipleChoice,
    ElcBertForQuestionAnswering,
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    ElcBertModel,
)

# Tiny models gain nothing from intra-op threads, and spinning OpenMP workers slow everything down when the machine's
# cores are busy with something else.
torch.set_num_threads(1)

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


@pytest.fixture
def tiny_config():
    """Factory: a tiny ElcBertConfig with all dropouts 0; keyword arguments override fields."""

    def make(**overrides):
        return ElcBertConfig(**tiny_config_kwargs(**overrides))

    return make


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


@pytest.fixture
def make_model():
    """Factory: make_model(cls, seed=0, **config_overrides) -> seeded tiny model (eval mode, dropout 0)."""
    return build_model


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


@pytest.fixture
def batch():
    """A padded batch of 3 sequences of lengths 11, 7 and 4."""
    return padded_batch([11, 7, 4])


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


@pytest.fixture
def reference_checkpoint(tmp_path):
    """Factory: reference_checkpoint(elc=..., weighted_output=..., fmt=..., **kw) -> (folder, state_dict)."""
    counter = iter(range(1000))

    def make(**kwargs):
        folder = tmp_path / f"ref{next(counter)}"
        state_dict = write_reference_checkpoint(folder, **kwargs)
        return str(folder), state_dict

    return make


def assert_close(actual, expected, atol=1e-5, rtol=0.0, what=""):
    """Compares a float32 package tensor with a float64 reference tensor."""
    actual = actual.detach().to(torch.float64)
    expected = expected.detach().to(torch.float64)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err = (actual - expected).abs()
    bound = atol + rtol * expected.abs()
    worst = (err - bound).max().item()
    assert worst <= 0, f"{what}: max abs error {err.max().item():.3g} exceeds atol={atol} rtol={rtol}"
