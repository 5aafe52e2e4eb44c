"""`elc-bert finetune-glue`: the BabyLM (Super)GLUE subset, fine-tuned with the Trainer.

Tasks and metrics (the BabyLM 2023 list, as the ELC-BERT paper, arXiv 2311.02265, scores it): CoLA (Matthews
correlation), SST-2, MRPC (F1), QQP (F1), MNLI and MNLI-mm (accuracy), QNLI, RTE, BoolQ, MultiRC, WSC (accuracy); a
binary task reports accuracy, F1 and MCC, as the BabyLM 2025 pipeline does. MultiRC: the docs name F1 only for MRPC
and QQP, so its score is the accuracy over answer options (each (paragraph, question, answer) row is one binary
example); the per-question exact match and the F1 over answer options (F1a) are reported beside it. MNLI is trained
once and evaluated on the matched and the mismatched dev sets, which are reported as the two BabyLM entries `mnli`
and `mnli-mm`.

Every model loads through `AutoModelForSequenceClassification.from_pretrained(model, num_labels=...)` (`head:
model`), or as `BabyLMClassifier` over `AutoModel.from_pretrained(model)` (`head: babylm-2025`, the BabyLM 2025
evaluation pipeline's classifier): an ELC-BERT / LTG-BERT run directory or model folder (`import elc_bert` registers
them), or any stock encoder such as BERT. Sentence pairs go through the tokenizer's pair encoding ([CLS] a [SEP] b
[SEP]), made as the pipeline makes them (`data.glue.text_pair`). The BabyLM files have no test labels, so (as the
BabyLM pipelines do) the validation split is both the model-selection set and the reported one.

The BabyLM 2025 pipeline's fine-tuning (`configs/glue/babylm-2025.yaml`, from its eval_finetuning.sh and
evaluation_pipeline/finetune/): head babylm-2025, AdamW (weight decay 0.01) with 6% warm-up and cosine decay to 0.1 x
the peak learning rate 3e-5, batch 32 (16 for BoolQ and MultiRC), 10 epochs (30 for WSC), sequences cut at 512
tokens, seed 42, evaluated after every epoch on the dev set, whose best epoch (by F1 for MRPC and QQP, else accuracy;
the first of equals) predicts it. What differs, all far below seed noise: the Trainer's own data order and dropout
draws (the pipeline seeds once, before building its model, and shuffles and draws dropout masks from that one
stream; the Trainer seeds again after, and shuffles with a generator of its own), the last partial batch of an
epoch trained on (the pipeline drops it, so that its schedule is floor(N / batch) x epochs steps long, the
Trainer's ceil(N / batch) x epochs: `training.dataloader_drop_last=true` gives the pipeline's; dev and test rows are
never dropped, `EveryRowTrainer`), no weight decay on biases and norm weights (the Trainer's rule; the pipeline
decays every parameter), and the pipeline evaluates and predicts with its EMA copy of the model, whose parameters
(not buffers) follow the trained ones with decay `--ema_decay`, 0 in eval_finetuning.sh: the trained parameters
themselves.

Data: a folder of `<task>.train.jsonl(.gz)` / `<task>.valid.jsonl(.gz)` files (`babylm_eval_2024/glue_filtered/`),
plus `extra_data_dirs` searched after it for files it lacks (the 10k MNLI / QQP training subsets of
`glue_filtered_2025_extra/`); the tasks and their files are `elc_bert.data.glue`'s. A task without its training or
dev file is refused, naming the task and the paths looked for, before any model loads.

Output (read by `elc-bert scorecard`): `OUTPUT_DIR/glue/<task>/result.json` = {"task", "metric_name", "metric",
"all_metrics", "num_train", "num_eval", "epochs_run", ...} (metrics as fractions in [0, 1]), a `dev_metric.png` per
task, and `OUTPUT_DIR/glue/results.json` + `results.md` over all tasks. A task whose result.json exists is not rerun.
With `predictions_dir`, each task's dev predictions also go where the BabyLM 2025 pipeline writes them, for its
collation (`collate_preds.py`; a model folder there holding another model's results is refused before training,
`runs.layout.check_pipeline_model_dir`): PREDICTIONS_DIR/<model name>/main/finetune/<task>/predictions.json =
{"<task>": {"predictions": [{"id": "<task>_<i>", "pred": <class>}, ...]}} in the dev file's order, beside results.txt
("accuracy: ...", one metric a line); MNLI's are of its matched dev set.
"""

