"""Loading the published reference checkpoints (`model_type: "ltgbert"`, reference key layout) without remote code.

The checkpoints are random ones written in the exact reference layout (`random_reference_state_dict`), in both file
formats the Hub repos use; every load is checked against the naive reference implementation.
"""

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import REF_DIMS, assert_close, padded_batch, write_reference_checkpoint
from reference_impl import naive_forward, random_reference_state_dict
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

from elc_bert import (
    ElcBertConfig,
    ElcBertForMaskedLM,
    ElcBertForMultipleChoice,
    ElcBertForQuestionAnswering,
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    ElcBertModel,
    LtgBertConfig,
)

# (name, elc, weighted_output, expected layer_combination, expected elc_variant)
KINDS = [
    ("elc", True, False, "elc", "base"),
    ("ltg", False, False, "residual", None),
    ("elc-weighted", True, True, "elc", "weighted_output"),
]


def _naive(sd, input_ids, attention_mask, combination, variant):
    return naive_forward(
        sd,
        input_ids,
        attention_mask,
        num_heads=REF_DIMS["num_heads"],
        layer_combination=combination,
        elc_variant=variant or "base",
    )


@pytest.fixture(scope="module")
def inputs():
    return padded_batch([10, 6], vocab_size=REF_DIMS["vocab_size"], seed=11)


@pytest.mark.parametrize("loader", [ElcBertForMaskedLM, AutoModelForMaskedLM], ids=["ElcBertForMaskedLM", "Auto"])
@pytest.mark.parametrize("fmt", ["bin", "safetensors"])
@pytest.mark.parametrize("kind", KINDS, ids=[k[0] for k in KINDS])
def test_masked_lm_loads_reference_checkpoint(reference_checkpoint, inputs, kind, fmt, loader):
    _, elc, weighted, combination, variant = kind
    folder, sd = reference_checkpoint(elc=elc, weighted_output=weighted, fmt=fmt, seed=21)
    model, info = loader.from_pretrained(folder, output_loading_info=True)
    assert type(model) is ElcBertForMaskedLM
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not model.training
    config = model.config
    assert config.layer_combination == combination
    if variant is not None:
        assert config.elc_variant == variant
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (
        REF_DIMS["hidden_size"],
        REF_DIMS["num_layers"],
        REF_DIMS["vocab_size"],
    )
    assert config.pad_token_id == 3  # the reference config's 4 is [MASK]
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight

    input_ids, attention_mask = inputs
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
    ref = _naive(sd, input_ids, attention_mask, combination, variant)
    for n, (ours, theirs) in enumerate(zip(out.hidden_states, ref["hidden_states"], strict=True)):
        assert_close(ours, theirs, what=f"hidden_states[{n}]")
    assert_close(out.logits, ref["mlm_logits"], atol=1e-5, what="mlm logits")


@pytest.mark.parametrize("kind", KINDS, ids=[k[0] for k in KINDS])
def test_auto_config_reads_reference_config(reference_checkpoint, kind):
    """AutoConfig reads a reference folder as the ElcBertConfig of its weights (no remote code)."""
    _, elc, weighted, combination, variant = kind
    folder, _ = reference_checkpoint(elc=elc, weighted_output=weighted)
    config = AutoConfig.from_pretrained(folder)
    assert type(config) is ElcBertConfig and config.model_type == "elc_bert"
    assert not hasattr(config, "auto_map")  # the reference's remote code is not ours
    assert config.hidden_size == REF_DIMS["hidden_size"]
    assert config.num_hidden_layers == REF_DIMS["num_layers"]
    assert config.layer_combination == combination and config.pad_token_id == 3
    if variant is not None:
        assert config.elc_variant == variant
    assert isinstance(AutoConfig.for_model("ltgbert"), LtgBertConfig)
    with pytest.raises(ValueError, match="read together with its weights"):
        LtgBertConfig.from_dict(json.loads((Path(folder) / "config.json").read_text()))


