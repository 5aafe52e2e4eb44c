"""ElcBertConfig: presets, validation, serialisation and Auto registration."""

import json

import pytest
import torch
from transformers import AutoConfig

import elc_bert
from elc_bert import ElcBertConfig, ElcBertForMaskedLM, LtgBertConfig

# The paper's sizes (docs/elc-bert.md, "Sizes"): L, D, H, I, V.
PAPER_SIZES = {
    "strict": (12, 768, 12, 2048, 16384),
    "strict-small": (12, 384, 6, 1024, 6144),
}


@pytest.mark.parametrize("name", sorted(PAPER_SIZES))
def test_paper_presets_sizes(name):
    config = ElcBertConfig.from_preset(name)
    layers, hidden, heads, inner, vocab = PAPER_SIZES[name]
    assert config.num_hidden_layers == layers
    assert config.hidden_size == hidden
    assert config.num_attention_heads == heads
    assert config.intermediate_size == inner
    assert config.vocab_size == vocab
    # The recipe's shared values.
    assert config.hidden_dropout_prob == pytest.approx(0.1)
    assert config.attention_probs_dropout_prob == pytest.approx(0.1)
    assert config.layer_norm_eps == pytest.approx(1e-7)
    assert config.position_bucket_size == 32
    assert config.max_position_embeddings == 512
    assert config.layer_combination == "elc" and config.elc_variant == "base"
    assert config.positional_split == "halves"
    assert config.pad_token_id == 3
    assert config.tie_word_embeddings is True


def test_presets_dict_and_tiny():
    assert {"strict", "strict-small", "tiny"} <= set(elc_bert.PRESETS)
    tiny = ElcBertConfig.from_preset("tiny")
    for field, value in elc_bert.PRESETS["tiny"].items():
        assert getattr(tiny, field) == value
    assert tiny.hidden_size % tiny.num_attention_heads == 0
    assert tiny.hidden_size <= 128 and tiny.num_hidden_layers <= 4


def test_preset_overrides():
    config = ElcBertConfig.from_preset("strict-small", layer_combination="residual", vocab_size=1000)
    assert config.layer_combination == "residual"
    assert config.vocab_size == 1000
    assert config.hidden_size == 384


def test_unknown_preset_raises():
    with pytest.raises(ValueError):
        ElcBertConfig.from_preset("no-such-preset")


def _expected_parameter_count(L, D, H, inner, V, P=32, elc=True):
    """Trainable parameters of the MLM model from the spec's shapes (tied decoder counted once)."""
    embedding = V * D + (2 * P - 1) * D + 2 * D  # E, R, relative LN
    attention = (2 * D * D + 2 * D) + (D * D + D) + (D * D + D) + 2 * D  # qk, v, out, post LN
    ffn = 2 * inner * D + D * inner
    head = D * D + D + V  # dense + decoder bias
    elc_weights = L * (L + 1) // 2 if elc else 0
    return embedding + L * (attention + ffn) + head + elc_weights


@pytest.mark.parametrize("name, millions", [("strict", 98.23), ("strict-small", 23.80)], ids=["strict", "strict-small"])
@pytest.mark.parametrize("combination", ["elc", "residual"])
def test_preset_parameter_count(name, millions, combination):
    config = ElcBertConfig.from_preset(name, layer_combination=combination)
    with torch.device("meta"):
        model = ElcBertForMaskedLM(config)
    count = sum(p.numel() for p in model.parameters())  # shared (tied) parameters are yielded once
    expected = _expected_parameter_count(*PAPER_SIZES[name], elc=combination == "elc")
    assert count == expected
    if combination == "elc":
        assert count / 1e6 == pytest.approx(millions, abs=0.01)
        residual = _expected_parameter_count(*PAPER_SIZES[name], elc=False)
        assert count - residual == 78  # sum n for L = 12


INVALID = [
    ("hidden_size", dict(hidden_size=30, num_attention_heads=4)),  # not divisible
    ("elc_variant", dict(elc_variant="bogus")),
    ("layer_combination", dict(layer_combination="dense")),
    ("positional_split", dict(positional_split="diagonal")),
    ("vocab_size", dict(vocab_size=0)),
    ("hidden_size", dict(hidden_size=-32)),
    ("num_hidden_layers", dict(num_hidden_layers=0)),
    ("num_attention_heads", dict(num_attention_heads=0)),
    ("intermediate_size", dict(intermediate_size=0)),
    ("max_position_embeddings", dict(max_position_embeddings=-1)),
    ("hidden_dropout_prob", dict(hidden_dropout_prob=1.0)),
    ("hidden_dropout_prob", dict(hidden_dropout_prob=-0.1)),
    ("attention_probs_dropout_prob", dict(attention_probs_dropout_prob=1.5)),
    ("classifier_dropout", dict(classifier_dropout=1.0)),
    ("layer_norm_eps", dict(layer_norm_eps=0.0)),
    ("position_bucket_size", dict(position_bucket_size=7)),
]


@pytest.mark.parametrize("field, overrides", INVALID, ids=[f"{f}-{list(o.values())[0]}" for f, o in INVALID])
def test_invalid_value_raises_naming_field(field, overrides):
    base = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48)
    ElcBertConfig(**base)  # the base itself is valid
    with pytest.raises(ValueError, match=field):
        ElcBertConfig(**{**base, **overrides})


def test_invalid_override_through_preset_raises():
    with pytest.raises(ValueError, match="elc_variant"):
        ElcBertConfig.from_preset("tiny", elc_variant="nope")


def test_valid_edge_values_accepted():
    config = ElcBertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=32,
        intermediate_size=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.999,
        classifier_dropout=None,
    )
    assert config.classifier_dropout is None
    assert config.attention_probs_dropout_prob == pytest.approx(0.999)


def test_save_and_load_round_trip(tmp_path):
    config = ElcBertConfig(
        vocab_size=123,
        hidden_size=48,
        num_hidden_layers=3,
        num_attention_heads=6,
        intermediate_size=80,
        max_position_embeddings=256,
        position_bucket_size=16,
        layer_norm_eps=1e-6,
        hidden_dropout_prob=0.05,
        attention_probs_dropout_prob=0.15,
        classifier_dropout=0.25,
        layer_combination="elc",
        elc_variant="weighted_output",
        positional_split="interleaved",
        num_labels=5,
    )
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "elc_bert"
    for loader in (ElcBertConfig.from_pretrained, AutoConfig.from_pretrained):
        loaded = loader(tmp_path)
        assert type(loaded) is ElcBertConfig
        for field in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "position_bucket_size",
            "layer_norm_eps",
            "hidden_dropout_prob",
            "attention_probs_dropout_prob",
            "classifier_dropout",
            "layer_combination",
            "elc_variant",
            "positional_split",
            "pad_token_id",
            "tie_word_embeddings",
            "num_labels",
        ):
            assert getattr(loaded, field) == getattr(config, field), field
        strip = lambda d: {k: v for k, v in d.items() if k != "_name_or_path"}  # noqa: E731
        assert strip(loaded.to_dict()) == strip(config.to_dict())


def test_auto_config_for_model():
    config = AutoConfig.for_model("elc_bert", hidden_size=64, num_attention_heads=4, layer_combination="residual")
    assert isinstance(config, ElcBertConfig)
    assert config.model_type == "elc_bert"
    assert config.hidden_size == 64 and config.layer_combination == "residual"
    reference = AutoConfig.for_model("ltgbert")
    assert isinstance(reference, LtgBertConfig)
    assert reference.model_type == "ltgbert"
