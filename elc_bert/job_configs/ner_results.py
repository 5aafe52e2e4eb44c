"""What `elc-bert finetune-ner` measured: each trial's result (`n<N>/trial<t>/result.json`) and the run's summary
over the finished trials (`results.json`), as the dataclasses the job writes and its readers (the results table, the
model card, the scripts) read. The JSON keys are this module's alone: the others read fields, never keys, so that a
result the job adds or renames is changed in one place; a run folder written before a key existed still reads.
"""

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .. import runs
from ..data.jsonl import read_json
from ..intervals import confidence_interval
from ..runs.layout import trial_results

_SHOTS_KEY = re.compile(r"n(\d+)")  # results.json's key of one N: "n8", "n32"


def _known_fields(cls, data: dict) -> dict:
    """The entries of `data` that are fields of `cls`: a key that a later version no longer writes is ignored."""
    return {field.name: data[field.name] for field in dataclasses.fields(cls) if field.name in data}


@dataclass(frozen=True)
class TrialResult:
    """One finished trial of N = `shots`: the training sentences it drew, the dev F1 after each epoch and the best of
    them, and of the best dev epoch's model: that epoch, DWAtt's mean depth weights on the dev set (a fusion with
    depth weights) and its test scores (`finetune_ner.entity_scores`: precision, recall, f1 and per_type; where the
    test split is labelled). None: not recorded (an older run, or nothing to record)."""

    shots: int
    trial: int
    best_dev_f1: float
    train_sentences: int | None = None
    dev_f1_per_epoch: list[float] | None = None
    mean_depth_weights: list[float] | None = None
    best_epoch: float | None = None
    test: dict | None = None

    @property
    def test_f1(self) -> float | None:
        """The entity-level micro-F1 of the best dev epoch's model on the test split; None where none was scored."""
        return None if self.test is None else self.test["f1"]

    def write(self, run_dir: Path) -> None:
        """Writes result.json into the trial's folder `run_dir` (the fields recorded, None left out)."""
        record = {key: value for key, value in dataclasses.asdict(self).items() if value is not None}
        (Path(run_dir) / runs.RESULT).write_text(json.dumps(record))

    @classmethod
    def read(cls, path: Path) -> "TrialResult":
        """The trial result in the result.json at `path`."""
        record = read_json(path, "a finetune-ner trial's result", fields=("shots", "trial", "best_dev_f1"))
        return cls(**_known_fields(cls, record))


def mean_depth_profiles(run_dir: Path) -> dict[int, tuple[int, list[float]]]:
    """{N: (trials, DWAtt's mean depth weights averaged over those trials)} of a finetune-ner run, from its finished
    trials' results (`TrialResult.mean_depth_weights`; empty when none recorded them)."""
    by_shots = {}
    for trial in map(TrialResult.read, trial_results(run_dir)):
        if trial.mean_depth_weights is not None:
            by_shots.setdefault(trial.shots, []).append(trial.mean_depth_weights)
    return {
        shots: (len(weights), [sum(column) / len(column) for column in zip(*weights)])
        for shots, weights in sorted(by_shots.items())
    }


@dataclass(frozen=True)
class ShotResults:
    """One N over its finished trials: each trial's best dev F1, their mean and 95% t-interval half-width (None for
    one trial) and how many trials were planned (`of`); where the trials scored the test split, the test F1 of each
    one's best dev epoch, with its mean and half-width; `model`: once every planned trial finished, the folder
    (relative to the run) of the best trial's kept model, None where it was not kept."""

    best_dev_f1: list[float]
    mean: float
    ci95: float | None
    of: int
    test_f1: list[float] | None = None
    test_mean: float | None = None
    test_ci95: float | None = None
    model: str | None = None

    @classmethod
    def over(cls, trials: list[TrialResult], planned: int, model: str | None = None) -> "ShotResults":
        """The results of the finished `trials` (at least one) of the `planned` ones (`confidence_interval`)."""
        values = [trial.best_dev_f1 for trial in trials]
        mean, half_width = confidence_interval(values)
        tests = {}
        scored = [trial.test_f1 for trial in trials if trial.test_f1 is not None]
        if scored:
            test_mean, test_half_width = confidence_interval(scored)
            tests = dict(test_f1=scored, test_mean=test_mean, test_ci95=test_half_width)
        return cls(values, mean, half_width, planned, model=model, **tests)

    @property
    def finished(self) -> bool:
        """Whether every planned trial finished."""
        return len(self.best_dev_f1) >= self.of

    @property
    def tested(self) -> bool:
        """Whether the trials scored the test split."""
        return self.test_mean is not None

    def to_json(self) -> dict:
        """As results.json holds it: the test entries only where tested, `model` only once every trial finished."""
        record = dataclasses.asdict(self)
        if not self.tested:
            for key in ("test_f1", "test_mean", "test_ci95"):
                del record[key]
        if not self.finished:
            del record["model"]
        return record

    @classmethod
    def from_json(cls, record: dict) -> "ShotResults":
        values = record["best_dev_f1"]
        return cls(**{"of": len(values), **_known_fields(cls, record)})  # a run before `of`: all it planned


@dataclass(frozen=True)
class NerResults:
    """A finetune-ner run's summary (results.json): `config`, what ran (model, fusion, freeze_backbone and
    fine_tuning, as the table names it); `shots`, per N with a finished trial, its `ShotResults`, in the config's
    order; `truncated`, per scored split (dev, test), how many sentences have words past `max_length` sub-tokens
    (counted as predicted O); `sentences`, per split, how many sentences the run read (train) or scored (dev,
    test), so that a reader can tell the whole split from a sample. Empty: not recorded (an older run)."""

    config: dict = dataclasses.field(default_factory=dict)
    shots: dict[int, ShotResults] = dataclasses.field(default_factory=dict)
    truncated: dict[str, int] = dataclasses.field(default_factory=dict)
    max_length: int | None = None
    sentences: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def tested(self) -> bool:
        """Whether any N's trials scored the test split."""
        return any(entry.tested for entry in self.shots.values())

    def to_json(self) -> dict:
        record = {"config": self.config, **{f"n{shots}": entry.to_json() for shots, entry in self.shots.items()}}
        if self.max_length is not None:
            record["truncated_sentences"] = {**self.truncated, "max_length": self.max_length}
        if self.sentences:
            record["sentences"] = self.sentences
        return record

    @classmethod
    def from_json(cls, record: dict) -> "NerResults":
        shots = {
            int(match.group(1)): ShotResults.from_json(entry)
            for key, entry in record.items()
            if (match := _SHOTS_KEY.fullmatch(key)) and isinstance(entry, dict) and "best_dev_f1" in entry
        }
        truncated = dict(record.get("truncated_sentences", {}))
        max_length = truncated.pop("max_length", None)
        return cls(record.get("config", {}), shots, truncated, max_length, record.get("sentences", {}))

    def write(self, output_dir: Path) -> None:
        """Writes results.json into the run folder `output_dir`."""
        (Path(output_dir) / runs.RESULTS).write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def read(cls, run_dir: Path) -> "NerResults | None":
        """The results.json of the run folder `run_dir`; None where it has none (no trial finished yet)."""
        path = Path(run_dir) / runs.RESULTS
        return cls.from_json(read_json(path, "the results.json of a finetune-ner run")) if path.is_file() else None