@pytest.mark.parametrize("fmt", ["bin", "safetensors"])
@pytest.mark.parametrize("kind", KINDS[:2], ids=[k[0] for k in KINDS[:2]])
def test_auto_model_loads_backbone(reference_checkpoint, inputs, kind, fmt):
    _, elc, weighted, combination, variant = kind
    folder, sd = reference_checkpoint(elc=elc, weighted_output=weighted, fmt=fmt, seed=22)
    model, info = AutoModel.from_pretrained(folder, output_loading_info=True)
    assert type(model) is ElcBertModel
    assert not info["missing_keys"] and not info["unexpected_keys"]
    input_ids, attention_mask = inputs
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask)
    ref = _naive(sd, input_ids, attention_mask, combination, variant)
    assert_close(out.last_hidden_state, ref["last_hidden_state"], what="last_hidden_state")


HEAD_CLASSES = [
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    ElcBertForQuestionAnswering,
    ElcBertForMultipleChoice,
]


@pytest.mark.parametrize("model_class", HEAD_CLASSES, ids=lambda c: c.__name__.replace("ElcBert", ""))
@pytest.mark.parametrize("kind", KINDS[:2], ids=[k[0] for k in KINDS[:2]])
def test_task_model_loads_backbone_from_mlm_checkpoint(reference_checkpoint, inputs, kind, model_class):
    """A pretraining (MLM) checkpoint fine-tunes: the backbone loads, the task head is new, the MLM head is dropped."""
    _, elc, weighted, combination, variant = kind
    folder, sd = reference_checkpoint(elc=elc, weighted_output=weighted, seed=23)
    kwargs = {"num_labels": 3} if model_class is not ElcBertForMultipleChoice else {}
    model, info = model_class.from_pretrained(folder, output_loading_info=True, **kwargs)
    assert type(model) is model_class
    assert not info["unexpected_keys"]
    # Only the new head is missing.
    assert info["missing_keys"], "the new task head should be reported missing"
    assert all(not key.startswith("elc_bert.") for key in info["missing_keys"]), info["missing_keys"]
    if model_class in (ElcBertForSequenceClassification, ElcBertForTokenClassification):
        assert model.config.num_labels == 3
    input_ids, attention_mask = inputs
    with torch.no_grad():
        hidden = model.elc_bert(input_ids, attention_mask=attention_mask).last_hidden_state
    ref = _naive(sd, input_ids, attention_mask, combination, variant)
    assert_close(hidden, ref["last_hidden_state"], what="backbone")
    # The new head is initialised (finite, not all zero) and gives finite outputs.
    head = [p for name, p in model.named_parameters() if not name.startswith("elc_bert.")]
    assert head and all(torch.isfinite(p).all() for p in head)
    assert any(p.abs().sum() > 0 for p in head if p.dim() == 2)
    if model_class is ElcBertForMultipleChoice:
        input_ids, attention_mask = input_ids[None], attention_mask[None]
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask)
    logits = out.start_logits if model_class is ElcBertForQuestionAnswering else out.logits
    assert torch.isfinite(logits).all()


def _naive_classifier_head(x, weight1, bias1, weight5, bias5, eps=1e-7):
    """LN0 -> Linear -> GELU(erf) -> LN0 -> Linear, in float64."""

    def ln0(t):
        return (t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, unbiased=False, keepdim=True) + eps)

    h = ln0(x) @ weight1.double().T + bias1.double()
    h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
    return ln0(h) @ weight5.double().T + bias5.double()