import contextlib
import dataclasses
import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    EarlyStoppingCallback,
    Trainer,
    set_seed,
)
from transformers.modeling_outputs import SequenceClassifierOutput

from .. import runs
from ..data.glue import BABYLM_ENTRIES, TASKS, GlueTask, encode, read_task_file, task_files
from ..data.tokenizer import load_tokenizer, save_tokenizer
from ..extras import needs, require
from ..integrations import describe_lora, with_lora
from ..job_configs import FinetuneGlueConfig, refuse_other_jobs, save_config
from ..job_configs.glue_results import GlueResult
from ..models.errors import InputNotFoundError
from ..models.loading import check_fine_tuning_start, check_max_length, check_vocabulary, load_pretrained
from ..plots import plot_curves
from ..pretrained import find_tokenizer, resolve_model
from ..runs.layout import check_pipeline_model_dir, record_pipeline_model
from .arguments import (
    UNLOADED_HINT,
    StopOnNonFiniteLoss,
    training_arguments,
    writes_run_folder,
)

with needs("eval", "elc-bert finetune-glue"):
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"  # a task's Trainer checkpoints (glue/<task>/checkpoints), removed once it is scored
SUMMARY_FIELDS = ("metric_name", "metric", "all_metrics", "num_train", "num_eval", "epochs_run")  # results.json's
PIPELINE_METRICS = ("accuracy", "f1", "mcc")  # what the BabyLM 2025 pipeline reports (its results.txt), in its order


# ---------------------------------------------------------------------------------------------------------- head
class BabyLMClassifier(nn.Module):
    """The BabyLM 2025 evaluation pipeline's sequence classifier (its finetune/classifier_model.py) around any encoder
    (an `AutoModel`): the encoder's last hidden state at the first position, B x D, through LayerNorm -> Linear(D, D)
    -> GELU -> LayerNorm -> dropout -> Linear(D, num_labels) gives the logits, B x num_labels; the LayerNorms have no
    weights (eps 1e-5) and the Linear layers keep PyTorch's initialisation, as in the pipeline's plain torch module.
    The encoder is given input_ids and attention_mask only (no token_type_ids), as the pipeline calls it; the loss is
    the mean cross-entropy."""

    def __init__(self, encoder: nn.Module, num_labels: int, dropout: float = 0.1, layer_norm_eps: float = 1e-5):
        super().__init__()
        self.encoder = encoder
        size = encoder.config.hidden_size
        self.classifier = nn.Sequential(
            nn.LayerNorm(size, layer_norm_eps, elementwise_affine=False),
            nn.Linear(size, size),
            nn.GELU(),
            nn.LayerNorm(size, layer_norm_eps, elementwise_affine=False),
            nn.Dropout(dropout),
            nn.Linear(size, num_labels),
        )

    def get_input_embeddings(self) -> nn.Module:
        return self.encoder.get_input_embeddings()

    def forward(self, input_ids, attention_mask=None, labels=None) -> SequenceClassifierOutput:
        """input_ids, attention_mask: B x T; labels: B (class ids)."""
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = self.classifier(states[:, 0])
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)


