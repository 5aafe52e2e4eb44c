"""`elc-bert convert REFERENCE_DIR OUT_DIR`: a published reference checkpoint (`model_type: "ltgbert"`) in this
package's format (`model_type: "elc_bert"`, our key names, safetensors), written only after its outputs are checked.

The package's classes already read reference folders, through `from_pretrained` itself (the config reader and the
checkpoint conversion mapping of `elc_bert/models/reference_checkpoints.py`); converting loads the folder that same
way, spares that translation on every later load and gives a folder that `elc-bert export` takes. Before anything is
written, the converted model's outputs on a fixed probe batch must match
- the reference's own modeling code, when the folder ships it (its `auto_map` file; it is run as
  `trust_remote_code=True` would run it), and
- the converted folder read back from disk (a round trip through a temporary folder next to OUT_DIR).
"""

import json
import shutil
from pathlib import Path

import torch

from elc_bert import models, runs
from elc_bert.data.tokenizer import TOKENIZER_CONFIG, load_tokenizer, save_tokenizer

from ..data.jsonl import read_json
from ..models.errors import InputError, InputNotFoundError
from .export import check_out_dir, give_usual_modes

PROBE_LENGTHS = (12, 7)  # a padded batch: one full row, one with padding


def _our_class(architecture: str):
    name = "ElcBert" + architecture.removeprefix("LtgBert")
    model_class = getattr(models, name, None)
    if not architecture.startswith("LtgBert") or model_class is None:
        raise InputError(f"no counterpart of {architecture!r} in elc_bert (expected LtgBertForMaskedLM, ...)")
    return model_class


def probe_batch(vocab_size: int, pad_id: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask (B x T) of random ordinary tokens, right-padded, [CLS] first."""
    generator = torch.Generator().manual_seed(seed)
    length = max(PROBE_LENGTHS)
    input_ids = torch.randint(min(7, vocab_size - 1), vocab_size, (len(PROBE_LENGTHS), length), generator=generator)
    attention_mask = torch.zeros_like(input_ids)
    for row, real in enumerate(PROBE_LENGTHS):
        attention_mask[row, :real] = 1
        input_ids[row, real:] = pad_id
    input_ids[:, 0] = 1
    return input_ids, attention_mask


@torch.no_grad()
def probe_outputs(model, input_ids, attention_mask) -> torch.Tensor:
    """The model's main output on the probe batch, at real tokens only (padding positions are arbitrary)."""
    if type(model).__name__.endswith("ForMultipleChoice"):  # B x C x T: the rows become the choices
        return model(input_ids[None], attention_mask=attention_mask[None]).logits.float()
    output = model(input_ids, attention_mask=attention_mask)
    for name in ("logits", "start_logits", "last_hidden_state"):
        value = getattr(output, name, None)
        if value is not None:
            value = value.float()
            return value[attention_mask.bool()] if value.dim() == 3 else value
    raise InputError(f"{type(model).__name__} returned none of logits / start_logits / last_hidden_state")


def _reference_model(source: Path, config: dict, architecture: str):
    """The reference's own model class from the folder's remote code, or None when the folder ships none."""
    auto_map = config.get("auto_map") or {}
    reference = next((ref for ref in auto_map.values() if ref.split("--")[-1].endswith("." + architecture)), None)
    if reference is None or "AutoConfig" not in auto_map:
        return None
    if not (source / (reference.split("--")[-1].split(".")[0] + ".py")).is_file():
        return None
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    model_class = get_class_from_dynamic_module(reference, str(source))
    config_class = get_class_from_dynamic_module(auto_map["AutoConfig"], str(source))
    return model_class.from_pretrained(str(source), config=config_class.from_pretrained(str(source))).eval()


def _compare(ours: torch.Tensor, theirs: torch.Tensor, what: str, atol: float):
    if ours.shape != theirs.shape:
        raise InputError(f"conversion check against {what}: output shape {tuple(ours.shape)} != {tuple(theirs.shape)}")
    error = (ours - theirs.float()).abs().max().item()
    if not error <= atol:
        raise InputError(
            f"conversion check against {what}: max abs difference {error:.3g} exceeds {atol}; nothing written"
        )
    return error


def convert(source: str | Path, out_dir: str | Path, *, overwrite: bool = False, atol: float = 1e-4) -> Path:
    """Converts the reference folder `source` into `out_dir`; returns `out_dir`. Raises ValueError (writing nothing)
    when a check fails."""
    source, out_dir = Path(source), Path(out_dir)
    config_file = source / "config.json"
    if not config_file.is_file():
        raise InputNotFoundError(f"{source} has no config.json")
    config = read_json(config_file, "a model config")
    if config.get("model_type") != models.LtgBertConfig.model_type:
        raise InputError(f"{config_file}: model_type is {config.get('model_type')!r}, not 'ltgbert'")
    check_out_dir(source, out_dir, overwrite)
    architecture = (config.get("architectures") or ["LtgBertForMaskedLM"])[0]
    model_class = _our_class(architecture)
    model = model_class.from_pretrained(source).eval()
    batch = probe_batch(model.config.vocab_size)
    ours = probe_outputs(model, *batch)

    checks = {}
    reference = _reference_model(source, config, architecture)
    if reference is not None:
        checks["the reference's own code"] = _compare(ours, probe_outputs(reference, *batch), "the reference", atol)
    with runs.replacing_folder(out_dir) as scratch:
        model.save_pretrained(scratch)
        tokenizer_files = [p for p in source.iterdir() if p.name.startswith(("tokenizer", "vocab", "special_tokens"))]
        for path in tokenizer_files:
            shutil.copyfile(path, scratch / path.name)
        if (scratch / TOKENIZER_CONFIG).is_file():  # loadable by AutoTokenizer: saved again, pipeline-ready
            save_tokenizer(load_tokenizer(scratch), scratch)
        reread = probe_outputs(model_class.from_pretrained(scratch).eval(), *batch)
        checks["the converted folder read back"] = _compare(ours, reread, "the converted folder", atol)
        report = {"source": str(source), "class": model_class.__name__, "max_abs_difference": checks}
        if reference is None:
            report["note"] = "the folder ships no reference code: checked against the converted folder only"
        (scratch / "conversion.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        give_usual_modes(scratch)
    return out_dir
