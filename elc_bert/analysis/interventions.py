"""Layer plans: run a loaded model's layers skipped, reordered, repeated or in parallel, without copying or changing
its weights (Sun et al., "Transformer Layers as Painters"; arXiv 2407.09298).

A plan is a list of steps over the model's layer indices 0..T-1: an `int` runs that layer, a `Parallel` runs a group
of layers on the same input and averages their outputs (k times, feeding the average back: looped parallel).

    with apply_layer_plan(model, painters_plan("reverse", num_layers=12, start=2)):
        outputs = model(**batch)
    # here the model is exactly as before

Stock residual stacks (BERT, RoBERTa, XLM-R, Llama-style decoders) run the plan's layers in order on the residual
stream: inside the block their layer list holds the plan's steps. Decoders: run with `use_cache=False` (a repeated
layer would write its KV-cache slot twice); rotary position embeddings are computed once per forward and handed to
every layer, so reordering keeps them right.

ELC-BERT and LTG-BERT encoders run plans themselves (`ElcBertEncoder.use_layer_plan`, whose docstring gives the ELC
semantics: every state keeps its slot, each block reads its own mixture over the slots filled so far).
"""

import contextlib
import random

import torch
from torch import nn

from ..models.configuration_layer_fusion import LayerFusionConfig
from ..models.errors import InputError
from ..models.layer_plans import Parallel, check_layer_plan

STRATEGIES = ("skip", "middle_repeat", "reverse", "random", "parallel", "looped_parallel")


def painters_plan(strategy: str, num_layers: int, start: int, seed: int = 0, iterations: int = 3) -> list:
    """The Painters (N, T) convention: layers 0..N and the last N layers (T-N..T-1) run as usual; the M = T-2N-1
    middle layers N+1..T-N-1 are dropped (skip), replaced by the centre layer (the upper of the two centre layers
    when M is even) M times (middle_repeat), reversed,
    shuffled with `seed` (random), run as one parallel block (parallel), or as a parallel block looped
    `iterations` times (looped_parallel)."""
    middle = list(range(start + 1, num_layers - start))
    if start < 0 or not middle:
        raise InputError(
            f"start N={start} leaves no middle layers in a {num_layers}-layer model (need 0 <= N <= T/2-1)"
        )
    head, tail = list(range(start + 1)), list(range(num_layers - start, num_layers))
    if strategy == "skip":
        changed = []
    elif strategy == "middle_repeat":
        changed = [middle[len(middle) // 2]] * len(middle)  # the centre layer (the upper one when M is even)
    elif strategy == "reverse":
        changed = middle[::-1]
    elif strategy == "random":
        changed = middle[:]
        random.Random(seed).shuffle(changed)
    elif strategy in ("parallel", "looped_parallel"):
        changed = [Parallel(tuple(middle), iterations if strategy == "looped_parallel" else 1)]
    else:
        raise InputError(f"unknown strategy {strategy!r}; choose from {STRATEGIES}")
    return head + changed + tail


def skip_plan(num_layers: int, skipped) -> list:
    """Every layer in order except those in `skipped` (leave-one-out ablation: one index)."""
    skipped = {skipped} if isinstance(skipped, int) else set(skipped)
    return [i for i in range(num_layers) if i not in skipped]


def swap_plan(num_layers: int, first: int) -> list:
    """Layers `first` and `first + 1` swapped (the Painters single-layer probe)."""
    plan = list(range(num_layers))
    plan[first], plan[first + 1] = plan[first + 1], plan[first]
    return plan


def layer_list(model: nn.Module) -> tuple[nn.Module, str]:
    """The module holding the model's layer ModuleList, and its attribute name."""
    for module in model.modules():
        # BertEncoder.layer, LlamaModel.layers, ElcBertEncoder.layers; not e.g. a fusion head's per-depth list
        if not type(module).__name__.endswith(("Encoder", "Model", "Decoder", "Transformer")):
            continue
        for name in ("layer", "layers"):
            candidate = getattr(module, name, None)
            if isinstance(candidate, nn.ModuleList) and len(candidate):
                return module, name
    raise InputError(f"{type(model).__name__}: no layer list found (expected an encoder's `layer` or a `layers` list)")


def layer_modules(model: nn.Module) -> nn.ModuleList:
    """The model's layer ModuleList (`layer_list`)."""
    return getattr(*layer_list(model))


def num_layers(model: nn.Module) -> int:
    """How many layers the model's layer list holds (`layer_list`)."""
    return len(layer_modules(model))


class _ParallelBlock(nn.Module):
    """Runs `blocks` on one input and averages their outputs, `iterations` times; keeps the output format of the
    wrapped layers (a tensor, or a tuple whose first item is the hidden states)."""

    def __init__(self, blocks: list[nn.Module], iterations: int):
        super().__init__()
        self.blocks, self.iterations = blocks, iterations  # a plain list: no re-registration of the modules

    def forward(self, hidden_states, *args, **kwargs):
        for _ in range(self.iterations):
            outputs = [block(hidden_states, *args, **kwargs) for block in self.blocks]
            states = [output[0] if isinstance(output, tuple) else output for output in outputs]
            hidden_states = torch.stack(states).mean(0)
        if isinstance(outputs[0], tuple):
            return (hidden_states, *([None] * (len(outputs[0]) - 1)))
        return hidden_states


@contextlib.contextmanager
def apply_layer_plan(model: nn.Module, plan: list):
    """Runs `model` with its layers as `plan` says inside the `with` block; restores it exactly on leaving. A
    layer-fusion model's head reads one state per backbone layer, so under it only plans of as many steps as the
    backbone has layers can run (a swap, a reversed order); others raise ValueError before anything changes."""
    owner, name = layer_list(model)
    layers = num_layers(model)
    if getattr(model.config, "model_type", None) == LayerFusionConfig.model_type and len(plan) != layers:
        raise InputError(
            f"a layer plan of {len(plan)} steps over a layer-fusion model, whose head reads one state per backbone "
            f"layer ({layers}): plans that skip or repeat layers cannot run under the head; analyse its backbone"
        )
    if hasattr(owner, "use_layer_plan"):  # our encoders run plans through their own hook
        with owner.use_layer_plan(plan):
            yield model
        return
    original = getattr(owner, name)
    check_layer_plan(plan, len(original))
    steps = [
        _ParallelBlock([original[i] for i in step.layers], step.iterations)
        if isinstance(step, Parallel)
        else original[step]
        for step in plan
    ]
    # Assigning through the module's own dict keeps `original` registered nowhere else and untouched.
    owner._modules[name] = nn.ModuleList(steps)
    try:
        yield model
    finally:
        owner._modules[name] = original


@contextlib.contextmanager
def edit_parameters(model: nn.Module, named_parameters, edit):
    """Inside the block, each parameter `p` named `name` of `named_parameters` holds `edit(name, p)` (a tensor of p's
    shape; None leaves it as it is); the original tensors are copied back on leaving, bit for bit."""
    saved = []
    try:
        with torch.no_grad():
            for name, parameter in named_parameters:
                new = edit(name, parameter.detach())
                if new is not None:
                    saved.append((parameter, parameter.detach().clone()))
                    parameter.copy_(new)
        yield model
    finally:
        with torch.no_grad():
            for parameter, original in saved:
                parameter.copy_(original)


def scale_layer_weights(model: nn.Module, index: int, factor: float):
    """Multiplies every weight of layer `index` by `factor` inside the `with` block (0.9 in the heterogeneity
    study); the original tensors are copied back on leaving, bit for bit."""
    return edit_parameters(model, layer_modules(model)[index].named_parameters(), lambda name, w: w * factor)
