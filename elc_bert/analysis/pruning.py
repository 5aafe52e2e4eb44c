"""Pruning: layers dropped for good, leaving a shallower model of the same class that `save_pretrained` writes and
`AutoModel*` loads (what ShortGPT and short-transformers' `prune` do with a layer-importance finding).

A pruned model computes what its parent computes under the layer plan that skips the same layers
(`skip_plan(L, dropped)`): the kept layers in order, each with its own weights. On ELC-BERT each kept block reads
its mixture over the states that are still there: its logits for the dropped blocks' outputs are removed, and the
softmax over the rest is exactly the plan's renormalised mixture (also the `weighted_output` variant's output
mixture). Stock encoders and Llama-style decoders lose the layers from their layer list; decoders' layers are
renumbered (`layer_idx`: each layer's slot in the KV cache) and a per-layer `config.layer_types` is sliced.

Over a layer-fusion model the backbone is pruned and the fusion module keeps the depth parameters of the states
that remain: DWAtt its value MLPs, value norms and depth embeddings, Concat the columns of its projection, Base+n on
ELC-BERT its extra blocks' logits, as the backbone's blocks.

    small = prune(model, drop=[3, 4])
    small.save_pretrained("pruned")   # AutoModelForMaskedLM.from_pretrained("pruned") loads it
"""

import copy
import json
import logging
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from ..models.configuration_layer_fusion import LayerFusionConfig
from ..models.errors import InputError
from ..models.modeling_layer_fusion import (
    ConcatFusion,
    DepthWiseAttention,
    ExtraLayers,
    LastLayer,
    LayerAverage,
)
from ..runs.saved import replacing_folder
from .interventions import layer_list, num_layers

logger = logging.getLogger(__name__)


def kept_layers(total: int, drop: Iterable[int]) -> list[int]:
    """The layers 0..total-1 left when `drop` goes; InputError naming a repeated, out-of-range or non-int index, or
    a drop of every layer."""
    drop = list(drop)
    for index in drop:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < total:
            raise InputError(f"layer {index!r} to drop: layer indices are ints in 0..{total - 1}")
    repeated = sorted({index for index in drop if drop.count(index) > 1})
    if repeated:
        raise InputError(f"layers to drop name {repeated} more than once")
    kept = [index for index in range(total) if index not in set(drop)]
    if not kept:
        raise InputError(f"dropping every layer ({total}) leaves no model: keep at least one")
    return kept


def kept_from_plan(total: int, plan: Iterable[int]) -> list[int]:
    """The layers a plan keeps, for a plan given as the layers to keep: strictly increasing ints in 0..total-1 (a
    pruned model runs its layers once each, in order; a plan that repeats, reorders or runs layers in parallel has
    no pruned model)."""
    plan = list(plan)
    if any(isinstance(step, bool) or not isinstance(step, int) for step in plan):
        raise InputError(f"a plan to prune keeps layers by index (ints), got {plan}")
    if any(later <= earlier for earlier, later in zip(plan, plan[1:])):
        raise InputError(
            f"a plan to prune keeps each layer at most once, in order: {plan} repeats or reorders layers (run such a "
            "plan with apply_layer_plan; it has no pruned model)"
        )
    return kept_layers(total, [index for index in range(total) if index not in set(plan)])


def prune(model: nn.Module, drop: Iterable[int]) -> nn.Module:
    """A copy of `model` without the layers `drop` (indices into its layer list), its config's `num_hidden_layers`
    updated; `model` is left as it is. Refused (InputError) before any copy: an index out of range or repeated,
    every layer, a model without a layer list or with a fusion kind this function does not know."""
    fusion = getattr(model.config, "model_type", None) == LayerFusionConfig.model_type
    if fusion:
        known = (LastLayer, LayerAverage, DepthWiseAttention, ConcatFusion, ExtraLayers)
        if not isinstance(model.base_model.fusion, known):
            raise InputError(
                f"{type(model.base_model.fusion).__name__}: pruning does not know which of this fusion module's "
                "parameters belong to which backbone state; prune the backbone, then wrap it again"
            )
    kept = kept_layers(num_layers(model), drop)
    pruned = copy.deepcopy(model)
    owner, name = layer_list(pruned)
    layers = getattr(owner, name)
    total = len(layers)
    # The states z_0..z_L that remain: the embeddings (slot 0) and the kept layers' outputs (slot index + 1).
    slots = [0] + [index + 1 for index in kept]
    if getattr(owner, "elc", False):  # ELC-BERT: each block's mixture over the states that remain
        for position, index in enumerate(kept):
            _keep_entries(layers[index], "prev_layer_weights", slots[: position + 1])
        if hasattr(owner, "output_layer_weights"):
            _keep_entries(owner, "output_layer_weights", slots)
    for position, index in enumerate(kept):
        for module in layers[index].modules():
            if isinstance(getattr(module, "layer_idx", None), int):  # a decoder layer's KV-cache slot
                module.layer_idx = position
    owner._modules[name] = nn.ModuleList(layers[index] for index in kept)
    configs = [pruned.config.backbone_config] if fusion else [pruned.config]
    configs += [getattr(pruned.get_base_model() if fusion else pruned, "config", None)]
    for config in {id(c): c for c in configs if c is not None}.values():
        config.num_hidden_layers = len(kept)
        if isinstance(getattr(config, "layer_types", None), list) and len(config.layer_types) == total:
            config.layer_types = [config.layer_types[index] for index in kept]
    if fusion:
        _prune_fusion(pruned.base_model.fusion, slots, total)
    return pruned