# ------------------------------------------------------------------------------------------------------- metrics
def multirc_scores(labels, predictions, question_ids) -> dict:
    """MultiRC's question-level exact match (every answer option of a question right) and F1 over answer options."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    by_question = {}
    for label, guess, question in zip(labels, predictions, question_ids):
        by_question.setdefault(question, []).append(label == guess)
    exact = float(np.mean([all(rights) for rights in by_question.values()]))
    return {"exact_match": exact, "f1a": float(f1_score(labels, predictions, zero_division=0.0))}


def task_metrics(task: GlueTask, labels, predictions) -> dict:
    """Every metric reported for `task` (fractions), `task.metric` among them: accuracy, and for a binary task (as the
    BabyLM 2025 pipeline reports them) F1 of the positive class (label 1; 0 when there is no positive gold or guess)
    and the Matthews correlation (0 for a constant guess)."""
    metrics = {"accuracy": float(accuracy_score(labels, predictions))}
    if task.num_labels == 2:
        metrics["f1"] = float(f1_score(labels, predictions, zero_division=0.0))
    if task.num_labels == 2 or task.metric == "mcc":
        metrics["mcc"] = float(matthews_corrcoef(labels, predictions))
    return metrics


# ----------------------------------------------------------------------------------------------------------- job
class EveryRowTrainer(Trainer):
    """The Trainer, evaluating and predicting on every row whatever `dataloader_drop_last` says: that setting (the
    BabyLM 2025 pipeline's step count: its training loader drops the last partial batch) is for training, but the
    Trainer applies it to the dev and test loaders too, which then lose their last partial batch (all of a dev set
    smaller than a batch: no metric to select the best epoch by). The supported hooks, `get_eval_dataloader` and
    `get_test_dataloader`, build those loaders with it off."""

    def get_eval_dataloader(self, eval_dataset=None):
        with self._keeping_every_row():
            return super().get_eval_dataloader(eval_dataset)

    def get_test_dataloader(self, test_dataset):
        with self._keeping_every_row():
            return super().get_test_dataloader(test_dataset)

    @contextlib.contextmanager
    def _keeping_every_row(self):
        drop_last = self.args.dataloader_drop_last
        self.args.dataloader_drop_last = False
        try:
            yield
        finally:
            self.args.dataloader_drop_last = drop_last


def resolve_output_dir(config: FinetuneGlueConfig) -> Path:
    if config.output_dir is not None:
        return Path(config.output_dir)
    if Path(config.model).is_dir():
        return Path(config.model)
    return Path("runs") / "glue" / config.model.replace("/", "__")


def predictions_folder(predictions_dir: str | Path, model: str, task: str) -> Path:
    """Where the BabyLM 2025 pipeline writes `task`'s fine-tuning predictions of the final model: its results tree's
    <model name>/main/finetune/<task>/ (the model name as the pipeline names it: the last part of the model's path or
    Hub name, without a suffix)."""
    return runs.pipeline_model_dir(predictions_dir, model) / "main" / runs.PIPELINE_FINETUNE / task


def write_pipeline_predictions(folder: Path, task: GlueTask, predictions, metrics: dict) -> None:
    """`folder`/predictions.json ({task: {"predictions": [{"id": "<task>_<i>", "pred": class}]}}, i in dev-file
    order) and results.txt (one "metric: value" line per metric the pipeline reports), as the pipeline writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"{task.name}_{i}", "pred": int(pred)} for i, pred in enumerate(predictions)]
    (folder / runs.PIPELINE_PREDICTIONS).write_text(json.dumps({task.name: {"predictions": rows}}))
    lines = [f"{name}: {metrics[name]}" for name in PIPELINE_METRICS if name in metrics]
    (folder / "results.txt").write_text("\n".join(lines))


def _question_key(row: dict) -> str:
    idx = row.get("idx")
    if isinstance(idx, dict) and "question" in idx:
        return json.dumps([idx.get("paragraph"), idx["question"]])
    return json.dumps([row["paragraph"], row["question"]])


def _model(config: FinetuneGlueConfig, task: GlueTask, tokenizer):
    """The model of `task` with a fresh classifier (`config.head`), its base model's weights checked."""
    source = resolve_model(config.model)
    if config.head == "babylm-2025":
        return _babylm_classifier(config, task, tokenizer, source)
    dropout = {} if config.classifier_dropout is None else {"classifier_dropout": config.classifier_dropout}
    labels = {"num_labels": task.num_labels, "problem_type": "single_label_classification", **dropout}
    model, info = load_pretrained(AutoModelForSequenceClassification, source, **labels)
    if not config.allow_unloaded_weights:
        check_fine_tuning_start(source, model, info, UNLOADED_HINT)
    check_vocabulary(tokenizer, model, source)
    if config.lora is not None:
        model = with_lora(model, config.lora)
    if model.config.pad_token_id is None and tokenizer.pad_token_id is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model


