"""Weight manipulations of one layer (the heterogeneity study's diagnostics, arXiv 2603.19348): each a context manager
that changes the layer's weights in place and restores them bit for bit on leaving, the neighbour prediction some of
them substitute, and the sweep of a metric under all of them.

Tensor types: a layer's parameters are matched across layers by name (`attention.self.query.weight`, ...); a type is
one whose shape is the same in every layer (ELC-BERT's `prev_layer_weights`, one logit per earlier state, is not).

Neighbour prediction of layer l, per tensor type W (T layers, 0-based):
    pred_l = (W_{l-1} + W_{l+1}) / 2 for 0 < l < T-1;  pred_0 = W_1;  pred_{T-1} = W_{T-2} (the one neighbour)
    R^2_l = 1 - ||W_l - pred_l||^2 / ||W_l - mean(W_l)||^2      (mean over the tensor's entries, Frobenius norms)
A layer's pooled R^2 is the same ratio with the sums taken over all its tensor types. A tensor with no spread
(a LayerNorm weight of ones, a bias of zeros: the denominator is 0) has no R^2 (None); it still counts in the pooled
sums.
"""

import torch
from tqdm.auto import tqdm

from ..models.errors import InputError
from .interventions import edit_parameters, layer_modules, num_layers, scale_layer_weights

SCALES = (0.8, 0.9, 1.1)  # the study's scalings; only 0.9 kept quality in SmolLM2-135M
NOISE = 0.1  # additive noise: std as a fraction of each tensor's RMS
PRUNE_FRACTION = 0.5  # magnitude pruning: the share of each matrix's entries set to 0, smallest |w| first
RANK_FRACTION = 0.5  # rank truncation: the share of each matrix's singular values kept


def tensor_types(model) -> list[str]:
    """The parameter names that every layer has, with one shape in all layers (the tensor types)."""
    shapes = [{name: p.shape for name, p in layer.named_parameters()} for layer in layer_modules(model)]
    return [name for name in shapes[0] if all(s.get(name) == shapes[0][name] for s in shapes)]


def _check_layer(model, layer: int) -> None:
    total = num_layers(model)
    if not isinstance(layer, int) or not 0 <= layer < total:
        raise InputError(f"layer {layer!r}: must be an int in 0..{total - 1} ({total} layers)")


