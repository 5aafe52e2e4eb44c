"""`elc-bert finetune-ner`: few-shot NER with the Trainer, for any token-classification model or a layer-fusion head.

The protocol of the DWAtt paper (ElNokrashy et al., arXiv 2209.15168): for each N, each trial draws N x C training
sentences uniformly from the whole train split (its own seed for sampling and initialisation), trains for a fixed number
of epochs, evaluates entity-level micro-F1 (seqeval, with the data's tag scheme) on the dev set after every epoch, and
keeps the best. Reported: the per-trial best dev F1 and, per N, the mean with a 95% t-interval, as JSON (the
dataclasses of `job_configs.ner_results`, which its readers read too) and a Markdown table; beside it, the model of the
best dev epoch scored on the test split (where it is labelled): entity-level precision, recall and F1, overall and per
entity type. That model is kept as a Hub-ready folder (weights, config with the label names, tokenizer): by default
the best trial's of each N.
"""

import dataclasses
import itertools
import json
import logging
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np
from safetensors.torch import load_file
from transformers import (
    AutoConfig,
    AutoModelForTokenClassification,
    DataCollatorForTokenClassification,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    set_seed,
)

from .. import runs
from ..data.jsonl import read_json
from ..data.ner import (
    SCHEMES,
    check_labels_fit_words,
    few_shot_sample,
    load_conll03,
    load_wikiann,
    tokenize_and_align_labels,
)
from ..data.tokenizer import load_tokenizer, save_tokenizer
from ..extras import needs, require
from ..integrations import describe_lora, with_lora
from ..intervals import mean_and_interval
from ..job_configs import FinetuneNerConfig, refuse_other_jobs, save_config
from ..job_configs.ner_results import NerResults, ShotResults, TrialResult
from ..models import FUSIONS, LayerFusionForTokenClassification
from ..models.errors import InputError, InputExistsError
from ..models.loading import check_fine_tuning_start, check_max_length, check_vocabulary, load_pretrained
from ..plots import plot_curves, plot_means_against_counts
from ..pretrained import find_tokenizer, resolve_model
from .arguments import UNLOADED_HINT, StopOnNonFiniteLoss, training_arguments

with needs("data", "elc-bert finetune-ner"):
    import datasets
with needs("eval", "elc-bert finetune-ner"):
    from seqeval.metrics import classification_report, f1_score
    from seqeval.scheme import IOB2

logger = logging.getLogger(__name__)


def load_data(config: FinetuneNerConfig):
    """The dataset from `data_dir`: the dataset's own folder, or a data root holding `conll2003/` or `wikiann/`."""
    folder = {"conll03": "conll2003", "wikiann": "wikiann"}[config.dataset]
    data_dir = Path(config.data_dir)
    data_dir = data_dir / folder if (data_dir / folder).is_dir() else data_dir
    if config.dataset == "conll03":
        return load_conll03(data_dir, scheme=config.scheme), SCHEMES[f"conll03-{config.scheme}"]
    return load_wikiann(data_dir, config.language, layout=config.wikiann_layout), SCHEMES["wikiann"]


def entity_f1(label_names, scheme: str, words: dict):
    """compute_metrics for the Trainer: seqeval micro-F1 over whole sentences (`tag_sequences`)."""

    def compute(prediction):
        gold, guessed = tag_sequences(prediction, label_names, words)
        options = {"mode": "strict", "scheme": IOB2} if scheme == "IOB2" else {}  # IOB1: the conlleval rules
        return {"f1": f1_score(gold, guessed, **options)}

    return compute


def tag_sequences(prediction, label_names, words: dict) -> tuple[list[list[str]], list[list[str]]]:
    """The gold and predicted tags of every word of each sentence, from a Trainer prediction whose rows are the
    sentences of `words` (from `scoring_columns`) in order: the gold tags of the whole sentence, the prediction at
    each word's labelled (first) sub-token, and "O" for the words the model did not see (past `max_length`), so that
    their entities count as missed."""
    predictions = np.argmax(prediction.predictions, axis=-1)
    gold, guessed = [], []
    for row, (row_predictions, row_labels) in enumerate(zip(predictions, prediction.label_ids)):
        keep = row_labels != -100
        tags, index = words["word_tags"][row], words["word_index"][row]
        if [tags[word] for word in index] != row_labels[keep].tolist():
            raise InputError(
                f"prediction row {row} is not sentence {row} of the scored split: the rows must come in the split's "
                "order (no length-grouped sampling for evaluation)"
            )
        sentence = ["O"] * len(tags)
        for word, predicted in reversed(list(zip(index, row_predictions[keep]))):  # a word's first sub-token wins
            sentence[word] = label_names[predicted]
        gold.append([label_names[tag] for tag in tags])
        guessed.append(sentence)
    return gold, guessed


