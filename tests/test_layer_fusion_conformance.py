"""The layer-fusion classes as `transformers` models: hidden states, resizing, weight tying, gradient checkpointing,
DDP, loading with other label counts, buffers, `from_backbone` and the attention implementation.

In the style of the library's model tests, over a tiny BERT and a tiny ELC-BERT backbone and the DWAtt and Base+n
fusions (the other fusions where cheap). Every number is checked against a computation that does not go through the
behaviour under test: the backbone run on its own, the same model without checkpointing, the model before saving.
"""

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import check_close, fusion_model, make_batch, pad_id_of, perturb, tiny_backbone_config
from safetensors.torch import load_file, save_file
from torch.nn.parallel import DistributedDataParallel
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)
from transformers.modeling_layers import GradientCheckpointingLayer

from elc_bert import (
    InputError,
    LayerFusionConfig,
    LayerFusionForMaskedLM,
    LayerFusionForSequenceClassification,
    LayerFusionForTokenClassification,
    LayerFusionModel,
)

KINDS = ["bert", "elc_bert"]
FUSIONS = ["dwatt", "extra_layers"]
ALL_FUSIONS = ["dwatt", "concat", "average", "last", "extra_layers"]
HEADS = [LayerFusionForTokenClassification, LayerFusionForSequenceClassification, LayerFusionForMaskedLM]
HEAD_IDS = ["token", "sequence", "mlm"]
AUTO = {
    LayerFusionModel: AutoModel,
    LayerFusionForTokenClassification: AutoModelForTokenClassification,
    LayerFusionForSequenceClassification: AutoModelForSequenceClassification,
    LayerFusionForMaskedLM: AutoModelForMaskedLM,
}
LENGTHS = [9, 6, 3]
NUM_LABELS = 3


def batch_for(model, seed=0):
    """A right-padded batch for `model`, and labels that fit its head (-100 at padding)."""
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(model.config.backbone_config), seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    if isinstance(model, LayerFusionForSequenceClassification):
        labels = torch.randint(0, NUM_LABELS, (len(LENGTHS),), generator=gen)
    else:
        high = model.config.backbone_config.vocab_size if isinstance(model, LayerFusionForMaskedLM) else NUM_LABELS
        labels = torch.randint(0, high, input_ids.shape, generator=gen)
        labels[attention_mask == 0] = -100
    return input_ids, attention_mask, labels


def loss_of(model, input_ids, attention_mask, labels):
    """The head's own loss; for the bare `LayerFusionModel`, a fixed random projection of the fused states."""
    if isinstance(model, LayerFusionModel):
        fused = model(input_ids, attention_mask=attention_mask).last_hidden_state
        weights = torch.randn(fused.shape, generator=torch.Generator().manual_seed(7))
        return (fused * weights * attention_mask[..., None]).sum() / fused[attention_mask.bool()].numel()
    return model(input_ids, attention_mask=attention_mask, labels=labels).loss