def test_sequence_classification_loads_reference_fine_tuned_head(tmp_path, inputs):
    """A fine-tuned reference checkpoint (`head.nonlinearity.*`, no MLM head) loads its head too."""
    sd = random_reference_state_dict(
        vocab_size=REF_DIMS["vocab_size"],
        hidden_size=REF_DIMS["hidden_size"],
        num_layers=REF_DIMS["num_layers"],
        intermediate_size=REF_DIMS["intermediate_size"],
        elc=True,
        seed=24,
    )
    full_sd = sd  # the naive forward needs an MLM head; the checkpoint has none
    sd = {k: v for k, v in sd.items() if not k.startswith("classifier.")}
    gen = torch.Generator().manual_seed(0)
    D = REF_DIMS["hidden_size"]
    sd["head.nonlinearity.1.weight"] = torch.randn(D, D, generator=gen) * 0.1
    sd["head.nonlinearity.1.bias"] = torch.randn(D, generator=gen) * 0.02
    sd["head.nonlinearity.5.weight"] = torch.randn(3, D, generator=gen) * 0.1
    sd["head.nonlinearity.5.bias"] = torch.randn(3, generator=gen) * 0.02
    write_reference_checkpoint(
        tmp_path,
        elc=True,
        state_dict=sd,
        config_overrides={
            # what a fine-tuned reference checkpoint's config.json holds (transformers serialises id2label)
            "architectures": ["LtgBertForSequenceClassification"],
            "id2label": {"0": "neg", "1": "neu", "2": "pos"},
            "label2id": {"neg": 0, "neu": 1, "pos": 2},
        },
    )
    model, info = ElcBertForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.num_labels == 3
    assert model.config.id2label[2] == "pos"
    input_ids, attention_mask = inputs
    with torch.no_grad():
        logits = model(input_ids, attention_mask=attention_mask).logits
    ref = _naive(full_sd, input_ids, attention_mask, "elc", "base")
    expected = _naive_classifier_head(
        ref["last_hidden_state"][:, 0],
        sd["head.nonlinearity.1.weight"],
        sd["head.nonlinearity.1.bias"],
        sd["head.nonlinearity.5.weight"],
        sd["head.nonlinearity.5.bias"],
    )
    assert_close(logits, expected, what="classification logits")


# ------------------------------------------------------------------------------------------------ shape mismatches
@pytest.mark.parametrize("loader", [ElcBertForMaskedLM, AutoModelForMaskedLM], ids=["ElcBertForMaskedLM", "Auto"])
def test_config_hidden_size_mismatch_raises(reference_checkpoint, loader):
    folder, _ = reference_checkpoint(elc=True, config_overrides={"hidden_size": 64})
    # A tensor name, not merely a config field such as tie_word_embeddings.
    tensor_name = r"(word_embeddings?\.weight|relative_embedding|layers\.\d+\.\w|lm_head\.|classifier\.)"
    with pytest.raises(ValueError, match=tensor_name):
        loader.from_pretrained(folder)


@pytest.mark.parametrize(
    "key, shape, pattern",
    [
        ("embedding.relative_embedding", (65, REF_DIMS["hidden_size"]), "relative_embedding"),
        ("transformer.layers.1.mlp.mlp.4.weight", (REF_DIMS["hidden_size"], 44), r"layers\.1\."),
        ("transformer.layers.2.prev_layer_weights", (4,), r"layers\.2\."),
    ],
    ids=["relative_embedding", "mlp", "prev_layer_weights"],
)
def test_single_tensor_with_wrong_shape_raises_naming_it(tmp_path, key, shape, pattern):
    sd = random_reference_state_dict(
        vocab_size=REF_DIMS["vocab_size"],
        hidden_size=REF_DIMS["hidden_size"],
        num_layers=REF_DIMS["num_layers"],
        intermediate_size=REF_DIMS["intermediate_size"],
        elc=True,
        seed=25,
    )
    sd[key] = torch.randn(shape)
    write_reference_checkpoint(tmp_path, elc=True, state_dict=sd)
    with pytest.raises(ValueError, match=pattern):
        ElcBertForMaskedLM.from_pretrained(tmp_path)


