"""What `elc-bert pretrain` and `elc-bert mlm` measured (`metrics.json`), as the dataclass the jobs write and its
readers (the model card, eval-babylm's summary, the scripts) read: the file's keys are this module's alone."""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from .. import runs
from ..data.jsonl import read_json


@dataclass(frozen=True)
class TrainingMetrics:
    """`final`: the run's final metrics (the Trainer's names: eval_loss, train_loss, test_perplexity, ...; None for a
    run still training, read from a checkpoint); `log_history`: the Trainer's log, an entry per logging step."""

    final: dict | None
    log_history: list[dict]

    @property
    def step(self) -> int | None:
        """The last step the log records; None for an empty log."""
        return max((entry["step"] for entry in self.log_history if "step" in entry), default=None)

    def write(self, run_dir: Path) -> None:
        """Writes metrics.json into the run folder `run_dir`."""
        (Path(run_dir) / runs.METRICS).write_text(json.dumps(dataclasses.asdict(self), indent=2))

    @classmethod
    def read(cls, run_dir: Path) -> "TrainingMetrics | None":
        """The metrics.json of the run folder (or model folder) `run_dir`; None where it has none (not finished)."""
        path = Path(run_dir) / runs.METRICS
        if not path.is_file():
            return None
        record = read_json(path, "the metrics.json of a pretrain or mlm run", fields=("final",))
        return cls(record["final"], record.get("log_history", []))

    @classmethod
    def of_checkpoint(cls, checkpoint: Path) -> "TrainingMetrics":
        """What a run still training has logged up to `checkpoint` (its trainer state), with no final metrics."""
        state = read_json(Path(checkpoint) / runs.TRAINER_STATE, "a Trainer state", fields=("log_history",))
        return cls(None, state["log_history"])
