"""What each job (`elc-bert pretrain`, `mlm`, `finetune-glue`, `finetune-ner`) is told: its config dataclass, read from
YAML and `key=value` overrides, checked field by field before any work starts, saved into the run folder and read
back from there. The jobs (`elc_bert.training`) run them; the readers of a run folder (the model card, the scorecard)
read its saved config through `saved_config`, as the same typed object the job ran with.

`fields` holds the machinery (`config_field`, `check_fields`, `load_config`, `save_config`), `conversion` the type
system, `help` a job's `--help`; one module per job holds its config.
"""

from pathlib import Path

from .. import runs
from ..models.errors import InputNotFoundError
from .fields import (  # noqa: F401
    check_fields,
    config_field,
    load_config,
    named_config,
    save_config,
)
from .finetune_glue import FinetuneGlueConfig
from .finetune_ner import FinetuneNerConfig
from .help import describe_config  # noqa: F401
from .mlm import MlmConfig
from .pretrain import PretrainConfig

# The job (its command name) -> its config class. The jobs are declared once, with the file each saves in its run
# folder, by `runs.JOB_CONFIGS` (below this module: the run folder's owner); the classes follow its order.
CONFIG_CLASSES = dict(
    zip(runs.JOB_CONFIGS, (PretrainConfig, MlmConfig, FinetuneNerConfig, FinetuneGlueConfig), strict=True)
)

__all__ = ["CONFIG_CLASSES", "FinetuneGlueConfig", "FinetuneNerConfig", "MlmConfig", "PretrainConfig", "saved_config"]


def saved_config(run_dir: str | Path, job: str):
    """The config `job` saved into its run folder `run_dir`, as its config class (checked as when the job started: a
    file edited by hand into a bad value is an InputError naming the file and the key)."""
    path = runs.config_file(Path(run_dir), job)
    if not path.is_file():
        raise InputNotFoundError(f"{run_dir}: no {path.name}, so not a run of elc-bert {job}")
    return load_config(CONFIG_CLASSES[job], path)
