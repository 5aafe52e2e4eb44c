"""What a run measured and what it read, from the files its job wrote: the job, its saved config (as its config
class), its measured numbers (`metrics.json`'s final metrics of `elc-bert pretrain` and `elc-bert mlm`, finetune-ner's
`NerResults`) as `Measure`s on named data, and the data the job read (`Corpus`: local files or a Hub dataset, a whole
NER split or a sample). `model_card` fills its templates from these; nothing here is derived or filled in.
"""

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from elc_bert import runs
from elc_bert.job_configs import FinetuneNerConfig, MlmConfig, PretrainConfig, jobs_of, saved_config
from elc_bert.job_configs.ner_results import NerResults
from elc_bert.pretrained import MODEL_ALIASES, is_hub_id

from ..models.errors import InputNotFoundError

# finetune-ner's `dataset` -> (its name, the Hub id of the dataset its local files copy)
NER_CORPORA = {"conll03": ("CoNLL-2003", "conll2003"), "wikiann": ("WikiAnn", "wikiann")}
# Sentences in each split of the NER datasets whose sizes are known here ((dataset, WikiAnn language) -> split ->
# sentences): what tells a run that read the whole split from one that read a sample.
NER_SPLIT_SIZES = {
    ("conll03", None): {"train": 14041, "dev": 3250, "test": 3453},
    ("wikiann", "en"): {"train": 20000, "dev": 10000, "test": 10000},
}
SPLIT_NAMES = {"train": "train", "dev": "validation", "test": "test"}  # a finetune-ner split -> the model-index's


@dataclass(frozen=True)
class Run:
    """What a card knows of the run that made its model: the job (None without a run), the config the job saved (its
    config class), what the run measured (`metrics`: the final metrics of pretrain and mlm; `results`: finetune-ner's,
    None where it has none), its folder, and why its metrics are left out (None: they are not); `sentences`: what a
    finetune-ner run read per split (provenance, kept when the metrics are left out)."""

    job: str | None = None
    config: PretrainConfig | MlmConfig | FinetuneNerConfig | None = None
    metrics: dict = dataclasses.field(default_factory=dict)
    dir: Path | None = None
    left_out: str | None = None
    sentences: dict = dataclasses.field(default_factory=dict)
    results: NerResults | None = None

    @property
    def measured(self) -> bool:
        """Whether the card has any of the run's measured numbers."""
        return bool(self.metrics) or (self.results is not None and bool(self.results.shots))

    def without_metrics(self, why: str) -> "Run":
        """The run with its measured numbers left out because `why`; what it read stays."""
        return dataclasses.replace(self, metrics={}, results=None, left_out=why)


def read_run(run_dir: Path | None) -> Run:
    """The run's job, saved config and measured metrics, from the files its job wrote."""
    if run_dir is None:
        return Run()
    run_dir = Path(run_dir)
    jobs = ("pretrain", "mlm", "finetune-ner")
    for job in jobs:
        if job not in jobs_of(run_dir):
            continue
        config = saved_config(run_dir, job)
        if job == "finetune-ner":
            results = NerResults.read(run_dir)
            sentences = results.sentences if results is not None else {}
            return Run(job, config, dir=run_dir, sentences=sentences, results=results)
        metrics_file = run_dir / runs.METRICS
        metrics = json.loads(metrics_file.read_text(encoding="utf-8"))["final"] if metrics_file.is_file() else {}
        return Run(job, config, metrics, run_dir)
    names = ", ".join(runs.config_file(run_dir, job).name for job in jobs)
    raise InputNotFoundError(f"{run_dir}: not a run directory (none of {names})")


@dataclass(frozen=True)
class Corpus:
    """Data a run read, as its saved config names it: a Hub dataset (`path` its id, `config` its configuration) or
    local files (`path` as the job was given it; `dataset_id` the Hub id of the dataset they are a copy of, when the
    job reads a known one)."""

    name: str  # what the data is, e.g. "CoNLL-2003"; as the config names it when it says no more
    path: str
    on_hub: bool = False
    config: str | None = None
    dataset_id: str | None = None

    @property
    def index_type(self) -> str:
        """The model-index's `dataset.type`, never a local path: the Hub id of the dataset, or of the one the local
        files copy, else "text" (the `datasets` library's name for plain text files, as its cards write it)."""
        return self.path if self.on_hub else self.dataset_id or "text"

    def __str__(self) -> str:
        if self.on_hub:
            return f"the Hub dataset `{self.path}`" + (f" ({self.config})" if self.config else "")
        path = shown_path(self.path)
        return f"{self.name} from local files `{path}`" if self.dataset_id else f"local files `{path}`"


