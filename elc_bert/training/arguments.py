"""The `TrainingArguments` of every job: what they all set, in one place."""

from pathlib import Path

import torch
from transformers import TrainerCallback, TrainingArguments


def training_arguments(output_dir: str | Path, seed: int, overrides: dict, **job) -> TrainingArguments:
    """A job's TrainingArguments: the settings every job shares (no logging integrations, pinned memory only with an
    accelerator), then the job's own `job` arguments, then the user's `training.*` `overrides`, which win.
    Creating them sets up the process group under torchrun / accelerate launch."""
    arguments = dict(
        output_dir=str(output_dir),
        seed=seed,
        report_to=[],
        dataloader_pin_memory=torch.accelerator.current_accelerator() is not None,  # else a warning
    )
    arguments.update(job)
    arguments.update(overrides)
    return TrainingArguments(**arguments)


class CadenceFromArguments(TrainerCallback):
    """A resumed run logs, evaluates and checkpoints as its TrainingArguments say now. The Trainer keeps the cadence
    saved in the checkpoint's trainer state (and warns that they differ), which would silently ignore a resume's
    new `save_steps` or `logging_steps`; this callback sets the state's from the arguments when training begins."""

    def on_train_begin(self, args, state, control, **kwargs):
        state.compute_steps(args, state.max_steps)