def predicted_weights(model, layer: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Layer `layer`'s weights predicted from its neighbours (see the module docstring), per tensor type."""
    _check_layer(model, layer)
    layers = layer_modules(model)
    if len(layers) < 2:
        raise InputError(f"{type(model).__name__} has one layer: no neighbour to predict it from")
    neighbours = [i for i in (layer - 1, layer + 1) if 0 <= i < len(layers)]
    parameters = [dict(layers[i].named_parameters()) for i in neighbours]
    return {name: sum(p[name].detach().to(dtype) for p in parameters) / len(parameters) for name in tensor_types(model)}


def _r2(residual: float, spread: float) -> float | None:
    return 1 - residual / spread if spread > 0 else None


@torch.no_grad()
def weight_predictability(model) -> dict:
    """R^2 of every layer's weights predicted from its neighbours, pooled and per tensor type (module docstring);
    a one-layer model has no prediction (an empty list of layers)."""
    layers, types = layer_modules(model), tensor_types(model)
    rows = []
    for index in range(len(layers) if len(layers) > 1 else 0):
        prediction, weights = predicted_weights(model, index, torch.float64), dict(layers[index].named_parameters())
        by_type, residual, spread = {}, 0.0, 0.0
        for name in types:
            w = weights[name].detach().double()
            r, s = float((w - prediction[name]).pow(2).sum()), float((w - w.mean()).pow(2).sum())
            by_type[name] = _r2(r, s)
            residual, spread = residual + r, spread + s
        rows.append({"layer": index, "r2": _r2(residual, spread), "r2_by_type": by_type})
    return {"tensor_types": types, "layers": rows}


def edit_layer_weights(model, layer: int, edit):
    """Inside the block, each parameter `p` named `name` of layer `layer` holds `edit(name, p)` (`edit_parameters`)."""
    _check_layer(model, layer)
    return edit_parameters(model, layer_modules(model)[layer].named_parameters(), edit)


def substitute_predicted_weights(model, layer: int):
    """Layer `layer`'s tensor types replaced by their neighbour prediction inside the block."""
    prediction = predicted_weights(model, layer)
    return edit_layer_weights(model, layer, lambda name, w: prediction.get(name))


def add_weight_noise(model, layer: int, relative_std: float = NOISE, seed: int = 0):
    """Every parameter W of layer `layer` plus relative_std * RMS(W) * N(0, 1) noise (seeded) inside the block."""
    generator = torch.Generator().manual_seed(seed)

    def noisy(name, w):
        noise = torch.randn(w.shape, generator=generator, dtype=torch.float32).to(w.device)
        return w + relative_std * w.float().pow(2).mean().sqrt() * noise

    return edit_layer_weights(model, layer, noisy)


def magnitude_prune(model, layer: int, fraction: float = PRUNE_FRACTION):
    """In every weight matrix (2-D parameter) of layer `layer`, the `fraction` of entries smallest in |w| set to 0
    inside the block (ties at the cut: the first in storage order)."""
    if not 0 <= fraction <= 1:
        raise InputError(f"pruning fraction {fraction}: must be in [0, 1]")

    def pruned(name, w):
        if w.dim() != 2:
            return None
        count = int(round(fraction * w.numel()))
        flat = w.flatten().clone()
        flat[torch.argsort(flat.abs(), stable=True)[:count]] = 0
        return flat.view_as(w)

    return edit_layer_weights(model, layer, pruned)


def truncate_rank(model, layer: int, fraction: float = RANK_FRACTION):
    """Every weight matrix (2-D parameter) of layer `layer` replaced by its best rank-k approximation (SVD), k =
    max(1, round(fraction * min(rows, columns))), inside the block."""
    if not 0 < fraction <= 1:
        raise InputError(f"rank fraction {fraction}: must be in (0, 1]")

    def truncated(name, w):
        if w.dim() != 2:
            return None
        k = max(1, round(fraction * min(w.shape)))
        u, s, vh = torch.linalg.svd(w.double(), full_matrices=False)
        return (u[:, :k] * s[:k]) @ vh[:k]

    return edit_layer_weights(model, layer, truncated)


def manipulations(
    scales=SCALES, noise: float = NOISE, prune: float = PRUNE_FRACTION, rank: float = RANK_FRACTION, seed: int = 0
) -> dict:
    """The sweep's manipulations, by name: each takes (model, layer) and returns a context manager."""
    named = {f"scale {s:g}": (lambda m, i, s=s: scale_layer_weights(m, i, s)) for s in scales}
    named[f"noise {noise:g}"] = lambda m, i: add_weight_noise(m, i, noise, seed + i)
    named[f"prune {100 * prune:g}%"] = lambda m, i: magnitude_prune(m, i, prune)
    named[f"rank {100 * rank:g}%"] = lambda m, i: truncate_rank(m, i, rank)
    named["predicted"] = substitute_predicted_weights
    return named


def manipulation_sweep(model, metric, layers=None, **settings) -> dict:
    """The metric (a TaskMetric, CustomMetric, ...) with each manipulation of `manipulations(**settings)` applied
    to each layer in turn (default: every layer; a one-layer model has no "predicted"), and its change in % of
    the unmodified model's value (None for the drift metric, whose baseline is 0)."""
    total = num_layers(model)
    layers = list(range(total)) if layers is None else list(layers)
    for layer in layers:
        _check_layer(model, layer)
    named = manipulations(**settings)
    if total < 2:
        del named["predicted"]
    base = metric()
    rows = []
    for layer in tqdm(layers, desc="weight manipulations"):
        values = {}
        for name, manipulation in named.items():
            with manipulation(model, layer):
                values[name] = metric()
        changes = {name: 100 * (v - base) / abs(base) if metric.relative else None for name, v in values.items()}
        rows.append({"layer": layer, "metric": values, "change_percent": changes})
    return {"metric": metric.name, "baseline": base, "manipulations": list(named), "layers": rows}