def entity_scores(prediction, label_names, scheme: str, words: dict) -> dict:
    """Entity-level precision, recall and F1 (seqeval, micro over entities) overall and per entity type, over whole
    sentences (`tag_sequences`) of a `Trainer.predict` output."""
    gold, guessed = tag_sequences(prediction, label_names, words)
    options = {"mode": "strict", "scheme": IOB2} if scheme == "IOB2" else {}
    report = classification_report(gold, guessed, output_dict=True, zero_division=0, **options)
    scores = {
        name: {"precision": float(r["precision"]), "recall": float(r["recall"]), "f1": float(r["f1-score"])}
        for name, r in report.items()
    }
    per_type = {name: entry for name, entry in scores.items() if not name.endswith(" avg")}
    return {**scores["micro avg"], "per_type": per_type}


def scoring_columns(encoded, max_length: int):
    """An encoded split (`tokenize_and_align_labels` with `word_index`, the "ner_tags" column kept) without the
    columns that only scoring reads, and those: {"word_tags": each sentence's tags, "word_index": the word of each
    labelled sub-token, "truncated": how many sentences have words past `max_length` sub-tokens}."""
    words = {"word_tags": encoded["ner_tags"], "word_index": encoded["word_index"]}
    words["truncated"] = sum(
        len(input_ids) >= max_length and len(set(index)) < len(tags)
        for input_ids, index, tags in zip(encoded["input_ids"], words["word_index"], words["word_tags"])
    )
    return encoded.remove_columns(["ner_tags", "word_index"]), words


BEST_EPOCH = "best.json"  # in a kept model folder: the epoch it is from and its dev F1


class KeepBestModel(TrainerCallback):
    """Saves the model to `folder` after each evaluation that beats the best dev F1 so far (with `best.json`: the
    epoch and its F1), so the best epoch's model survives the training and an interrupted trial."""

    def __init__(self, folder: Path):
        self.folder = folder
        record = folder / BEST_EPOCH
        self.best = read_json(record, "a best-epoch record", fields=("dev_f1",))["dev_f1"] if record.exists() else -1.0

    def on_evaluate(self, args, state, control, model=None, metrics=None, **kwargs):
        if metrics is None or metrics.get("eval_f1", -1.0) <= self.best:
            return
        self.best = metrics["eval_f1"]
        with runs.replacing_files(self.folder) as folder:  # a kill while saving leaves the earlier best whole
            model.save_pretrained(folder)
            (folder / BEST_EPOCH).write_text(json.dumps({"epoch": state.epoch, "dev_f1": self.best}))


def kept_folder(config: FinetuneNerConfig) -> str:
    """Where a trial keeps its best epoch while training: the model, or with `lora` the adapter (merged at the end)."""
    return runs.ADAPTER if config.lora is not None else runs.MODEL


def build_model(config: FinetuneNerConfig, label_names: list[str]):
    labels = {"num_labels": len(label_names), "id2label": dict(enumerate(label_names))}
    labels["label2id"] = {name: i for i, name in enumerate(label_names)}
    source = resolve_model(config.model)
    if config.fusion is None:
        model, info = load_pretrained(AutoModelForTokenClassification, source, **labels)
        if not config.allow_unloaded_weights:
            check_fine_tuning_start(source, model, info, UNLOADED_HINT)
        if config.freeze_backbone:
            model.base_model.requires_grad_(False)
    else:
        model = LayerFusionForTokenClassification.from_backbone(
            source,
            fusion=config.fusion,
            freeze_backbone=config.freeze_backbone,
            allow_unloaded_weights=config.allow_unloaded_weights,
            **config.fusion_options,
            **labels,
        )
        if config.freeze_backbone and config.feature_cache:
            model.base_model.enable_feature_cache()
    return with_lora(model, config.lora) if config.lora is not None else model