# ------------------------------------------------------------------------------------------------ long inputs, re-save
def test_longer_than_512_on_loaded_checkpoint(reference_checkpoint):
    folder, _ = reference_checkpoint(elc=True, seed=26, num_layers=2, fmt="safetensors")
    model = AutoModelForMaskedLM.from_pretrained(folder)
    T = 530
    input_ids, attention_mask = padded_batch([T, 520], vocab_size=REF_DIMS["vocab_size"], seed=3)
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
        alone = model(input_ids[1:, :520]).logits
    assert out.logits.shape == (2, T, REF_DIMS["vocab_size"])
    assert torch.isfinite(out.logits).all()
    assert len(out.hidden_states) == 3
    # The padded row equals the same sequence run alone (buckets beyond M - 1 are clamped consistently).
    torch.testing.assert_close(out.logits[1, :520], alone[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS, ids=[k[0] for k in KINDS])
def test_loaded_reference_model_saves_in_own_format(reference_checkpoint, tmp_path, inputs, kind):
    _, elc, weighted, combination, variant = kind
    folder, sd = reference_checkpoint(elc=elc, weighted_output=weighted, seed=27, fmt="bin")
    model = ElcBertForMaskedLM.from_pretrained(folder, positional_split="interleaved")
    out_dir = tmp_path / "converted"
    model.save_pretrained(out_dir)
    saved = json.loads((out_dir / "config.json").read_text())
    assert saved["model_type"] == "elc_bert"
    # Not the reference's remote code: ours, which `save_pretrained` ships next to the weights.
    assert saved["auto_map"] == {
        "AutoConfig": "configuration_elc_bert.ElcBertConfig",
        "AutoModelForMaskedLM": "modeling_elc_bert.ElcBertForMaskedLM",
    }
    assert (out_dir / "modeling_elc_bert.py").is_file()
    reloaded = AutoModelForMaskedLM.from_pretrained(out_dir)
    assert type(reloaded) is ElcBertForMaskedLM
    assert reloaded.config.layer_combination == combination
    assert reloaded.config.positional_split == "interleaved"
    input_ids, attention_mask = inputs
    with torch.no_grad():
        logits = reloaded(input_ids, attention_mask=attention_mask).logits
    ref = naive_forward(
        sd,
        input_ids,
        attention_mask,
        num_heads=REF_DIMS["num_heads"],
        layer_combination=combination,
        elc_variant=variant or "base",
        positional_split="interleaved",
    )
    assert_close(logits, ref["mlm_logits"], atol=1e-5, what="mlm logits")


def test_mlm_loss_on_reference_checkpoint(reference_checkpoint, inputs):
    """With labels the loss is the mean cross entropy of the naive logits at the labelled positions."""
    folder, sd = reference_checkpoint(elc=True, seed=28)
    model = ElcBertForMaskedLM.from_pretrained(folder)
    input_ids, attention_mask = inputs
    labels = torch.full_like(input_ids, -100)
    labels[0, 2], labels[0, 7], labels[1, 3] = 5, 17, 40
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, labels=labels)
    ref = _naive(sd, input_ids, attention_mask, "elc", "base")["mlm_logits"]
    picked = torch.stack([ref[0, 2], ref[0, 7], ref[1, 3]])
    assert_close(out.logits, ref, atol=1e-5, what="logits")
    expected = F.cross_entropy(picked, torch.tensor([5, 17, 40]))
    assert out.loss.item() == pytest.approx(expected.item(), abs=1e-5)


@pytest.mark.parametrize(
    "model_class", [ElcBertForMaskedLM, ElcBertForSequenceClassification], ids=["MaskedLM", "SequenceClassification"]
)
def test_other_heads_tensors_are_ignored(tmp_path, inputs, model_class):
    """A checkpoint holding both the MLM head (`classifier.*`) and a fine-tuning head (`head.*`) loads into either
    model; each keeps its own head and ignores the other, as the reference classes do."""
    sd = random_reference_state_dict(
        vocab_size=REF_DIMS["vocab_size"],
        hidden_size=REF_DIMS["hidden_size"],
        num_layers=REF_DIMS["num_layers"],
        intermediate_size=REF_DIMS["intermediate_size"],
        elc=True,
        seed=29,
    )
    D = REF_DIMS["hidden_size"]
    gen = torch.Generator().manual_seed(1)
    sd["head.nonlinearity.1.weight"] = torch.randn(D, D, generator=gen) * 0.1
    sd["head.nonlinearity.1.bias"] = torch.randn(D, generator=gen) * 0.02
    sd["head.nonlinearity.5.weight"] = torch.randn(3, D, generator=gen) * 0.1
    sd["head.nonlinearity.5.bias"] = torch.randn(3, generator=gen) * 0.02
    write_reference_checkpoint(tmp_path, elc=True, state_dict=sd)
    model, info = model_class.from_pretrained(tmp_path, output_loading_info=True, num_labels=3)
    assert not info["missing_keys"]
    input_ids, attention_mask = inputs
    ref = _naive(sd, input_ids, attention_mask, "elc", "base")
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask)
    if model_class is ElcBertForMaskedLM:
        assert_close(out.logits, ref["mlm_logits"], atol=1e-5, what="mlm logits")
    else:
        expected = _naive_classifier_head(
            ref["last_hidden_state"][:, 0],
            sd["head.nonlinearity.1.weight"],
            sd["head.nonlinearity.1.bias"],
            sd["head.nonlinearity.5.weight"],
            sd["head.nonlinearity.5.bias"],
        )
        assert_close(out.logits, expected, what="classification logits")


