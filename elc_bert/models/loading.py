"""Whether a checkpoint's weights filled a model: what `from_pretrained(..., output_loading_info=True)` reports.

`transformers` fills a weight that the checkpoint lacks with a random initialisation and only logs it; a model scored,
analysed or wrapped in that state measures its random weights. Weights the library ties to another one (a decoder to
the word embeddings) are not reported missing when their source loaded, so they never count here. A weights file cut
short (a process killed while writing it, a full disk) is named before anything loads, and so are a local folder that
does not exist (`is_hub_id` is the one rule for what can be a Hub name instead) and pickled weights PyTorch refuses.
`check_vocabulary` and `check_max_length` say whether a tokenizer's inputs fit the loaded model.
"""

import pickle
from pathlib import Path

from .errors import InputError, InputNotFoundError

SHOWN_KEYS = 5


def key_list(keys) -> str:
    """The first `SHOWN_KEYS` of `keys` (sorted), then how many there are in all."""
    keys = sorted(keys)
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown if len(keys) <= SHOWN_KEYS else f"{shown}, ... ({len(keys)} in all)"


def unloaded_weights(loading_info: dict) -> dict[str, list[str]]:
    """The keys that did not load, by why, from `from_pretrained`'s loading info: "missing" (in the model, not in the
    checkpoint: randomly initialised), "unexpected" (in the checkpoint, not in the model: unused) and "mismatched" (of
    another shape: randomly initialised). Empty lists when every weight loaded."""
    mismatched = [key if isinstance(key, str) else key[0] for key in loading_info.get("mismatched_keys") or ()]
    return {
        "missing": sorted(loading_info.get("missing_keys") or ()),
        "unexpected": sorted(loading_info.get("unexpected_keys") or ()),
        "mismatched": sorted(mismatched),
    }


def check_fine_tuning_start(source, model, loading_info: dict, accept_hint: str) -> None:
    """`check_weights_loaded` for a model about to be fine-tuned: the weights of its task head (outside its base
    model: a classifier, or an MLM head that MLM fine-tuning trains) may start fresh, and a head of another size is
    replaced; the base model's must all load."""
    if model.base_model is not model:
        prefix = model.base_model_prefix + "."
        unloaded = unloaded_weights(loading_info)
        loading_info = {
            "missing_keys": [key for key in unloaded["missing"] if key.startswith(prefix)],
            "mismatched_keys": [key for key in unloaded["mismatched"] if key.startswith(prefix)],
            "unexpected_keys": unloaded["unexpected"],
        }
    check_weights_loaded(source, model, loading_info, accept_hint)


def check_weights_loaded(source, model, loading_info: dict, accept_hint: str) -> None:
    """Raises a ValueError naming `source` (the folder or Hub name) and the keys when any weight of `model` did not
    load (`unloaded_weights`); `accept_hint` tells how to use the model anyway. Unexpected keys of a whole module that
    `model` does not have (the pooler and next-sentence head of a BERT pretraining checkpoint read as a masked LM) are
    a part this task leaves out, not a failure; unexpected keys inside a module that `model` has (an ELC-BERT layer's
    `prev_layer_weights` read by LTG-BERT) mean another architecture, and are refused."""
    unloaded = unloaded_weights(loading_info)
    modules = dict(model.named_modules())
    unloaded["unexpected"] = [key for key in unloaded["unexpected"] if key.rpartition(".")[0] in modules]
    why = {
        "missing": "missing from the checkpoint (randomly initialised)",
        "mismatched": "of another shape in the checkpoint (randomly initialised)",
        "unexpected": "in the checkpoint but not in the model's modules (another architecture)",
    }
    problems = "; ".join(f"{why[kind]}: {key_list(keys)}" for kind, keys in unloaded.items() if keys)
    if problems:
        raise InputError(f"{source}: the checkpoint does not fill {type(model).__name__}; {problems}. {accept_hint}")


def complete_safetensors(path: Path) -> bool:
    """Whether the safetensors file `path` opens: the library refuses one cut short (fewer bytes than its header
    describes) or otherwise damaged."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt"):
            return True
    except (SafetensorError, OSError):
        return False


def cut_short_weights(folder) -> Path | None:
    """The first safetensors file of the local folder `folder` that is cut short, or None (also for a Hub name)."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    return next((path for path in sorted(folder.glob("*.safetensors")) if not complete_safetensors(path)), None)