class TrialData(NamedTuple):
    """What every trial of a finetune-ner run reads: the tokenizer, the label names and their tag scheme, the number
    of entity types, the training split that each trial samples from, and the scored dev and test splits with their
    words (`scoring_columns`; `test` None where the test split has no labels)."""

    tokenizer: PreTrainedTokenizerBase
    label_names: list[str]
    scheme: str
    entity_types: int
    train: datasets.Dataset
    dev: datasets.Dataset
    dev_words: dict
    test: datasets.Dataset | None
    test_words: dict | None


def encode(dataset: datasets.Dataset, tokenizer, max_length: int, scored: bool = False) -> datasets.Dataset:
    """The model's inputs; for a scored split, also the columns of `scoring_columns` (whole sentences)."""
    return dataset.map(
        tokenize_and_align_labels,
        batched=True,
        fn_kwargs={"tokenizer": tokenizer, "max_length": max_length, "word_index": scored},
        remove_columns=[name for name in dataset.column_names if not (scored and name == "ner_tags")],
    )


def prepare(config: FinetuneNerConfig) -> tuple[TrialData, dict]:
    """The run's `TrialData` and, per scored split, how many of its sentences have words past max_length (which
    count as predicted O: a warning says so)."""
    splits, scheme = load_data(config)
    for split, dataset in splits.items():  # all of them, before a trial samples one that does not fit
        if "ner_tags" in dataset.column_names:
            check_labels_fit_words(dataset[:], f"{split} split")
    label_names = splits["train"].features["ner_tags"].feature.names
    entity_types = len({name[2:] for name in label_names if name != "O"})
    tokenizer = load_tokenizer(find_tokenizer([config.model]))
    source = resolve_model(config.model)
    check_max_length(config.max_length, AutoConfig.from_pretrained(source), tokenizer, source)
    dev = splits["validation"]
    if config.max_eval_sentences is not None:
        dev = dev.select(range(min(config.max_eval_sentences, len(dev))))
    dev = encode(dev, tokenizer, config.max_length, scored=True)
    # Dev batches of like lengths: little padding to compute (a batch of 64 CoNLL-03 dev sentences in file order is
    # two thirds padding); the F1 does not depend on the order of the sentences.
    lengths = [len(input_ids) for input_ids in dev["input_ids"]]
    dev, dev_words = scoring_columns(dev.select(sorted(range(len(dev)), key=lengths.__getitem__)), config.max_length)
    truncated = {"dev": dev_words["truncated"]}
    test, test_words = None, None
    if "test" in splits and "ner_tags" in splits["test"].column_names:
        test = splits["test"]
        if config.max_test_sentences is not None:
            test = test.select(range(min(config.max_test_sentences, len(test))))
        test, test_words = scoring_columns(encode(test, tokenizer, config.max_length, scored=True), config.max_length)
        truncated["test"] = test_words["truncated"]
    for split, count in truncated.items():
        if count:
            logger.warning(
                "%d %s sentences have words past max_length (%d sub-tokens): those count as predicted O",
                count,
                split,
                config.max_length,
            )
    data = TrialData(tokenizer, label_names, scheme, entity_types, splits["train"], dev, dev_words, test, test_words)
    return data, truncated


def split_sizes(data: TrialData) -> dict:
    """{split: sentences}: the training split each trial samples from, and the dev and test sentences scored."""
    sizes = {"train": len(data.train), "dev": len(data.dev)}
    return sizes if data.test is None else {**sizes, "test": len(data.test)}


def finetune_ner(config: FinetuneNerConfig, callbacks: list | None = None) -> NerResults:
    """Runs every (N, trial) not finished yet (a finished one's result.json is reused; with `save_checkpoints` an
    unfinished one resumes from its last checkpoint) and writes results.json and results.md into `output_dir`;
    returns the `NerResults` (`results_table` shows them). Trials that other processes still hold at the end raise
    InputExistsError naming them, once the results over the finished ones are written (`refuse_unfinished_trials`).
    `callbacks`: further `TrainerCallback`s for every trial's Trainer."""
    require("plots", what="elc-bert finetune-ner")
    output_dir = Path(config.output_dir)
    refuse_other_jobs(output_dir, config.job)
    data, truncated = prepare(config)
    # Processes started side by side share out the trials, under one config: each checks it and claims its first
    # trial in turn, so the second sees the first's claim as work done under the config it must match.
    with runs.starting_trials(output_dir):
        save_config(config, runs.config_file(output_dir, config.job))
        task = claim_next_trial(config)
    try:
        with runs.naming_full_disk(output_dir):
            while task is not None:
                run_trial(config, data, *task, callbacks)
                task = claim_next_trial(config)
            # with the trials that other processes finished meanwhile
            results = write_results(config, truncated, split_sizes(data))
        refuse_unfinished_trials(config)
    finally:
        runs.remove_starting_lock(output_dir)
    return results