def gradients(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def trainable_without_gradient(model):
    return [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]


def main_output(output):
    return output.logits if hasattr(output, "logits") else output.last_hidden_state


def real(tensor, attention_mask):
    return tensor[attention_mask.bool()] if tensor.dim() == 3 else tensor


# ------------------------------------------------------------------------------------------- 1. hidden states
@pytest.mark.parametrize("fusion", ALL_FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_hidden_states_are_backbone_states_then_fused_output(kind, fusion):
    """`hidden_states` = z_0..z_L (the backbone's own) then h, whether asked by the config or in the call, from the
    base model and from every head; an index or a list of indices keeps those (negative from the end), None
    elsewhere."""
    model = fusion_model(LayerFusionModel, kind=kind, fusion=fusion)
    if fusion in ("dwatt", "concat"):
        perturb(model.fusion, seed=2)
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(model.config.backbone_config))
    with torch.no_grad():
        alone = model.backbone(input_ids, attention_mask=attention_mask, output_hidden_states=True)
        plain = model(input_ids, attention_mask=attention_mask)
        called = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
    expected = [*alone.hidden_states[:-1], alone.last_hidden_state]  # z_L: the backbone's own output
    num_layers = model.config.backbone_config.num_hidden_layers
    assert plain.hidden_states is None
    assert len(called.hidden_states) == num_layers + 2
    for n, (got, want) in enumerate(zip(called.hidden_states, expected)):
        check_close(got, want, 1e-6, f"z_{n}", attention_mask)
    check_close(called.hidden_states[-1], plain.last_hidden_state, 1e-6, "h", attention_mask)

    model.config.output_hidden_states = True  # the config's default, no argument in the call
    with torch.no_grad():
        from_config = model(input_ids, attention_mask=attention_mask)
    assert from_config.hidden_states is not None and len(from_config.hidden_states) == num_layers + 2
    model.config.output_hidden_states = False

    for selection, kept in [([0, -1], {0, num_layers + 1}), (-2, {num_layers}), ([1], {1})]:
        with torch.no_grad():
            selected = model(input_ids, attention_mask=attention_mask, output_hidden_states=selection).hidden_states
        assert len(selected) == num_layers + 2, selection
        assert {i for i, state in enumerate(selected) if state is not None} == kept, selection
        for i in kept:
            check_close(selected[i], called.hidden_states[i], 0.0, f"selection {selection}: entry {i}", attention_mask)

    for head in HEADS:
        model = fusion_model(head, kind=kind, fusion=fusion, num_labels=NUM_LABELS)
        if fusion in ("dwatt", "concat"):
            perturb(model.base_model.fusion, seed=2)
        with torch.no_grad():
            base = model.base_model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
            output = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
            model.config.output_hidden_states = True
            by_config = model(input_ids, attention_mask=attention_mask)
        for states in (output.hidden_states, by_config.hidden_states):
            assert states is not None and len(states) == num_layers + 2, head.__name__
            for n, (got, want) in enumerate(zip(states, base.hidden_states)):
                check_close(got, want, 0.0, f"{head.__name__} hidden_states[{n}]", attention_mask)

    # A training step of the token head reads the labelled positions only; the states still come B x T.
    model = fusion_model(LayerFusionForTokenClassification, kind=kind, fusion=fusion, num_labels=NUM_LABELS).train()
    input_ids, attention_mask, labels = batch_for(model)
    labels[:, 1] = -100
    output = model(input_ids, attention_mask=attention_mask, labels=labels, output_hidden_states=[-1])
    width = model.config.backbone_config.hidden_size
    assert output.hidden_states[-1].shape == (*input_ids.shape, width)
    with torch.no_grad():
        fused = model.eval().base_model(input_ids, attention_mask=attention_mask).last_hidden_state
    scored = labels != -100
    # 1e-5: the training step fuses the labelled tokens only, in another order of float operations
    check_close(output.hidden_states[-1][scored], fused[scored], 1e-5, "h in a training step")


# ------------------------------------------------------------------------------------- 2. resize_token_embeddings
@pytest.mark.parametrize(
    "head, tie", [(LayerFusionForMaskedLM, True), (LayerFusionForMaskedLM, False), (LayerFusionModel, True)]
)
@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_resize_token_embeddings_saves_and_reloads(kind, fusion, head, tie, tmp_path):
    model = fusion_model(head, kind=kind, fusion=fusion, tie_word_embeddings=tie)
    vocab = model.config.backbone_config.vocab_size
    model.resize_token_embeddings(vocab + 8)
    perturb(model, seed=3, std=0.02)  # every weight, the new rows included, away from its init
    assert model.get_input_embeddings().weight.shape[0] == vocab + 8
    assert model.config.backbone_config.vocab_size == vocab + 8, "the backbone's config owns the vocabulary"
    if head is LayerFusionForMaskedLM:
        decoder = model.get_output_embeddings()
        assert decoder.weight.shape[0] == vocab + 8
        assert (decoder.weight is model.get_input_embeddings().weight) == tie
    model.save_pretrained(tmp_path)

    loaded = AUTO[head].from_pretrained(tmp_path).eval()
    assert loaded.config.backbone_config.vocab_size == vocab + 8
    expected = model.state_dict()
    got = loaded.state_dict()
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value), f"{key} changed in save/load"
    if head is LayerFusionForMaskedLM:
        assert (loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight) == tie
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(model.config.backbone_config))
    input_ids[0, 1:4] = torch.tensor([vocab, vocab + 3, vocab + 7])  # the new tokens
    with torch.no_grad():
        want = main_output(model(input_ids, attention_mask=attention_mask))
        have = main_output(loaded(input_ids, attention_mask=attention_mask))
    check_close(have, want, 1e-6, "after resize, save and load", attention_mask)