def is_hub_id(name: str, owner: bool = False) -> bool:
    """Whether `name` can be a Hub repository id (`owner/name`, or a legacy `name` unless `owner` is asked for), by
    `huggingface_hub`'s own rule (`validate_repo_id`): a local path (starting with `.`, `/` or `~`, or with more than
    two parts) cannot. The one rule for "is this a Hub id" that the package's layers read."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return "/" in name or not owner


def check_model_source(name) -> None:
    """Raises InputNotFoundError naming `name` when it can only be a local path (`is_hub_id`) and does not exist,
    before anything tries the Hub with it."""
    if not Path(name).expanduser().exists() and not is_hub_id(str(name)):
        raise InputNotFoundError(f"model {name}: no such folder (nor a Hub name, which is owner/name)")


def load_pretrained(model_class, source, **kwargs):
    """`model_class.from_pretrained(source, output_loading_info=True, **kwargs)`: the model and its loading info (for
    `check_weights_loaded`). Weights of another shape than the config's are left random and listed in the info
    (`ignore_mismatched_sizes`), so that the caller's check names them; a missing local folder
    (`check_model_source`) and pickled weights that PyTorch does not load for safety raise InputError naming them;
    weights of a local folder that are cut short, OSError naming the file, instead of the safetensors library's
    "incomplete metadata" that names none."""
    check_model_source(source)
    damaged = cut_short_weights(source)
    if damaged is not None:
        raise OSError(
            f"{damaged} is cut short ({damaged.stat().st_size} bytes, fewer than its header describes): the process "
            "that wrote it was killed or the disk was full. Use an earlier checkpoint or save the model again"
        )
    kwargs.setdefault("ignore_mismatched_sizes", True)
    try:
        return model_class.from_pretrained(source, output_loading_info=True, **kwargs)
    except pickle.UnpicklingError as error:
        if "weights_only" not in str(error):
            raise
        pickled = ", ".join(path.name for path in sorted(Path(source).glob("*.bin"))) if Path(source).is_dir() else ""
        raise InputError(
            f"{source}: holds pickled PyTorch weights{f' ({pickled})' if pickled else ''} with objects besides "
            "tensors, which are not loaded, for safety (unpickling can run any code). If you trust them, load them "
            "yourself (torch.load(path, weights_only=False)) into the model and save it with save_pretrained, which "
            "writes model.safetensors"
        ) from None


def check_vocabulary(tokenizer, model, model_source) -> None:
    """Raises a ValueError naming both folders when `tokenizer` gives ids beyond `model`'s input embeddings (a
    tokenizer of another model): those ids have no embedding, and the model would fail on them mid-run. The tokenizer
    is named by the folder it was loaded from (its `name_or_path`)."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise InputError(
            f"the tokenizer of {tokenizer.name_or_path} has {len(tokenizer)} tokens, but the model of {model_source} "
            f"embeds {rows}: ids from {rows} on have no embedding. Use the model's own tokenizer (or one made for it)"
        )


def check_max_length(max_length: int, model_config, tokenizer, model_source, key: str = "max_length") -> None:
    """Raises InputError naming `key` when inputs of `max_length` tokens are longer than the model of `model_config`
    takes: a model with learned positions embeds `max_position_embeddings` of them (fewer where its tokenizer's
    `model_max_length` says so: RoBERTa's first two are not positions), and fails on a longer batch deep inside its
    forward. ELC-BERT's and LTG-BERT's relative positions take any length."""
    from .configuration_elc_bert import ElcBertConfig

    model_config = getattr(model_config, "backbone_config", None) or model_config  # a layer-fusion model's backbone
    positions = getattr(model_config, "max_position_embeddings", None)
    if isinstance(model_config, ElcBertConfig) or positions is None:
        return
    what, limit = "max_position_embeddings", positions
    declared = getattr(tokenizer, "model_max_length", None)
    if declared is not None and declared < min(positions, 1_000_000):  # the library's stand-in for none is 1e30
        what, limit = "tokenizer's model_max_length", declared
    if max_length > limit:
        raise InputError(
            f"{key} {max_length} is more than the model of {model_source} takes: its {what} is {limit}. "
            f"Set {key} to {limit} or less"
        )