def _babylm_classifier(config: FinetuneGlueConfig, task: GlueTask, tokenizer, source) -> BabyLMClassifier:
    """`BabyLMClassifier` over the model's encoder. The pooler of a BERT-family encoder is dropped: the head reads the
    first position's state, so the pooler would never be trained (nor need its weights in the checkpoint)."""
    encoder, info = load_pretrained(AutoModel, source)
    if getattr(encoder, "pooler", None) is not None:
        encoder.pooler = None
        info = {**info, "missing_keys": [key for key in info["missing_keys"] if not key.startswith("pooler.")]}
    if not config.allow_unloaded_weights:
        check_fine_tuning_start(source, encoder, info, UNLOADED_HINT)
    check_vocabulary(tokenizer, encoder, source)
    dropout = {} if config.classifier_dropout is None else {"dropout": config.classifier_dropout}
    return BabyLMClassifier(encoder, task.num_labels, **dropout)


def training_steps(config: FinetuneGlueConfig, examples: int, batch_size: int, epochs: float) -> tuple[int, int]:
    """(optimiser steps per epoch, in all) of `examples` in batches of `batch_size`, as the Trainer counts them."""
    accumulation = int(config.training.get("gradient_accumulation_steps", 1))
    drop_last = config.training.get("dataloader_drop_last")
    batches = examples // batch_size if drop_last else math.ceil(examples / batch_size)
    per_epoch = max(batches // accumulation, 1)
    return per_epoch, math.ceil(epochs * per_epoch)


def _trainer(config: FinetuneGlueConfig, task: GlueTask, model, tokenizer, train, dev, checkpoints: Path, patience):
    """The Trainer of one task: evaluated on `dev` every epoch (or every `eval_steps`, at most one epoch apart), the
    best checkpoint by the task's metric loaded at the end, stopped after `patience` evaluations without
    improvement (None: never)."""
    strategy = "steps" if config.eval_steps else "epoch"
    batch_size = config.task_batch_size.get(task.name, config.batch_size)
    epochs = config.task_epochs.get(task.name, config.epochs)
    steps_per_epoch, steps = training_steps(config, len(train), batch_size, epochs)
    # Never fewer than one evaluation per epoch: the BabyLM cadence (200 steps) would skip most small tasks' epochs.
    eval_every = min(config.eval_steps, steps_per_epoch) if config.eval_steps else None
    cadence = dict(eval_steps=eval_every, save_steps=eval_every) if eval_every else {}
    # A fraction of the steps rounded down, as the BabyLM 2025 pipeline has it (the Trainer's warmup_steps < 1, up).
    warmup = int(config.warmup * steps) if config.warmup < 1 else int(config.warmup)
    owned = dict(
        seed=config.seed,
        num_train_epochs=epochs,
        learning_rate=config.learning_rate,
        warmup_steps=warmup,
        weight_decay=config.weight_decay,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=config.eval_batch_size,
        eval_strategy=strategy,
        save_strategy=strategy,
        load_best_model_at_end=True,
        metric_for_best_model=f"dev_{task.metric}",  # the eval_dataset's name "dev": the Trainer logs eval_dev_...
        greater_is_better=True,
        **cadence,
    )
    arguments = training_arguments(
        config,
        checkpoints,
        owned,
        lr_scheduler_type="linear",
        logging_strategy=strategy,
        **({"logging_steps": eval_every} if eval_every else {}),
        save_total_limit=1,  # the best checkpoint is kept besides the last one
        save_only_model=True,  # no optimiser state: checkpoints only serve load_best_model_at_end
        disable_tqdm=False,
    )
    return EveryRowTrainer(
        model=model,
        args=arguments,
        train_dataset=train,
        eval_dataset={"dev": dev},  # early stopping on the task's own dev set (MNLI: matched only)
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=lambda prediction: task_metrics(
            task, prediction.label_ids, np.argmax(prediction.predictions, -1)
        ),
        callbacks=[StopOnNonFiniteLoss()]
        + ([EarlyStoppingCallback(early_stopping_patience=patience)] if patience is not None else []),
    )


def dev_scores(trainer: Trainer, task: GlueTask, dev, rows: list[dict]) -> tuple[dict, np.ndarray]:
    """Every metric of `task` (`task_metrics`; MultiRC's exact match and F1a too) of the trainer's model on `dev`,
    the encoded `rows`, and its predicted classes."""
    predictions = np.argmax(trainer.predict(dev).predictions, axis=-1)
    gold = [row["label"] for row in rows]
    metrics = task_metrics(task, gold, predictions)
    if task.name == "multirc":
        # A question is (paragraph id, question id) in the BabyLM files' `idx`; without ids, its text.
        metrics.update(multirc_scores(gold, predictions, [_question_key(row) for row in rows]))
    return metrics, predictions


def save_task(config: FinetuneGlueConfig, trainer: Trainer, tokenizer, task: GlueTask, glue_dir: Path, results: dict):
    """Keeps the best model (`keep_models`), removes the checkpoints (unless `keep_checkpoints`) and writes each
    entry's result.json and the task's dev_metric.png."""
    task_dir = glue_dir / task.name
    if config.keep_models and config.lora is not None:  # the best checkpoint's adapter, then merged into the model
        trainer.save_model(str(task_dir / runs.ADAPTER))
        trainer.model = trainer.model.merge_and_unload()
    if config.keep_models:  # the best checkpoint's model (load_best_model_at_end): what a user would publish
        trainer.save_model(str(task_dir / runs.MODEL))
        save_tokenizer(tokenizer, task_dir / runs.MODEL)
        runs.record_model(glue_dir, task_dir / runs.MODEL)
        for entry, result in results.items():
            results[entry] = dataclasses.replace(result, model=str(Path(task.name) / runs.MODEL))
    if not config.keep_checkpoints:
        shutil.rmtree(task_dir / CHECKPOINTS, ignore_errors=True)
    for entry, result in results.items():
        result.write(glue_dir / entry)
    curve = results[task.name].dev_curve
    if curve:
        epochs, values = zip(*curve)
        plot_curves(
            task_dir / "dev_metric.png",
            {task.metric: (list(epochs), list(values))},
            "epoch",
            f"dev {task.metric}",
            f"{task.name} (best {100 * max(values):.1f})",
        )


def finetune_task(config: FinetuneGlueConfig, task: GlueTask, folders: list[Path], glue_dir: Path, tokenizer):
    """Fine-tunes one task; returns its results ({entry: GlueResult}, two for MNLI)."""
    train_path, dev_paths = task_files(task, folders)
    train_rows = read_task_file(train_path, task, config.max_train_examples)
    dev_rows = {entry: read_task_file(path, task, config.max_eval_examples) for entry, path in dev_paths.items()}
    train = encode(tokenizer, task, train_rows, config.max_length)
    devs = {entry: encode(tokenizer, task, rows, config.max_length) for entry, rows in dev_rows.items()}

    set_seed(config.seed)
    model = _model(config, task, tokenizer)
    patience = config.patience
    if patience is not None and task.name in config.large_tasks:
        patience = config.large_task_patience
    checkpoints = glue_dir / task.name / CHECKPOINTS
    trainer = _trainer(config, task, model, tokenizer, train, devs[task.name], checkpoints, patience)
    trainer.train()
    key = f"eval_dev_{task.metric}"
    curve = [[entry["epoch"], entry[key]] for entry in trainer.state.log_history if key in entry]

    results = {}
    for entry, rows in dev_rows.items():
        metrics, predictions = dev_scores(trainer, task, devs[entry], rows)  # the best model (load_best_model_at_end)
        if config.predictions_dir is not None and entry == task.name:  # written before result.json marks it done
            record_pipeline_model(config.predictions_dir, config.model)
            write_pipeline_predictions(
                predictions_folder(config.predictions_dir, config.model, entry), task, predictions, metrics
            )
        results[entry] = GlueResult(
            task=entry,
            metric_name=task.metric,
            metric=metrics[task.metric],
            all_metrics=metrics,
            num_train=len(train_rows),
            num_eval=len(rows),
            epochs_run=float(trainer.state.epoch or 0.0),
            batch_size=trainer.args.per_device_train_batch_size,
            trained_as=task.name,
            train_file=str(train_path),
            eval_file=str(dev_paths[entry]),
            patience=patience,
            dev_curve=curve if entry == task.name else None,
        )
    save_task(config, trainer, tokenizer, task, glue_dir, results)
    main = results[task.name]
    logger.info("%s: dev %s %.1f after %.2f epochs", task.name, task.metric, 100 * main.metric, main.epochs_run)
    return results


def finetune_glue(config: FinetuneGlueConfig) -> dict:
    """Fine-tunes every task of `config.tasks` that has its files (a finished task's result.json is reused) and
    writes glue/results.json and glue/results.md; returns the summary (`results_table` shows it)."""
    import elc_bert  # noqa: F401  (registers ELC-BERT / LTG-BERT with the Auto classes)

    require("data", "plots", what="elc-bert finetune-glue")

    glue_dir = runs.glue_dir(resolve_output_dir(config))
    refuse_other_jobs(glue_dir, config.job)
    folders = [Path(config.data_dir), *map(Path, config.extra_data_dirs)]
    if not folders[0].is_dir():
        raise InputNotFoundError(
            f"data_dir {folders[0]}: no such folder (expected <task>.train/valid.jsonl(.gz) files)"
        )
    source = resolve_model(config.model)  # a mistyped model folder is named here, before anything is written
    tokenizer = load_tokenizer(find_tokenizer([config.tokenizer or config.model]))
    check_max_length(config.max_length, AutoConfig.from_pretrained(source), tokenizer, source)
    writes = writes_run_folder()
    with runs.hold_run_folder(glue_dir, "finetune-glue", writes=writes), runs.naming_full_disk(glue_dir):
        for name in config.tasks:  # every task's files, before anything is written or any model loads
            if not _finished(glue_dir, TASKS[name]):
                task_files(TASKS[name], folders)
        if config.predictions_dir is not None:  # a results tree holding another model's is refused now
            check_pipeline_model_dir(config.predictions_dir, config.model, "predictions_dir")
        if writes:
            glue_dir.mkdir(parents=True, exist_ok=True)  # the inputs are good: the run folder may be written
            save_config(config, runs.config_file(glue_dir, config.job))
        return _finetune_tasks(config, folders, glue_dir, tokenizer)


def _finished(glue_dir: Path, task: GlueTask) -> bool:
    return all((glue_dir / entry / runs.RESULT).is_file() for entry in task.entries)


def _finetune_tasks(config: FinetuneGlueConfig, folders: list[Path], glue_dir: Path, tokenizer) -> dict:
    results = {}
    for name in config.tasks:
        task = TASKS[name]
        if _finished(glue_dir, task):
            for entry in task.entries:
                results[entry] = GlueResult.read(glue_dir / entry / runs.RESULT)
            logger.info("%s: finished before, result.json reused", name)
            continue
        results.update(finetune_task(config, task, folders, glue_dir, tokenizer))
    return write_summary(config, glue_dir, results)


def write_summary(config: FinetuneGlueConfig, glue_dir: Path, results: dict) -> dict:
    """glue/results.json (the summary, returned) and glue/results.md (`results_table`) over the entries of
    `results`, in the BabyLM order."""
    ordered = {entry: results[entry] for entry in BABYLM_ENTRIES if entry in results}
    summary = {
        "model": config.model,
        "fine_tuning": describe_lora(config.lora),
        "tasks": {entry: {key: getattr(r, key) for key in SUMMARY_FIELDS} for entry, r in ordered.items()},
        "mean": float(np.mean([r.metric for r in ordered.values()])) if ordered else None,
        "num_tasks": len(ordered),
    }
    (glue_dir / runs.RESULTS).write_text(json.dumps(summary, indent=2) + "\n")
    (glue_dir / runs.RESULTS_TABLE).write_text(results_table(summary) + "\n")
    return summary


def results_table(summary: dict) -> str:
    """The Markdown table of a `finetune_glue` summary: each entry's scores (%) and their mean."""
    lines = [
        f"(Super)GLUE dev scores of {summary['model']}, {summary.get('fine_tuning', 'full fine-tuning')} (%; "
        "validation split, best early-stopping checkpoint)",
        "",
        "| task | metric | score | other metrics | train / dev examples | epochs |",
        "|---|---|---|---|---|---|",
    ]
    for entry, r in summary["tasks"].items():
        others = ", ".join(f"{k} {100 * v:.1f}" for k, v in r["all_metrics"].items() if k != r["metric_name"])
        lines.append(
            f"| {entry} | {r['metric_name']} | {100 * r['metric']:.1f} | {others} | {r['num_train']} / "
            f"{r['num_eval']} | {r['epochs_run']:.2f} |"
        )
    if summary["tasks"]:
        mean = f"**{100 * summary['mean']:.1f}**"
        lines.append(f"| **mean ({len(summary['tasks'])} of {len(BABYLM_ENTRIES)})** | | {mean} | | | |")
    return "\n".join(lines)