# ------------------------------------------------------------------------------------------ 3. untied MLM decoder
@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_untied_mlm_decoder_survives_save_load_and_from_backbone(kind, fusion, tmp_path):
    model = fusion_model(LayerFusionForMaskedLM, kind=kind, fusion=fusion, tie_word_embeddings=False)
    decoder, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    assert decoder.weight is not embeddings.weight
    with torch.no_grad():
        decoder.weight.add_(0.05 * torch.randn(decoder.weight.shape, generator=torch.Generator().manual_seed(4)))
    assert not torch.equal(decoder.weight, embeddings.weight)
    model.save_pretrained(tmp_path / "fusion")
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "fusion").eval()
    assert loaded.get_output_embeddings().weight is not loaded.get_input_embeddings().weight
    assert torch.equal(loaded.get_output_embeddings().weight, decoder.weight), "decoder re-initialised on load"
    saved, got = model.state_dict(), loaded.state_dict()
    assert set(got) == set(saved) and all(torch.equal(got[key], value) for key, value in saved.items())
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(model.config.backbone_config))
    with torch.no_grad():
        want = model(input_ids, attention_mask=attention_mask).logits
        have = loaded(input_ids, attention_mask=attention_mask).logits
    check_close(have, want, 1e-6, "untied MLM logits after save/load", attention_mask)

    # An untied backbone MLM keeps its own decoder under from_backbone (tie_word_embeddings follows the backbone).
    torch.manual_seed(5)
    backbone_mlm = AutoModelForMaskedLM.from_config(tiny_backbone_config(kind, tie_word_embeddings=False))
    backbone_mlm.save_pretrained(tmp_path / "backbone")
    wrapped = LayerFusionForMaskedLM.from_backbone(str(tmp_path / "backbone"), fusion=fusion)
    assert not wrapped.config.tie_word_embeddings
    assert torch.equal(wrapped.get_output_embeddings().weight, backbone_mlm.get_output_embeddings().weight)
    assert wrapped.get_output_embeddings().weight is not wrapped.get_input_embeddings().weight


# ------------------------------------------------------------------------------------ 4. no pooler, DDP trains
@pytest.fixture(scope="module")
def process_group(tmp_path_factory):
    """A one-process gloo group: enough for DDP's check that every parameter got its gradient."""
    store = tmp_path_factory.mktemp("ddp") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("head", HEADS, ids=HEAD_IDS)
