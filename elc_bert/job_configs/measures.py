"""What a run read and measured, as its saved config and results name them (`Run`, `Corpus`, `Measure`): each config
class with a `results_class` answers for its job (`corpora`, `measures`, `training_text`, `limitations`), and the
model card fills its templates from these; nothing here is derived or filled in.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..pretrained import MODEL_ALIASES, is_hub_id


@dataclass(frozen=True)
class Run:
    """What a card knows of the run that made its model: the job (None without a run), the config the job saved (its
    config class), what the run recorded (an instance of the config's `results_class`, None where it has none), its
    folder, and why its measured numbers are left out (None: they are not; what it read stays)."""

    job: str | None = None
    config: object = None
    results: object = None
    dir: Path | None = None
    left_out: str | None = None

    @property
    def measured(self):
        """The run's results, or None where they are left out or it has none."""
        return None if self.left_out else self.results

    def without_metrics(self, why: str) -> "Run":
        return dataclasses.replace(self, left_out=why)

    def corpora(self) -> tuple[list["Corpus"], list["Corpus"]]:
        """(training data, evaluation data) of the run, as its saved config names them."""
        return self.config.corpora(self) if self.config is not None else ([], [])

    def measures(self) -> list["Measure"]:
        """What the run measured (and nothing else), in the order its files hold it."""
        return self.config.measures(self) if self.measured is not None else []

    def _job_folder(self) -> Path | None:
        """The folder the run's job ran in, where its relative paths start: the run folder less the relative
        `output_dir` its config saved. None when that does not tell: an absolute output_dir or one with "..", or a run
        folder moved since."""
        output_dir = self.config.output_dir if self.config is not None else ""
        parts = Path(output_dir).parts
        if self.dir is None or not parts or Path(output_dir).is_absolute() or ".." in parts:
            return None
        here = Path(self.dir).resolve().parts
        return Path(*here[: -len(parts)]) if len(here) > len(parts) and here[-len(parts) :] == parts else None

    def read_from_hub(self, name: str, named_on_hub: bool) -> bool:
        """Whether the run's job read `name` from the Hub, for a job that reads a local folder of that name where it
        ran when there is one, else the Hub (`datasets.load_dataset`, `elc-bert mlm`'s data_dir, a model name): never
        for a name no Hub id has; by the folder the job ran in where the run shows it (`_job_folder`); else when the
        config names it as a Hub source (`named_on_hub`). The folder `export` runs in plays no part."""
        if not is_hub_id(name):
            return False
        folder = self._job_folder()
        return named_on_hub if folder is None else not (folder / name).exists()

    @property
    def base_model(self) -> str | None:
        """The Hub model a fine-tuning run started from (its config's `start_model`): an id `owner/name` or an alias
        of one (`MODEL_ALIASES`); None for a local folder or a run that started from scratch."""
        name = self.config.start_model if self.config is not None else None
        if name in MODEL_ALIASES:
            return MODEL_ALIASES[name].hub_id
        return name if name and is_hub_id(name, owner=True) and self.read_from_hub(name, named_on_hub=True) else None


@dataclass(frozen=True)
class Corpus:
    """Data a run read, as its saved config names it: a Hub dataset (`path` its id, `config` its configuration) or
    local files (`path` as the job was given it; `dataset_id` the Hub id of the dataset they are a copy of, when the
    job reads a known one; `whole`: they were the whole of it)."""

    name: str  # what the data is, e.g. "CoNLL-2003"; as the config names it when it says no more
    path: str
    on_hub: bool = False
    config: str | None = None
    dataset_id: str | None = None
    whole: bool = False

    @property
    def index_type(self) -> str:
        """The model-index's `dataset.type`, never a local path: the Hub id of the dataset, or of the one the local
        files copy, else "text" (the `datasets` library's name for plain text files, as its cards write it)."""
        return self.path if self.on_hub else self.dataset_id or "text"

    @property
    def listed_id(self) -> str | None:
        """The Hub id the card's `datasets:` lists: of a dataset read from the Hub or read whole from local files."""
        return self.path if self.on_hub else self.dataset_id if self.whole else None

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
