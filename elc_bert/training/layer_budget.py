"""A training budget by layer importance (`layer_budget`): after a warm-up, the least important layers stop training.

After `after_steps` (W) optimizer steps the importance of every layer is measured on fixed validation samples (the
analysis layer's leave-one-out: the change of the masked-token loss when the layer is skipped, handed in as
`importance`, since the job layers do not import each other) and the `freeze` (k) layers of least importance stop
taking weight gradients (`requires_grad` False). LAMB and AdamW step only parameters with a gradient, so the frozen
weights, their moments and their weight decay stay as they are. The choice is written to `layer_budget.json` in the
run folder and read back by a resumed run, which freezes the same layers (a second measurement on the resumed
weights could choose others).

Compute saved, counted analytically: a linear map with a d_in x d_out weight over N token positions costs 2 N d_in d_out
FLOPs forward, as many for the input gradient and as many for the weight gradient; a frozen layer skips its weight
gradients only (its input gradients still flow to the layers below), so it saves 2 N P_l FLOPs per step, P_l being
its matrix parameters. A step costs about 6 N P_layers + 12 N T D L (attention scores and their mixing, T the sample
length, D the width, L the layers) + 6 N_masked D V (the MLM head on the masked positions, V the vocabulary).
The measured side: the wall time of each optimizer step before and after the freeze (medians, this process's steps).
"""

import json
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import TrainerCallback

from ..data.jsonl import read_json
from ..job_configs.layer_budget import LayerBudget
from ..models.errors import InputError
from ..runs.saved import replace_file

logger = logging.getLogger(__name__)

RECORD = "layer_budget.json"  # in the run folder: the layers frozen, their importance, the compute saved

# (model, tokenizer, batches of {"input_ids", "attention_mask"} B x T, seed) -> one importance per layer, larger is
# more important
Importance = Callable[[torch.nn.Module, object, list[dict], int], list[float]]


def encoder_layers(model) -> torch.nn.ModuleList:
    return getattr(model, "module", model).base_model.encoder.layers


def measurement_batches(samples, pad_id: int, count: int, batch_size: int = 16) -> list[dict]:
    """`count` packed samples (evenly spaced over `samples`, each a dict with "input_ids"), padded into batches of
    input_ids and attention_mask (B x T)."""
    step = max(1, len(samples) // count)
    chosen = [samples[i]["input_ids"] for i in range(0, len(samples), step)][:count]
    batches = []
    for start in range(0, len(chosen), batch_size):
        rows = [torch.tensor(row, dtype=torch.long) for row in chosen[start : start + batch_size]]
        ids = pad_sequence(rows, batch_first=True, padding_value=pad_id)
        mask = pad_sequence([torch.ones_like(row) for row in rows], batch_first=True)
        batches.append({"input_ids": ids, "attention_mask": mask})
    return batches


def step_flops(model, batch_size: int, seq_length: int, mask_p: float, frozen=()) -> dict:
    """The analytic FLOPs of one training step (see the module docstring) and those the `frozen` layers save."""
    config = getattr(model, "module", model).config
    tokens = batch_size * seq_length
    matrices = [sum(p.numel() for p in layer.parameters() if p.dim() >= 2) for layer in encoder_layers(model)]
    width, depth = config.hidden_size, len(matrices)
    total = 6 * tokens * sum(matrices) + 12 * tokens * seq_length * width * depth
    total += 6 * mask_p * tokens * width * (config.vocab_size + width)
    saved = sum(2 * tokens * matrices[layer] for layer in frozen)
    return {"per_step": total, "saved_per_step": saved, "saved_share": saved / total}


def freeze_layers(model, layers) -> None:
    encoder = encoder_layers(model)
    for index in layers:
        for parameter in encoder[index].parameters():
            parameter.requires_grad_(False)
            parameter.grad = None  # the step that measured must not apply a stale gradient later


class FreezeLeastImportantLayers(TrainerCallback):
    """Measures layer importance after `budget.after_steps` steps and freezes the `budget.freeze` least important
    layers (or, resumed after that step, those `layer_budget.json` names), logging which."""

    def __init__(self, budget: LayerBudget, output_dir: Path, importance: Importance, tokenizer, batches, flops_args):
        self.budget, self.record_file = budget, Path(output_dir) / RECORD
        self.importance, self.tokenizer, self.batches = importance, tokenizer, batches
        self.flops_args = flops_args  # (batch_size, seq_length, mask_p) of `step_flops`
        self.durations = {"before": [], "after": []}
        self.frozen = None

    def _read(self) -> dict | None:
        if not self.record_file.is_file():
            return None
        record = read_json(self.record_file, "a layer budget record", fields=("after_steps", "freeze"))
        if (record["after_steps"], record["freeze"]) != (self.budget.after_steps, self.budget.freeze):
            raise InputError(
                f"{self.record_file} was written for layer_budget after_steps {record['after_steps']}, freeze "
                f"{record['freeze']}: remove it or choose a new output_dir"
            )
        return record

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step < self.budget.after_steps:
            return
        record = self._read()
        if record is None:
            raise InputError(
                f"the run resumes at step {state.global_step}, after layer_budget.after_steps "
                f"{self.budget.after_steps}, but {self.record_file} is missing: which layers were frozen is unknown"
            )
        self._freeze(model, record["frozen"])

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.durations["after" if self.frozen is not None else "before"].append(time.perf_counter() - self.started)
        if state.global_step != self.budget.after_steps or self.frozen is not None:
            return
        record = self._read() or self._measure(model)
        self._freeze(model, record["frozen"])

    def _measure(self, model) -> dict:
        was_training = model.training
        model.eval()  # no dropout while measuring
        try:
            scores = [float(score) for score in self.importance(model, self.tokenizer, self.batches, self.budget.seed)]
        finally:
            model.train(was_training)
        if len(scores) != len(encoder_layers(model)):
            raise ValueError(f"importance gave {len(scores)} scores for {len(encoder_layers(model))} layers")
        frozen = sorted(sorted(range(len(scores)), key=lambda layer: scores[layer])[: self.budget.freeze])
        record = {
            "after_steps": self.budget.after_steps,
            "freeze": self.budget.freeze,
            "importance": scores,
            "frozen": frozen,
            "flops": step_flops(model, *self.flops_args, frozen=frozen),
        }
        self._write(record)
        return record

    def _write(self, record: dict) -> None:
        replace_file(self.record_file, json.dumps(record, indent=2) + "\n")

    def _freeze(self, model, frozen: list[int]) -> None:
        layers = len(encoder_layers(model))
        if any(not 0 <= layer < layers for layer in frozen) or len(frozen) >= layers:
            raise InputError(f"{self.record_file}: frozen layers {frozen} do not fit a model of {layers} layers")
        freeze_layers(model, frozen)
        self.frozen = frozen
        logger.warning("layer_budget: layers %s of %d frozen (least important after the warm-up)", frozen, layers)

    def on_train_end(self, args, state, control, **kwargs):
        record = self._read()
        if record is None or not state.is_world_process_zero:
            return
        # Medians: a step that also evaluated or checkpointed is not counted (those run after on_step_end).
        record["step_seconds"] = {
            phase: {"median": statistics.median(times), "steps": len(times)} if times else None
            for phase, times in self.durations.items()
        }
        self._write(record)