def _keep_entries(module: nn.Module, name: str, entries: list[int], dim: int = 0) -> None:
    """Replaces the parameter or buffer `name` of `module` by its `entries` along `dim` (a new tensor)."""
    tensor = getattr(module, name)
    kept = tensor.detach().index_select(dim, torch.tensor(entries, device=tensor.device)).clone()
    if isinstance(tensor, nn.Parameter):
        setattr(module, name, nn.Parameter(kept, requires_grad=tensor.requires_grad))
    else:
        module.register_buffer(name, kept, persistent=name not in module._non_persistent_buffers_set)


def _prune_fusion(fusion: nn.Module, slots: list[int], total: int) -> None:
    """The fusion module's depth parameters of the states `slots` (of z_0..z_total) alone."""
    fused = [slot - fusion.first_state for slot in slots if slot >= fusion.first_state]  # indices among its S states
    if isinstance(fusion, DepthWiseAttention):
        fusion.value_mlps = nn.ModuleList(fusion.value_mlps[i] for i in fused)
        fusion.value_layer_norms = nn.ModuleList(fusion.value_layer_norms[i] for i in fused)
        _keep_entries(fusion, "layer_positions", fused)
    elif isinstance(fusion, ConcatFusion):
        hidden = fusion.proj.out_features
        columns = [i * hidden + j for i in fused for j in range(hidden)]
        _keep_entries(fusion.proj, "weight", columns, dim=1)
        fusion.proj.in_features = len(columns)
    elif isinstance(fusion, ExtraLayers) and hasattr(fusion.layers[0], "prev_layer_weights"):
        # extra block e reads z_0..z_total and the extra blocks before it (slots total+1 ... total+e)
        for extra, layer in enumerate(fusion.layers):
            _keep_entries(layer, "prev_layer_weights", slots + [total + 1 + i for i in range(extra)])


PRUNING_RECORD = "pruning.json"  # beside a pruned folder's weights: the parent and the layers kept


def prune_saved(
    source: str | Path,
    out_dir: str | Path,
    drop: Iterable[int] | None = None,
    keep: Iterable[int] | None = None,
    overwrite: bool = False,
    allow_unloaded_weights: bool = False,
) -> Path:
    """`elc-bert prune`: the saved model `source` (a folder or a Hub name; its class as its config's `architectures`
    names it, head included) without the layers `drop` (or with the layers `keep` alone), written to `out_dir` with
    its tokenizer and `pruning.json` (the parent, the layers kept and dropped). Everything that can be refused is
    refused before the weights load (the layers against the config's depth, `out_dir`); the folder is written whole
    or not at all."""
    import transformers
    from transformers import AutoConfig

    from .. import models
    from ..data.tokenizer import load_tokenizer
    from ..models.loading import check_weights_loaded, load_pretrained
    from ..pretrained import find_tokenizer, resolve_model

    if (drop is None) == (keep is None):
        raise InputError("name the layers to drop or the layers to keep (one of the two)")
    source = resolve_model(str(source))
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
        raise InputError(f"{out_dir} exists and is not empty: choose another folder or pass --overwrite")
    if Path(source).exists() and out_dir.resolve() == Path(source).resolve():
        raise InputError(f"{out_dir} is the model folder being pruned: write the pruned model elsewhere")
    config = AutoConfig.from_pretrained(source)
    names = getattr(config, "architectures", None) or []
    found = [getattr(module, names[0], None) for module in (models, transformers)] if len(names) == 1 else []
    model_class = next((cls for cls in found if cls is not None), None)
    if model_class is None:
        raise InputError(f"{source}: its config.json names no model class that can be loaded (architectures: {names})")
    depth_config = getattr(config, "backbone_config", config)
    total = depth_config.num_hidden_layers
    kept = kept_from_plan(total, keep) if keep is not None else kept_layers(total, drop)
    tokenizer_source = find_tokenizer([source])
    model, loading_info = load_pretrained(model_class, source)
    if not allow_unloaded_weights:
        check_weights_loaded(source, model, loading_info, "Pass --allow-unloaded-weights to prune it anyway.")
    pruned = prune(model.eval(), [index for index in range(total) if index not in kept])
    record = {"source": str(source), "layers": total, "kept": kept, "dropped": sorted(set(range(total)) - set(kept))}
    with replacing_folder(out_dir, out_dir.with_name(out_dir.name + ".partial")) as partial:
        pruned.save_pretrained(partial)
        load_tokenizer(tokenizer_source).save_pretrained(partial)
        (partial / PRUNING_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    logger.info("%s: %d of %d layers kept (%s)", out_dir, len(kept), total, kept)
    return out_dir