@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_parameter_trains_under_ddp_without_find_unused(kind, fusion, head, process_group):
    model = fusion_model(head, kind=kind, fusion=fusion, num_labels=NUM_LABELS).train()
    assert getattr(model.base_model.backbone, "pooler", None) is None, "the pooler never gets a gradient"
    input_ids, attention_mask, labels = batch_for(model)
    loss_of(model, input_ids, attention_mask, labels).backward()
    assert not trainable_without_gradient(model), trainable_without_gradient(model)

    model.zero_grad(set_to_none=True)
    ddp = DistributedDataParallel(model, find_unused_parameters=False)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    for _ in range(3):  # DDP refuses the second step when the first left a parameter without gradient
        optimizer.zero_grad()
        ddp(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        optimizer.step()


@pytest.mark.parametrize("fusion", FUSIONS)
def test_checkpoints_with_pooler_weights_load_quietly(fusion, tmp_path, capfd):
    """A BERT backbone folder (with its pooler) under from_backbone, and a fusion checkpoint written while the
    backbone still had one, load without a report and give the same outputs."""
    torch.manual_seed(0)
    AutoModel.from_config(tiny_backbone_config("bert")).save_pretrained(tmp_path / "bert")
    assert any("pooler" in key for key in load_file(tmp_path / "bert" / "model.safetensors"))
    capfd.readouterr()
    model = LayerFusionForTokenClassification.from_backbone(str(tmp_path / "bert"), fusion=fusion, num_labels=2)
    assert "LOAD REPORT" not in capfd.readouterr().err
    assert model.base_model.backbone.pooler is None

    model.save_pretrained(tmp_path / "fusion")
    weights = load_file(tmp_path / "fusion" / "model.safetensors")
    width = model.config.backbone_config.hidden_size
    weights["layer_fusion.backbone.pooler.dense.weight"] = torch.zeros(width, width)
    weights["layer_fusion.backbone.pooler.dense.bias"] = torch.zeros(width)
    save_file(weights, tmp_path / "fusion" / "model.safetensors", metadata={"format": "pt"})
    capfd.readouterr()
    loaded = AutoModelForTokenClassification.from_pretrained(tmp_path / "fusion").eval()
    assert "LOAD REPORT" not in capfd.readouterr().err
    input_ids, attention_mask, _ = batch_for(model)
    with torch.no_grad():
        want = model(input_ids, attention_mask=attention_mask).logits
        have = loaded(input_ids, attention_mask=attention_mask).logits
    check_close(have, want, 1e-6, "old checkpoint with pooler weights", attention_mask)


# ---------------------------------------------------------------------------------- 5. gradient checkpointing
@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non-reentrant"])
@pytest.mark.parametrize("head", [LayerFusionModel, *HEADS], ids=["base", *HEAD_IDS])
@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_gradient_checkpointing_same_gradients_and_trains(kind, fusion, head, reentrant):
    model = fusion_model(head, kind=kind, fusion=fusion, num_labels=NUM_LABELS).train()
    input_ids, attention_mask, labels = batch_for(model)
    loss_of(model, input_ids, attention_mask, labels).backward()
    expected = gradients(model)
    assert not trainable_without_gradient(model), trainable_without_gradient(model)

    # Count the calls of a sub-module of the backbone's first layer: a checkpointed layer runs it again in backward.
    layer = next(m for m in model.base_model.backbone.modules() if isinstance(m, GradientCheckpointingLayer))
    calls = []
    next(layer.children()).register_forward_hook(lambda *args: calls.append(1))
    model.zero_grad(set_to_none=True)
    model.activation_checkpointing_enable({"use_reentrant": reentrant})
    losses = [loss_of(model, input_ids, attention_mask, labels)]
    losses[0].backward()
    assert len(calls) == 2, f"{len(calls)} calls: the backbone's layers were not checkpointed"
    got = gradients(model)
    assert got.keys() == expected.keys()
    for name, grad in got.items():
        check_close(grad, expected[name], 1e-6, f"gradient of {name} with checkpointing")

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(4):
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss_of(model, input_ids, attention_mask, labels))
        losses[-1].backward()
    assert losses[-1] < losses[0], f"no training under checkpointing: {[round(x.item(), 4) for x in losses]}"


# ------------------------------------------------------------------------- 6. another label count on loading
@pytest.mark.parametrize("head", HEADS[:2], ids=HEAD_IDS[:2])
@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_from_pretrained_ignore_mismatched_sizes_new_label_count(kind, fusion, head, tmp_path):
    model = fusion_model(head, kind=kind, fusion=fusion, num_labels=NUM_LABELS)
    perturb(model, seed=6, std=0.05)
    model.save_pretrained(tmp_path)
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        AUTO[head].from_pretrained(tmp_path, num_labels=5)
    loaded = AUTO[head].from_pretrained(tmp_path, num_labels=5, ignore_mismatched_sizes=True)
    assert type(loaded) is head and loaded.config.num_labels == 5 and len(loaded.config.id2label) == 5
    assert loaded.classifier.weight.shape == (5, model.config.backbone_config.hidden_size)
    saved, got = model.state_dict(), loaded.state_dict()
    assert set(got) == set(saved)
    for key, value in saved.items():
        if not key.startswith("classifier."):
            assert torch.equal(got[key], value), f"{key} not loaded"
    weight = loaded.classifier.weight
    assert torch.isfinite(weight).all() and 0 < weight.std() < 0.5, "the new classifier is initialised"
    assert torch.equal(loaded.classifier.bias, torch.zeros(5))
    input_ids, attention_mask, _ = batch_for(model)
    labels = torch.randint(0, 5, (len(LENGTHS),) if head is LayerFusionForSequenceClassification else input_ids.shape)
    output = loaded.train()(input_ids, attention_mask=attention_mask, labels=labels)
    assert output.logits.shape[-1] == 5 and torch.isfinite(output.loss)