def _variant_logits(folder, loader, inputs, **kwargs):
    with torch.no_grad():
        return loader.from_pretrained(folder, **kwargs)(*inputs[:1], attention_mask=inputs[1]).logits


@pytest.mark.parametrize("variant", ["zero", "normalized"])
@pytest.mark.parametrize("loader", [ElcBertForMaskedLM, AutoModelForMaskedLM], ids=["ElcBertForMaskedLM", "Auto"])
def test_variants_the_weights_cannot_tell_are_honoured(reference_checkpoint, inputs, loader, variant, tmp_path):
    """`zero` and `normalized` have the tensors of `base`: the variant given to `from_pretrained` (class or Auto) or
    written in config.json is the one loaded, and matches the naive reference of that variant."""
    folder, sd = reference_checkpoint(elc=True, seed=41)
    expected = _naive(sd, *inputs, "elc", variant)["mlm_logits"]
    assert_close(_variant_logits(folder, loader, inputs, elc_variant=variant), expected, what=f"{variant} (argument)")
    written = tmp_path / "written"
    write_reference_checkpoint(written, elc=True, state_dict=sd, config_overrides={"elc_variant": variant})
    assert_close(_variant_logits(str(written), loader, inputs), expected, what=f"{variant} (config.json)")


@pytest.mark.parametrize("loader", [ElcBertForMaskedLM, AutoModelForMaskedLM], ids=["ElcBertForMaskedLM", "Auto"])
def test_positional_split_is_honoured_through_every_loader(reference_checkpoint, inputs, loader):
    folder, sd = reference_checkpoint(elc=False, seed=42)
    expected = naive_forward(
        sd, *inputs, num_heads=REF_DIMS["num_heads"], layer_combination="residual", positional_split="interleaved"
    )["mlm_logits"]
    assert_close(_variant_logits(folder, loader, inputs, positional_split="interleaved"), expected, what="interleaved")


def test_an_unstated_variant_loads_as_base_with_a_warning(reference_checkpoint, caplog):
    folder, _ = reference_checkpoint(elc=True, seed=43)
    with caplog.at_level("WARNING"):
        model = AutoModelForMaskedLM.from_pretrained(folder)
    assert model.config.elc_variant == "base"
    assert "elc_variant='zero'" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        AutoModelForMaskedLM.from_pretrained(folder, elc_variant="normalized")
    assert "cannot tell its variant" not in caplog.text
    with pytest.raises(ValueError, match="weighted_output"):
        AutoModelForMaskedLM.from_pretrained(folder, elc_variant="weighted_output")


@pytest.mark.parametrize(
    "key",
    ["transformer.layers.0.attention.in_proj_v.bias", "classifier.nonlinearity.5.bias"],
    ids=["value bias", "decoder bias"],
)
def test_missing_tensors_are_an_error_naming_them(tmp_path, key):
    sd = random_reference_state_dict(
        vocab_size=REF_DIMS["vocab_size"],
        hidden_size=REF_DIMS["hidden_size"],
        num_layers=REF_DIMS["num_layers"],
        intermediate_size=REF_DIMS["intermediate_size"],
        elc=True,
        seed=44,
    )
    del sd[key]
    write_reference_checkpoint(tmp_path, elc=True, state_dict=sd, fmt="safetensors")
    with pytest.raises(ValueError, match="missing.*in_proj_v.bias|missing.*decoder.bias"):
        AutoModelForMaskedLM.from_pretrained(tmp_path)