def claim_next_trial(config: FinetuneNerConfig) -> tuple[int, int] | None:
    """(N, trial) of the first trial that is neither finished nor run by another live process, now claimed by this
    one (`runs.claim`); None when none is left."""
    for shots, trial in itertools.product(config.shots, range(config.trials)):
        run_dir = runs.trial_dir(config.output_dir, shots, trial)
        if (run_dir / runs.RESULT).exists():
            continue
        held_by = runs.claim(run_dir)
        if held_by is None:
            return shots, trial
        logger.info("N=%d trial %d: left to the process that runs it (%s, %s)", shots, trial, held_by, run_dir)
    return None


def refuse_unfinished_trials(config: FinetuneNerConfig) -> None:
    """At the end of a run, raises InputExistsError naming the trials without a result (run by other processes, which
    share out the trials) and who holds them: the results written hold the finished trials only, and a run that
    ended as if whole would leave its table short of them."""
    unfinished = []
    for shots, trial in itertools.product(config.shots, range(config.trials)):
        run_dir = runs.trial_dir(config.output_dir, shots, trial)
        if not (run_dir / runs.RESULT).exists():
            unfinished.append(f"N={shots} trial {trial} ({runs.holder(run_dir) or 'no live process now'})")
    if unfinished:
        raise InputExistsError(
            f"{config.output_dir}: no result yet for {', '.join(unfinished)}, held by other processes; "
            f"{runs.RESULTS_TABLE} holds the finished trials only. Run this command again "
            "once they end (it reuses every finished trial, and takes over a trial whose process is gone) for the "
            f"whole table, or delete a trial's {runs.CLAIM} if its process no longer runs it"
        )


def _trainer(config: FinetuneNerConfig, data: TrialData, model, train, run_dir: Path, seed: int, callbacks):
    """A trial's Trainer: evaluated on the dev set after every epoch, each better epoch's model kept in
    run_dir/model (`KeepBestModel`)."""
    owned = dict(
        seed=seed,
        num_train_epochs=config.epochs,
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.batch_size,
        eval_strategy="epoch",
        save_strategy="epoch" if config.save_checkpoints else "no",
    )
    arguments = training_arguments(
        config,
        run_dir,
        owned,
        lr_scheduler_type="linear",
        per_device_eval_batch_size=64,
        save_total_limit=1,
        logging_strategy="epoch",
        disable_tqdm=True,
    )
    return Trainer(
        model=model,
        args=arguments,
        train_dataset=train,
        eval_dataset=data.dev,
        data_collator=DataCollatorForTokenClassification(data.tokenizer),
        compute_metrics=entity_f1(data.label_names, data.scheme, data.dev_words),
        callbacks=[KeepBestModel(run_dir / kept_folder(config)), StopOnNonFiniteLoss(), *(callbacks or [])],
    )


