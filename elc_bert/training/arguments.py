"""The `TrainingArguments` of every job: what they all set, in one place."""

from pathlib import Path

import torch
from transformers import TrainingArguments


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