def test_layer_count_comes_from_the_weights(tmp_path, inputs):
    """A config.json without num_hidden_layers builds as many layers as the weights hold (not a default 12); one
    that says another number is an error."""
    sd = write_reference_checkpoint(tmp_path / "a", elc=True, seed=45)
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    del config["num_hidden_layers"]
    (tmp_path / "a" / "config.json").write_text(json.dumps(config))
    model = AutoModelForMaskedLM.from_pretrained(tmp_path / "a")
    assert model.config.num_hidden_layers == REF_DIMS["num_layers"]
    with torch.no_grad():
        logits = model(inputs[0], attention_mask=inputs[1]).logits
    assert_close(logits, _naive(sd, *inputs, "elc", "base")["mlm_logits"], what="inferred layers")
    write_reference_checkpoint(tmp_path / "b", elc=True, seed=45, config_overrides={"num_hidden_layers": 7})
    with pytest.raises(ValueError, match="num_hidden_layers is 7"):
        AutoModelForMaskedLM.from_pretrained(tmp_path / "b")


def test_a_tensor_no_class_reads_is_an_error_naming_it(tmp_path):
    sd = random_reference_state_dict(
        vocab_size=REF_DIMS["vocab_size"],
        hidden_size=REF_DIMS["hidden_size"],
        num_layers=REF_DIMS["num_layers"],
        intermediate_size=REF_DIMS["intermediate_size"],
        elc=True,
        seed=46,
    )
    sd["transformer.layers.0.attention.gate.weight"] = torch.zeros(2)
    write_reference_checkpoint(tmp_path, elc=True, state_dict=sd, fmt="safetensors")
    for loader in (ElcBertModel, AutoModelForMaskedLM, AutoConfig):
        with pytest.raises(ValueError, match=r"no ELC-BERT class reads.*attention\.gate\.weight"):
            loader.from_pretrained(tmp_path)


# ------------------------------------------------------------------------------------------------ Hub arguments
def test_a_subfolder_reaches_the_weights_or_the_auto_classes_refuse_it(tmp_path, inputs):
    """`AutoConfig` drops `subfolder` before the config class reads the weights: the Auto classes refuse it, naming
    it, rather than read the architecture of other weights; a model class, or an Auto class given the config, loads
    the subfolder's checkpoint."""
    sd = write_reference_checkpoint(tmp_path / "sub", elc=True, seed=48, fmt="safetensors")
    expected = _naive(sd, *inputs, "elc", "base")["mlm_logits"]
    for loader in (AutoModelForMaskedLM, AutoConfig):
        with pytest.raises(ValueError, match="subfolder="):
            loader.from_pretrained(tmp_path, subfolder="sub")
    assert_close(_variant_logits(tmp_path, ElcBertForMaskedLM, inputs, subfolder="sub"), expected, what="class")
    config = ElcBertConfig.from_pretrained(tmp_path, subfolder="sub")
    auto = _variant_logits(tmp_path, AutoModelForMaskedLM, inputs, subfolder="sub", config=config)
    assert_close(auto, expected, what="Auto with the config")
    # Another model at the root, with a config.json of its own (one the same as the subfolder's cannot be told apart).
    write_reference_checkpoint(
        tmp_path, elc=False, seed=49, fmt="safetensors", config_overrides={"hidden_dropout_prob": 0.2}
    )
    with pytest.raises(ValueError, match="subfolder="):
        AutoModelForMaskedLM.from_pretrained(tmp_path, subfolder="sub")
    assert AutoModelForMaskedLM.from_pretrained(tmp_path).config.layer_combination == "residual"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """Writes Hub repos straight into a Hub cache of its own, read offline: make(repo_id, {revision: folder writer})
    -> repo_id, each revision a branch with a commit of its own (what `from_pretrained(..., revision=)` reads)."""
    import huggingface_hub.constants

    cache = tmp_path / "hub-cache"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)

    def make(repo_id, revisions):
        repo = cache / f"models--{repo_id.replace('/', '--')}"
        for number, (revision, write) in enumerate(revisions.items()):
            commit = f"{number + 1:040x}"
            write(repo / "snapshots" / commit)
            (repo / "refs").mkdir(parents=True, exist_ok=True)
            (repo / "refs" / revision).write_text(commit)
        return repo_id

    return make