def run_trial(config: FinetuneNerConfig, data: TrialData, shots: int, trial: int, callbacks=None) -> TrialResult:
    """Trains trial `trial` of N = `shots` (its own sample and seed), keeps and scores its best dev epoch's model,
    writes its result.json and dev_f1.png, releases its claim and returns the result."""
    run_dir = runs.trial_dir(config.output_dir, shots, trial)
    seed = config.seed + trial
    classes = data.entity_types if config.shot_unit == "per_entity_type" else 1
    sample = few_shot_sample(data.train, shots, classes, seed=seed)
    train = encode(sample, data.tokenizer, config.max_length)
    set_seed(seed)
    model = build_model(config, data.label_names)
    check_vocabulary(data.tokenizer, model, config.model)
    if getattr(model.base_model, "feature_cache", None) is not None:
        model.base_model.fill_feature_cache(train, progress=False)  # one pass, batches of like lengths
    trainer = _trainer(config, data, model, train, run_dir, seed, callbacks)
    checkpoint = runs.last_checkpoint(run_dir) if config.save_checkpoints else None
    if checkpoint is not None:
        logger.info("N=%d trial %d: resuming from %s", shots, trial, checkpoint)
    trainer.train(resume_from_checkpoint=checkpoint)
    curve = [entry["eval_f1"] for entry in trainer.state.log_history if "eval_f1" in entry]
    scores = best_model_scores(config, data, trainer, model, run_dir)
    result = TrialResult(shots, trial, max(curve), len(train), curve, **scores)
    run_dir.mkdir(parents=True, exist_ok=True)
    result.write(run_dir)
    for finished in runs.checkpoints(run_dir):
        shutil.rmtree(finished)
    (run_dir / runs.CLAIM).unlink(missing_ok=True)
    logger.info("N=%d trial %d: best dev F1 %.4f", shots, trial, result.best_dev_f1)
    epochs = list(range(1, len(curve) + 1))
    plot_curves(run_dir / "dev_f1.png", {"dev F1": (epochs, curve)}, "epoch", "dev F1", f"N={shots}")
    return result


def best_model_scores(config: FinetuneNerConfig, data: TrialData, trainer: Trainer, model, run_dir: Path) -> dict:
    """After training: the best dev epoch's model, kept with its tokenizer as a loadable folder, and the
    `TrialResult` fields of that model (the one a card publishes): its epoch, DWAtt's mean depth weights on the dev
    set and (where labelled) the test scores (`entity_scores`)."""
    scores = {}
    if config.lora is None:
        model.load_state_dict(load_file(run_dir / runs.MODEL / "model.safetensors"))
    else:  # the best epoch's adapter, merged into the model that is scored and kept
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(run_dir / runs.ADAPTER / "adapter_model.safetensors"))
        model = trainer.model = model.merge_and_unload()
        model.save_pretrained(run_dir / runs.MODEL)
        shutil.copy(run_dir / runs.ADAPTER / BEST_EPOCH, run_dir / runs.MODEL / BEST_EPOCH)
    if config.fusion is not None and FUSIONS[config.fusion].depth_weights:
        # DWAtt's weights over the fused states (embeddings, layer 1, ...), averaged over the dev set's real tokens
        model.eval()
        scores["mean_depth_weights"] = model.base_model.mean_depth_weights(trainer.get_eval_dataloader())
    save_tokenizer(data.tokenizer, run_dir / runs.MODEL)
    runs.record_model(config.output_dir, run_dir / runs.MODEL)
    best_epoch = read_json(run_dir / runs.MODEL / BEST_EPOCH, "a best-epoch record", fields=("epoch",))
    scores["best_epoch"] = best_epoch["epoch"]
    if data.test is not None:
        if getattr(model.base_model, "feature_cache", None) is not None:
            model.base_model.enable_feature_cache(False)  # test sentences are read once
        trainer.compute_metrics = None  # the dev F1's, for the dev sentences: test is scored here
        prediction = trainer.predict(data.test)
        scores["test"] = entity_scores(prediction, data.label_names, data.scheme, data.test_words)
    return scores


def summarize(config: FinetuneNerConfig) -> NerResults:
    """Per N, the `ShotResults` of the trials finished so far (their result.json files); an N with no finished trial
    is left out. Once every trial of an N finished, the trial models that `keep_models` does not keep are removed
    (`prune_models`)."""
    what_ran = {
        "model": config.model,
        "fusion": config.fusion,
        "freeze_backbone": config.freeze_backbone,
        "fine_tuning": describe_lora(config.lora) if config.lora is not None else None,
    }
    shots_results = {}
    for shots in config.shots:
        paths = [runs.trial_dir(config.output_dir, shots, t) / runs.RESULT for t in range(config.trials)]
        trials = [TrialResult.read(path) for path in paths if path.exists()]
        if trials:
            whole = len(trials) == config.trials
            model = prune_models(config, shots, [trial.best_dev_f1 for trial in trials]) if whole else None
            shots_results[shots] = ShotResults.over(trials, config.trials, model)
    return NerResults(what_ran, shots_results)


