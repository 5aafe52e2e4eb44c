"""What `elc-bert finetune-glue` measured on one (Super)GLUE entry (`glue/<entry>/result.json`), as the dataclass the
job writes and its readers (the job's summary and reuse of a finished task, the scorecard) read. The JSON keys are this
module's alone: the others read fields, never keys.
"""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from .. import runs
from ..data.jsonl import read_json
from ..models.errors import InputError


@dataclass(frozen=True)
class GlueResult:
    """One entry's dev scores, of the best early-stopping checkpoint: its task's main metric (`metric_name`, `metric`)
    and every metric (fractions; MCC may be negative), the examples trained on and scored, the epochs run, and where
    known the batch size, the task it was trained as (MNLI's two entries), the files, the patience, the main metric
    after each evaluation (`dev_curve`: [epoch, value] pairs, on the trained entry only) and the kept model's folder
    (relative to the glue folder)."""

    task: str
    metric_name: str
    metric: float
    all_metrics: dict
    num_train: int
    num_eval: int
    epochs_run: float
    batch_size: int | None = None
    trained_as: str | None = None
    train_file: str | None = None
    eval_file: str | None = None
    patience: int | None = None
    dev_curve: list | None = None
    model: str | None = None

    def write(self, entry_dir: Path) -> None:
        """Writes result.json into the entry's folder (made if need be), which marks the entry finished."""
        Path(entry_dir).mkdir(parents=True, exist_ok=True)
        (Path(entry_dir) / runs.RESULT).write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> "GlueResult":
        """The result in the result.json at `path`; InputError naming the file for one that is not JSON, lacks a
        field, or whose metric is not a fraction in [-1, 1] (a percentage, a string)."""
        fields = {field.name: field for field in dataclasses.fields(cls)}
        required = tuple(name for name, field in fields.items() if field.default is dataclasses.MISSING)
        record = read_json(path, "finetune-glue's result of one entry", fields=required)
        metric = record["metric"]
        if isinstance(metric, bool) or not isinstance(metric, (int, float)) or not -1 <= metric <= 1:
            raise InputError(
                f"{path}: 'metric' must be a number in [-1, 1] (a fraction, not a percentage), got {metric!r}"
            )
        return cls(**{name: value for name, value in record.items() if name in fields})
