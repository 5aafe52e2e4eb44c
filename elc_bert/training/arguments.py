"""The `TrainingArguments` of every job and the callbacks they all use: what they all set, in one place."""

import math
import os
from pathlib import Path

import torch
from transformers import TrainerCallback, TrainingArguments


def training_arguments(config, output_dir: str | Path, owned: dict, **defaults) -> TrainingArguments:
    """A job's TrainingArguments: the settings every job shares (no logging integrations, pinned memory only with an
    accelerator), then the job's `defaults`, then the user's `config.training` keys, which win over both, then the
    fields the job sets from its own keys (`owned`: the seed, the learning rate, ...). Each setting has one source:
    a `training.*` key for an owned field is refused when the config is made (`job_configs.check_fields`, from the
    config class's `training_owned`, which must name every field a job passes as owned). Creating them sets up the
    process group under torchrun / accelerate launch."""
    undeclared = sorted(set(owned) - set(type(config).training_owned))
    if undeclared:
        raise RuntimeError(f"{type(config).__name__}.training_owned does not name {undeclared}, which the job sets")
    shared = dict(
        output_dir=str(output_dir),
        report_to=list(config.report_to),  # the job's `report_to` key (none by default)
        logging_nan_inf_filter=False,  # a diverged loss is logged as it is (`StopOnNonFiniteLoss` stops the run)
        dataloader_pin_memory=torch.accelerator.current_accelerator() is not None,  # else a warning
    )
    return TrainingArguments(**{**shared, **defaults, **config.training, **owned})


def writes_run_folder() -> bool:
    """Whether this process writes the run folder: the only one, or the first of a `torchrun` / `accelerate launch`
    (which set RANK), as the Trainer's `should_save` has it; known before the TrainingArguments exist."""
    return int(os.environ.get("RANK", "0")) == 0


class CadenceFromArguments(TrainerCallback):
    """A resumed run logs, evaluates and checkpoints as its TrainingArguments say now. The Trainer keeps the cadence
    saved in the checkpoint's trainer state (and warns that they differ), which would silently ignore a resume's
    new `save_steps` or `logging_steps`; this callback sets the state's from the arguments when training begins."""

    def on_train_begin(self, args, state, control, **kwargs):
        state.compute_steps(args, state.max_steps)


# What a job says when the model it would fine-tune did not load whole (`allow_unloaded_weights` in every job).
UNLOADED_HINT = "Set allow_unloaded_weights=true to fine-tune it anyway."


class StopOnNonFiniteLoss(TrainerCallback):
    """Stops a run whose logged loss (or gradient norm, or evaluation loss) is not finite, naming the step and the
    learning rate: a diverged run would otherwise train on, save NaN weights and end as if it had succeeded. The
    Trainer logs every `logging_steps`; the run's last checkpoint before the divergence is kept."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "grad_norm", "eval_loss"):
            value = (logs or {}).get(key)
            if isinstance(value, (int, float)) and not math.isfinite(value):
                rate = (logs or {}).get("learning_rate")
                at = f" (learning rate {rate:g})" if isinstance(rate, (int, float)) else ""
                raise FloatingPointError(
                    f"training diverged: {key} is {value} at step {state.global_step}{at}; lower the learning rate "
                    "or the loss scale, then resume from the last checkpoint"
                )
