"""Layer plans: running an encoder's blocks other than once each in order (Sun et al., "Transformer Layers as
Painters", arXiv 2407.09298): blocks skipped, reordered, repeated or run in parallel. The encoders take a plan through
their `use_layer_plan` hook; `analysis/interventions.py` builds plans and applies them.

A plan is a list of steps: an `int` runs that block, a `Parallel` runs a group of blocks on the same input and
averages their outputs. Under a plan every ELC state keeps its identity: block j's output fills slot y_{j+1} (a block
run again overwrites it) and each block reads its mixture over the slots filled so far, renormalised, so that a
skipped block counts in no later mixture, and the plan of every block in order is the plain forward. LTG-BERT: the
blocks continue the residual stream in the plan's order. In a `Parallel` group every block reads the states as they
were before the group; the mean of the group's outputs is what the stream and the hidden states carry on.
"""

from dataclasses import dataclass

import torch

from .errors import InputError


@dataclass(frozen=True)
class Parallel:
    """A layer-plan step: `layers` run on the same input and their outputs are averaged; `iterations` > 1 feeds the
    average back (looped parallel)."""

    layers: tuple[int, ...]
    iterations: int = 1


def check_layer_plan(plan: list, num_layers: int) -> None:
    """Raises InputError naming the first step of `plan` (block indices and `Parallel` groups) whose indices are not
    ints in 0..num_layers-1."""
    for step in plan:
        indices = step.layers if isinstance(step, Parallel) else (step,)
        for index in indices:
            if not isinstance(index, int) or not 0 <= index < num_layers:
                raise InputError(f"layer plan step {step!r}: layer indices must be ints in 0..{num_layers - 1}")


def run_layer_plan(
    layers,
    plan,
    stack,
    embeddings,
    block_inputs,
    output_attentions=False,
    output_hidden_states=False,
    kernel_options=None,
):
    """Runs the ELC-BERT blocks `layers` as `plan` says from y_0 = `embeddings`: ELC when `stack` (the encoder's
    `LayerStack`) is given, each block reading its mixture of it; else the residual stream. `block_inputs`: what every
    block reads besides its hidden states; `kernel_options`: FlexAttention's. Returns the output, the states (y_0 and
    each step's output, with `output_hidden_states`) and the attention probabilities of each block run; the last
    step's outputs are in `stack` on return."""
    states, attentions = [embeddings], []
    output, written = embeddings, []
    for step in plan:
        group, iterations = (step.layers, step.iterations) if isinstance(step, Parallel) else ((step,), 1)
        for _ in range(iterations):
            for slot, state in written:  # the last group's outputs fill their slots before the next mixture
                stack.write(slot, state)
            outputs = []
            for index in group:
                layer = layers[index]
                hidden_states = stack.mix(layer.prev_layer_weights) if stack is not None else output
                block_output, probabilities = layer(
                    hidden_states, *block_inputs, output_attentions=output_attentions, kernel_options=kernel_options
                )
                outputs.append(block_output)
                if probabilities is not None:
                    attentions.append(probabilities)
            written = (
                [(index + 1, block_output) for index, block_output in zip(group, outputs)] if stack is not None else []
            )
            output = outputs[0] if len(outputs) == 1 else torch.stack(outputs).mean(0)
        if output_hidden_states:
            states.append(output)
    for slot, state in written:
        stack.write(slot, state)
    return output, states, attentions