# --------------------------------------------------------------------------------------------------- 7. buffers
@pytest.mark.parametrize("kind", KINDS)
def test_buffers_are_deterministic_and_restored_by_init_weights(kind, tmp_path):
    """Every buffer is the same whatever the seed, and `_init_weights` (what loading runs for a missing key)
    gives DWAtt's depth embeddings back bit for bit: U[0, 1) vectors, fixed."""
    first = fusion_model(LayerFusionForTokenClassification, kind=kind, fusion="dwatt", seed=0, num_labels=2)
    second = fusion_model(LayerFusionForTokenClassification, kind=kind, fusion="dwatt", seed=1, num_labels=2)
    buffers = dict(second.named_buffers())
    for name, buffer in first.named_buffers():
        assert torch.equal(buffer, buffers[name]), f"buffer {name} depends on the seed"
    positions = first.base_model.fusion.layer_positions
    assert positions.min() >= 0 and positions.max() < 1 and positions.std() > 0.2

    with torch.no_grad():
        positions.zero_()
    first._init_weights(first.base_model.fusion)
    assert torch.equal(positions, buffers["layer_fusion.fusion.layer_positions"])

    # As the library checks it: built on the meta device, then `init_weights` gives every buffer its value.
    with torch.device("meta"):
        on_meta = LayerFusionForTokenClassification(second.config)
    on_meta.to_empty(device="cpu")
    on_meta.init_weights()
    for name, buffer in on_meta.named_buffers():
        assert torch.equal(buffer, buffers[name]), f"buffer {name} not restored by init_weights"

    second.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["layer_fusion.fusion.layer_positions"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded = AutoModelForTokenClassification.from_pretrained(tmp_path)
    assert torch.equal(loaded.base_model.fusion.layer_positions, buffers["layer_fusion.fusion.layer_positions"])


# ---------------------------------------------------------------------------- 8. from_pretrained, from_backbone
@pytest.mark.parametrize("head", [LayerFusionModel, LayerFusionForTokenClassification, LayerFusionForMaskedLM])
@pytest.mark.parametrize("kind", KINDS)
def test_from_pretrained_refuses_a_backbone_and_from_backbone_loads_it_once(kind, head, tmp_path, monkeypatch):
    torch.manual_seed(0)
    mlm = head is LayerFusionForMaskedLM
    auto_class = AutoModelForMaskedLM if mlm else AutoModel
    pretrained = auto_class.from_config(tiny_backbone_config(kind))
    perturb(pretrained, seed=8, std=0.02)
    folder = tmp_path / "backbone"
    pretrained.save_pretrained(folder)
    with pytest.raises(ValueError, match="from_backbone"):
        head.from_pretrained(folder)

    base_class = type(pretrained.base_model)
    built, load_kwargs = [], []
    original_init, original_load = base_class.__init__, auto_class.from_pretrained.__func__

    def counting_init(self, *args, **kwargs):
        built.append(1)
        original_init(self, *args, **kwargs)

    def spying_load(cls, *args, **kwargs):
        load_kwargs.append(kwargs)
        return original_load(cls, *args, **kwargs)

    monkeypatch.setattr(base_class, "__init__", counting_init)
    monkeypatch.setattr(auto_class, "from_pretrained", classmethod(spying_load))
    model = head.from_backbone(
        str(folder), fusion="dwatt", dtype=torch.bfloat16, attn_implementation="eager", revision="main", token=False
    )
    assert len(built) == 1, f"the backbone was built {len(built)} times"
    assert len(load_kwargs) == 1
    wanted = {"dtype": torch.bfloat16, "attn_implementation": "eager", "revision": "main", "token": False}
    assert wanted.items() <= load_kwargs[0].items(), load_kwargs[0]
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.base_model.backbone.config._attn_implementation == "eager"
    expected = pretrained.base_model.state_dict()
    got = model.base_model.backbone.state_dict()
    for key in got:
        assert torch.equal(got[key], expected[key].to(got[key].dtype)), key

    model.save_pretrained(tmp_path / "fusion")
    text = (tmp_path / "fusion" / "config.json").read_text()
    assert str(tmp_path) not in text, "a local path in the saved config"
    assert json.loads(text)["backbone_config"]["model_type"] == pretrained.config.model_type
    assert Path(tmp_path / "fusion" / "model.safetensors").exists()


# ------------------------------------------------------------------------------------ 9. attention implementation
@pytest.mark.parametrize("entry", ["from_config", "from_pretrained", "from_backbone"])
@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_attn_implementation_reaches_the_backbone(kind, fusion, entry, tmp_path):
    config = LayerFusionConfig(backbone_config=tiny_backbone_config(kind), fusion=fusion, num_labels=NUM_LABELS)
    if entry == "from_pretrained":
        fusion_model(
            LayerFusionForTokenClassification, kind=kind, fusion=fusion, num_labels=NUM_LABELS
        ).save_pretrained(tmp_path)
    elif entry == "from_backbone":
        torch.manual_seed(0)
        AutoModel.from_config(tiny_backbone_config(kind)).save_pretrained(tmp_path)

    logits = {}
    for implementation in ("eager", "sdpa"):
        torch.manual_seed(0)
        if entry == "from_config":
            model = AutoModelForTokenClassification.from_config(config, attn_implementation=implementation)
        elif entry == "from_pretrained":
            model = AutoModelForTokenClassification.from_pretrained(tmp_path, attn_implementation=implementation)
        else:
            model = LayerFusionForTokenClassification.from_backbone(
                str(tmp_path), fusion=fusion, num_labels=NUM_LABELS, attn_implementation=implementation
            )
        assert model.layer_fusion.backbone.config._attn_implementation == implementation
        assert model.config._attn_implementation == implementation
        input_ids, attention_mask, _ = batch_for(model)
        with torch.no_grad():
            logits[implementation] = model.eval()(input_ids, attention_mask=attention_mask).logits
    check_close(logits["sdpa"], logits["eager"], 1e-5, f"{entry}: sdpa vs eager", attention_mask)


@pytest.mark.parametrize("cached", [False, True], ids=["backbone", "feature-cache"])
@pytest.mark.parametrize("fusion", ["dwatt", "extra_layers"])
def test_kernel_options_reach_the_backbone_and_the_extra_blocks(fusion, cached, flex_kernel_options_calls):
    """`kernel_options` given to a fusion model (a keyword, as to `ElcBertModel`) reach every FlexAttention call of an
    ELC-BERT backbone, through the feature cache too, and of Base+n's extra blocks."""
    calls = flex_kernel_options_calls
    config = LayerFusionConfig(
        backbone_config=tiny_backbone_config("elc_bert"),
        fusion=fusion,
        num_labels=NUM_LABELS,
        freeze_backbone=cached,
        num_extra_layers=2,
    )
    model = AutoModelForTokenClassification.from_config(config, attn_implementation="flex_attention").eval()
    if cached:
        model.layer_fusion.enable_feature_cache()
    input_ids, attention_mask = make_batch([6, 4], pad_id=3)
    options = {"num_stages": 1}
    with torch.no_grad():
        model(input_ids, attention_mask=attention_mask, kernel_options=options)
    extra_blocks = config.num_extra_layers if fusion == "extra_layers" else 0
    assert calls == [options] * (config.backbone_config.num_hidden_layers + extra_blocks)


@pytest.mark.parametrize("fusion", ["dwatt", "extra_layers"])
def test_packed_sequences_stay_apart_through_a_fusion_model_on_elc_bert(fusion):
    """`position_ids` that restart mark packed sequences for an ELC-BERT backbone: a fusion head hands them to the
    backbone and to Base+n's extra blocks, so each sequence gets its logits alone (they were dropped before)."""
    model = fusion_model(LayerFusionForTokenClassification, "elc_bert", fusion, num_labels=3, freeze_backbone=True)
    generator = torch.Generator().manual_seed(0)
    sequences = [torch.randint(7, 90, (n,), generator=generator) for n in (6, 4, 5)]
    position_ids = torch.cat([torch.arange(len(ids)) for ids in sequences])[None]
    with torch.no_grad():
        packed = model(torch.cat(sequences)[None], position_ids=position_ids).logits[0]
        alone = torch.cat([model(ids[None]).logits[0] for ids in sequences])
    torch.testing.assert_close(packed, alone, rtol=0, atol=1e-5)
    model.layer_fusion.enable_feature_cache()
    with pytest.raises(InputError, match="feature cache.*position_ids"):
        model(torch.cat(sequences)[None], position_ids=position_ids)