def prune_models(config: FinetuneNerConfig, shots: int, dev_f1: list[float]) -> str | None:
    """Once every trial of N is finished: removes the trial models that `config.keep_models` does not keep, and
    returns the folder of the best trial's model (relative to `output_dir`) when it is kept."""
    best = max(range(len(dev_f1)), key=dev_f1.__getitem__)
    for trial in range(config.trials):
        keep = config.keep_models == "all" or (config.keep_models == "best" and trial == best)
        for name in (runs.MODEL, runs.ADAPTER):
            folder = runs.trial_dir(config.output_dir, shots, trial) / name
            if not keep and folder.is_dir():
                shutil.rmtree(folder)
    folder = runs.trial_dir("", shots, best) / runs.MODEL
    return str(folder) if (Path(config.output_dir) / folder).is_dir() else None


def write_results(
    config: FinetuneNerConfig, truncated: dict | None = None, sentences: dict | None = None
) -> NerResults:
    """results.json, results.md (`results_table`) and f1_vs_n.png over the finished trials (`summarize`); returns
    the results. `truncated`: {split: how many of its scored sentences have words past max_length}; `sentences`:
    {split: how many sentences the run read (train) or scored (dev, test)}, so that a reader (the model card) can
    tell the whole split from a sample."""
    results = summarize(config)
    if truncated is not None:
        results = dataclasses.replace(results, truncated=dict(truncated), max_length=config.max_length)
    if sentences is not None:
        results = dataclasses.replace(results, sentences=dict(sentences))
    output_dir = Path(config.output_dir)
    results.write(output_dir)
    (output_dir / runs.RESULTS_TABLE).write_text(results_table(config, results) + "\n")
    shots = list(results.shots)
    means = [100 * entry.mean for entry in results.shots.values()]  # in %, as the tables
    half_widths = [None if entry.ci95 is None else 100 * entry.ci95 for entry in results.shots.values()]
    trials = sorted({len(entry.best_dev_f1) for entry in results.shots.values()}) or [0]
    counted = f"{trials[0]}" if len(trials) == 1 else f"{trials[0]}-{trials[-1]}"
    counted += " trial per N" if trials == [1] else " trials per N"
    mode = "FE" if config.freeze_backbone else "FT"
    mode += f", {describe_lora(config.lora)}" if config.lora is not None else ""
    plot_means_against_counts(
        output_dir / runs.F1_VS_N_PLOT,
        {config.fusion or "plain": (shots, means, half_widths)},
        "N (log scale)",
        "best dev F1 (%): mean +- 95% t-interval",
        f"{config.fusion or 'plain'} ({mode}), {counted}" + (" (one: no interval)" if 1 in trials else ""),
        ylim=(0, 100),
    )
    return results


def results_table(config: FinetuneNerConfig, results: NerResults) -> str:
    """The Markdown table of a finetune-ner run's results: per N, the best dev F1 and the test F1 (mean +- 95% CI,
    %); an N with some trials still running elsewhere says how many of the planned ones it holds."""
    rows = []
    for shots in config.shots:
        entry = results.shots.get(shots)
        if entry is None:  # no trial finished yet
            rows.append(f"| {shots} | - (0 of {config.trials} trials) | - | - |")
            continue
        values = entry.best_dev_f1
        counted = f" ({len(values)} of {config.trials} trials)" if len(values) < config.trials else ""
        test = mean_and_interval(entry.test_mean, entry.test_ci95) if entry.tested else "-"
        rows.append(
            f"| {shots} | {mean_and_interval(entry.mean, entry.ci95)}{counted} "
            f"| {', '.join(f'{100 * v:.1f}' for v in values)} | {test} |"
        )
    mode = "FE" if config.freeze_backbone else "FT"
    mode += f", {describe_lora(config.lora)}" if config.lora is not None else ""
    table = [
        f"{config.dataset}, {config.fusion or 'plain'} ({mode}), {config.trials} trials, {config.epochs} epochs",
        "",
        f"| N ({'sentences per entity type' if config.shot_unit == 'per_entity_type' else 'sentences'}) "
        "| best dev F1 (mean +- 95% CI) | per trial | test F1 of the best dev epoch (mean +- 95% CI) |",
        "|---|---|---|---|",
        *rows,
    ]
    if any(results.truncated.values()):
        counts = ", ".join(f"{count} {split}" for split, count in results.truncated.items())
        table += ["", f"Sentences with words past max_length ({config.max_length}), counted as O: {counts}."]
    return "\n".join(table)