def test_a_revision_is_honoured_or_refused_never_ignored(hub_cache, inputs):
    """The Auto classes cannot pass `revision` on to the config class: with a revision whose config.json is not the
    main branch's they refuse it, naming it, rather than build the main branch's architecture around its tensors."""
    states = {}

    def writer(revision, **kwargs):
        def write(folder):
            states[revision] = write_reference_checkpoint(folder, fmt="safetensors", **kwargs)

        return write

    repo = hub_cache(
        "someone/reference",
        {
            "main": writer("main", elc=False, seed=50),
            "v1": writer("v1", elc=True, seed=51, config_overrides={"hidden_dropout_prob": 0.2}),
        },
    )
    expected = _naive(states["v1"], *inputs, "elc", "base")["mlm_logits"]
    assert_close(_variant_logits(repo, ElcBertForMaskedLM, inputs, revision="v1"), expected, what="class")
    for loader in (AutoModelForMaskedLM, AutoConfig):
        with pytest.raises(ValueError, match="revision="):
            loader.from_pretrained(repo, revision="v1")
    config = ElcBertConfig.from_pretrained(repo, revision="v1")
    auto = _variant_logits(repo, AutoModelForMaskedLM, inputs, revision="v1", config=config)
    assert_close(auto, expected, what="Auto with the config")
    main = AutoModelForMaskedLM.from_pretrained(repo)
    assert main.config.layer_combination == "residual" and main.config.hidden_dropout_prob == 0.1


# ------------------------------------------------------------------------------------------------ supported hooks only
def _saved_keys(folder) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(Path(folder) / "model.safetensors"), "pt") as handle:
        return set(handle.keys())


def test_saving_writes_this_packages_key_names(reference_checkpoint, tmp_path):
    """The reference key names are renamed on loading only: neither a model loaded from a reference checkpoint nor
    one built from scratch is saved with them (the library undoes a registered conversion on saving by default), and
    `elc-bert convert` writes ours too."""
    from elc_bert.hub.convert import convert

    folder, _ = reference_checkpoint(elc=True, weighted_output=True, fmt="safetensors", seed=47)
    loaded = AutoModelForMaskedLM.from_pretrained(folder)
    fresh = ElcBertForMaskedLM(loaded.config)
    ours = set(fresh.state_dict())
    for name, model in (("loaded", loaded), ("fresh", fresh)):
        model.save_pretrained(tmp_path / name)
        assert _saved_keys(tmp_path / name) <= ours, name
    converted = convert(folder, tmp_path / "converted")
    assert _saved_keys(converted) <= ours


def test_reference_loading_uses_no_override_nor_private_api():
    """Reference checkpoints load through the library's supported hooks (a config class registered with AutoConfig,
    the config's `get_config_dict` / `from_dict`, a checkpoint conversion mapping): no ELC-BERT class overrides
    `from_pretrained`, and nothing in the package registers through the Auto classes' private `_model_mapping`."""
    import importlib
    import inspect
    import pkgutil

    import elc_bert
    from elc_bert.models import ElcBertPreTrainedModel

    family = 0
    for info in pkgutil.iter_modules(elc_bert.models.__path__):
        module = importlib.import_module(f"elc_bert.models.{info.name}")
        for name, member in vars(module).items():
            if inspect.isclass(member) and issubclass(member, (ElcBertPreTrainedModel, ElcBertConfig)):
                family += 1
                assert "from_pretrained" not in vars(member), f"{module.__name__}.{name} overrides from_pretrained"
    assert family >= 8
    package = Path(elc_bert.__file__).parent
    users = [str(path) for path in sorted(package.rglob("*.py")) if "_model_mapping" in path.read_text()]
    assert not users, f"private transformers API `_model_mapping` used in {users}"
