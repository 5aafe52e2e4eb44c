"""What each job (`elc-bert pretrain`, `mlm`, `finetune-glue`, `finetune-ner`) is told: its config dataclass, read from
YAML and `key=value` overrides, checked field by field before any work starts, saved into the run folder and read
back from there. The jobs (`elc_bert.training`) run them; the readers of a run folder (the model card, the scorecard)
read its saved config through `saved_config`, as the same typed object the job ran with.

`fields` holds the machinery (`config_field`, `check_fields`, `load_config`, `save_config`), `conversion` the type
system, `help` a job's `--help`; one module per job holds its config.
"""

from pathlib import Path

from .. import runs
from ..models.errors import InputError, InputNotFoundError
from .fields import check_fields, config_field, load_config, named_config, save_config  # noqa: F401
from .finetune_glue import FinetuneGlueConfig
from .finetune_ner import FinetuneNerConfig
from .help import describe_config  # noqa: F401
from .measures import Corpus, Measure, Run, shown_path  # noqa: F401
from .mlm import MlmConfig
from .pretrain import PretrainConfig

# The jobs, declared once: each config class names its job (the command); the rest derive from this table (the
# run folder's config file, `runs.config_file`; the parser's copy of the commands, held equal by tests/test_layout.py).
CONFIG_CLASSES = {cls.job: cls for cls in (PretrainConfig, MlmConfig, FinetuneNerConfig, FinetuneGlueConfig)}

__all__ = [
    "CONFIG_CLASSES",
    "FinetuneGlueConfig",
    "FinetuneNerConfig",
    "MlmConfig",
    "PretrainConfig",
    "jobs_of",
    "read_run",
    "refuse_other_jobs",
    "saved_config",
]


def jobs_of(folder: str | Path) -> list[str]:
    """The jobs whose config file `folder` holds: the jobs that made it (none for a folder no job wrote)."""
    return [job for job in CONFIG_CLASSES if runs.config_file(folder, job).is_file()]


def refuse_other_jobs(folder: str | Path, job: str) -> None:
    """Refuses to let `job` write into the run folder of another job (reading it, e.g. as a model, is fine): the two
    runs' configs, metrics and checkpoints would mix, and resuming would pick up the other job's checkpoints."""
    others = [other for other in jobs_of(folder) if other != job]
    if others:
        raise InputError(
            f"{folder} is the run folder of `elc-bert {others[0]}` (it holds {runs.config_file(folder, others[0]).name}"
            f"): `elc-bert {job}` does not write into another job's run; choose another output_dir"
        )


def saved_config(run_dir: str | Path, job: str):
    """The config `job` saved into its run folder `run_dir`, as its config class (checked as when the job started: a
    file edited by hand into a bad value is an InputError naming the file and the key)."""
    path = runs.config_file(Path(run_dir), job)
    if not path.is_file():
        raise InputNotFoundError(f"{run_dir}: no {path.name}, so not a run of elc-bert {job}")
    return load_config(CONFIG_CLASSES[job], path)


def read_run(run_dir: str | Path | None) -> Run:
    """The run's job, saved config and results (its config class's `results_class`), from the files its job wrote."""
    if run_dir is None:
        return Run()
    carded = [cls for cls in CONFIG_CLASSES.values() if cls.results_class is not None]
    for cls in carded:
        if cls.job in jobs_of(run_dir):
            return Run(cls.job, saved_config(run_dir, cls.job), cls.results_class.read(Path(run_dir)), Path(run_dir))
    names = ", ".join(runs.config_file(run_dir, cls.job).name for cls in carded)
    raise InputNotFoundError(f"{run_dir}: not a run directory (none of {names})")