def shown_path(path) -> str:
    """A local path as a card shows it: a relative one as given, an absolute one by its last two parts
    (`.../data/train.txt`), so that a published card names no folder of the machine that made it."""
    parts = Path(str(path)).parts
    if not Path(str(path)).is_absolute():
        return str(path)
    return "/".join(("...", *parts[-2:])) if len(parts) > 3 else str(path)


def _job_folder(run: Run) -> Path | None:
    """The folder the run's job ran in, where its relative paths start: the run folder less the relative
    `output_dir` its config saved. None when that does not tell: an absolute output_dir or one with "..", or a run
    folder moved since."""
    run_dir, output_dir = run.dir, run.config.output_dir if run.config is not None else ""
    parts = Path(output_dir).parts
    if run_dir is None or not parts or Path(output_dir).is_absolute() or ".." in parts:
        return None
    here = Path(run_dir).resolve().parts
    return Path(*here[: -len(parts)]) if len(here) > len(parts) and here[-len(parts) :] == parts else None


def _read_from_hub(run: Run, name: str, named_on_hub: bool) -> bool:
    """Whether the run's job read `name` from the Hub, for a job that reads a local folder of that name where it
    ran when there is one, else the Hub (`datasets.load_dataset`, `elc-bert mlm`'s data_dir, a model name): never
    for a name no Hub id has; by the folder the job ran in where the run shows it (`_job_folder`); else when the
    config names it as a Hub source (`named_on_hub`). The folder `export` runs in plays no part."""
    if not is_hub_id(name):
        return False
    folder = _job_folder(run)
    return named_on_hub if folder is None else not (folder / name).exists()


def run_corpora(run: Run) -> tuple[list[Corpus], list[Corpus]]:
    """(training data, evaluation data) of the run, from its saved config: `elc-bert finetune-ner` and the files of
    `elc-bert pretrain` are local files; a `datasets` source of pretrain (a dict entry) and the data_dir of
    `elc-bert mlm` are a Hub dataset or a local folder (`_read_from_hub`; mlm's config names a Hub dataset by its
    `dataset_config`)."""
    config = run.config
    if isinstance(config, PretrainConfig):

        def corpus(entry) -> Corpus:
            if isinstance(entry, dict):
                path = str(entry.get("path"))
                return Corpus(path, path, _read_from_hub(run, path, named_on_hub=True), entry.get("name"))
            return Corpus(str(entry), str(Path(config.data_dir) / entry))

        return [corpus(entry) for entry in config.train_files], [corpus(entry) for entry in config.validation_files]
    if isinstance(config, MlmConfig):
        path = config.data_dir
        if _read_from_hub(run, path, named_on_hub=config.dataset_config is not None):
            data = Corpus(path, path, on_hub=True, config=config.dataset_config)
        else:  # the job's local files are WikiText-2's train/valid/test
            data = Corpus("WikiText-2", path, dataset_id="wikitext")
        return [data], [data]
    if isinstance(config, FinetuneNerConfig):
        name, dataset_id = NER_CORPORA[config.dataset]
        language = config.language if config.dataset == "wikiann" else None
        if language:
            name += f" ({language})"
        data = Corpus(name, config.data_dir, config=language, dataset_id=dataset_id)  # local files only
        return [data], [data]
    return [], []


def ner_split_sizes(config: FinetuneNerConfig) -> dict[str, int] | None:
    """The sentences in each split of the run's dataset (`NER_SPLIT_SIZES`), or None where they are not known."""
    return NER_SPLIT_SIZES.get((config.dataset, config.language if config.dataset == "wikiann" else None))


