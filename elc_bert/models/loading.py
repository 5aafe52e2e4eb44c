"""Whether a checkpoint's weights filled a model: what `from_pretrained(..., output_loading_info=True)` reports.

`transformers` fills a weight that the checkpoint lacks with a random initialisation and only logs it; a model scored,
analysed or wrapped in that state measures its random weights. Weights the library ties to another one (a decoder to
the word embeddings) are not reported missing when their source loaded, so they never count here. A weights file cut
short (a process killed while writing it, a full disk) is named before anything loads.
"""

from pathlib import Path

from .errors import InputError

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
    problems = [f"{why[kind]}: {key_list(keys)}" for kind, keys in unloaded.items() if keys]
    if problems:
        problems = "; ".join(problems)
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


def load_pretrained(model_class, source, **kwargs):
    """`model_class.from_pretrained(source, output_loading_info=True, **kwargs)`: the model and its loading info (for
    `check_weights_loaded`). Weights of a local folder that are cut short raise OSError naming the file, instead of
    the safetensors library's "incomplete metadata" that names none."""
    damaged = cut_short_weights(source)
    if damaged is not None:
        raise OSError(
            f"{damaged} is cut short ({damaged.stat().st_size} bytes, fewer than its header describes): the process "
            "that wrote it was killed or the disk was full. Use an earlier checkpoint or save the model again"
        )
    return model_class.from_pretrained(source, output_loading_info=True, **kwargs)


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