def ner_samples(run: Run) -> dict[str, str]:
    """{split ("train", "dev", "test"): how it is a sample} for the splits of a finetune-ner run that were not the whole
    split of the dataset: fewer sentences than the dataset's split has (`NER_SPLIT_SIZES`, from the sentence counts
    the run recorded), or a cap in the config (`max_eval_sentences`, `max_test_sentences`)."""
    config, read, full = run.config, run.sentences, ner_split_sizes(run.config) or {}
    caps = {"dev": config.max_eval_sentences, "test": config.max_test_sentences}
    samples = {}
    for split in ("train", "dev", "test"):
        if split in read and split in full:
            if read[split] < full[split]:
                samples[split] = f"{read[split]:,} of its {full[split]:,} {split} sentences"
        elif caps.get(split) is not None:  # a cap that may have cut the split: no more read than it, less than all
            cap = caps[split]
            if cap <= read.get(split, math.inf) and cap < full.get(split, math.inf):
                samples[split] = f"its first {cap:,} {split} sentences at most"
    return samples


def whole_ner_dataset(run: Run) -> bool:
    """Whether the finetune-ner run read every split of a dataset whose sizes are known, in full."""
    read, full = run.sentences, ner_split_sizes(run.config)
    return full is not None and all(read.get(split) == size for split, size in full.items()) and not ner_samples(run)


def base_model(run: Run) -> str | None:
    """The Hub model a fine-tuning run (mlm, finetune-ner) started from, as its config names it: an id `owner/name`
    or an alias of one (`MODEL_ALIASES`); None for a local folder or a run that started from scratch."""
    if not isinstance(run.config, (MlmConfig, FinetuneNerConfig)):
        return None
    name = run.config.model
    if name in MODEL_ALIASES:
        return MODEL_ALIASES[name].hub_id
    return name if is_hub_id(name, owner=True) and _read_from_hub(run, name, named_on_hub=True) else None


@dataclass(frozen=True)
class Measure:
    """One number the run measured: its kind (the model-index's metric type: "loss", "perplexity", "f1"), its name,
    its value, and the data and split it was measured on (None: over the training run, which the model-index leaves
    out); `shown_as`: the results table's name for it where that says more; for a mean over trials, its 95%
    half-width (None for one trial) and the trials' values."""

    kind: str
    name: str
    value: float
    corpus: Corpus | None = None
    split: str | None = None
    shown_as: str | None = None
    half_width: float | None = None
    trials: tuple[float, ...] | None = None


def measures(run: Run) -> list[Measure]:
    """What the run measured (and nothing else), in the order its files hold it."""
    config, metrics = run.config, run.metrics
    _, evaluation = run_corpora(run)
    found = []
    if isinstance(config, PretrainConfig):
        if "eval_loss" in metrics:
            validation = ", ".join(corpus.name for corpus in evaluation) or "validation files"
            dataset = evaluation[0] if len(evaluation) == 1 else Corpus(validation, validation)
            name = "validation MLM loss"
            found.append(Measure("loss", name, metrics["eval_loss"], dataset, "validation", f"{name} ({validation})"))
        if "train_loss" in metrics:
            found.append(Measure("loss", "training MLM loss, mean over the run", metrics["train_loss"]))
    elif isinstance(config, MlmConfig):
        dataset = evaluation[0]
        for split in ("validation", "test"):
            for metric in ("loss", "perplexity"):
                if f"{split}_{metric}" in metrics:
                    name = f"{split} MLM {metric}"
                    value = metrics[f"{split}_{metric}"]
                    found.append(Measure(metric, name, value, dataset, split, f"{dataset.name} {name}"))
    elif isinstance(config, FinetuneNerConfig) and run.results is not None:
        samples = {SPLIT_NAMES[split]: f"a sample: {how}" for split, how in ner_samples(run).items()}
        unit = "sentences per entity type" if config.shot_unit == "per_entity_type" else "sentences"
        for shots, entry in run.results.shots.items():
            # the best dev F1 of each trial, and the test F1 of that epoch's model where the run scored one
            splits = [("validation", "best dev micro-F1", entry.best_dev_f1, entry.mean, entry.ci95)]
            if entry.tested:
                measure = "test micro-F1 of the best dev epoch"
                splits.append(("test", measure, entry.test_f1, entry.test_mean, entry.test_ci95))
            for split, measure, values, mean, half_width in splits:
                name = f"{measure}, N={shots} {unit}, mean of {len(values)} trials"
                dataset = evaluation[0]
                if split in samples:  # named as a sample in the model-index and in the table
                    dataset = dataclasses.replace(dataset, name=f"{dataset.name}, {samples[split]}")
                    name += f" ({samples[split]})"
                found.append(Measure("f1", name, mean, dataset, split, half_width=half_width, trials=tuple(values)))
    return found
