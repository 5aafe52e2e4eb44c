"""The sha256 of each model a run saved to publish, so that its metrics go only onto the card of a model it made."""

import hashlib
import json
from pathlib import Path

from ..models.errors import InputError, InputNotFoundError
from .layout import MODEL_FINGERPRINTS


def fingerprint(model_dir: str | Path) -> str:
    """The sha256 of a model folder's weights: of model.safetensors (the same as `sha256sum model.safetensors`), or
    of its shards in name order, or of pytorch_model*.bin when it has no safetensors."""
    model_dir = Path(model_dir)
    files = sorted(model_dir.glob("model*.safetensors")) or sorted(model_dir.glob("pytorch_model*.bin"))
    if not files:
        raise InputNotFoundError(f"{model_dir}: no model weights (model.safetensors or pytorch_model.bin)")
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def record_model(run_dir: str | Path, model_dir: str | Path) -> str:
    """Records in `run_dir` that the run saved the model in `model_dir` (a folder inside it) to publish; returns its
    fingerprint. One appended line per model, so that processes sharing a run (finetune-ner trials) never lose one
    another's; a later line for the same folder replaces an earlier one."""
    run_dir = Path(run_dir)
    digest = fingerprint(model_dir)
    line = json.dumps({"model": Path(model_dir).relative_to(run_dir).as_posix(), "sha256": digest}) + "\n"
    with open(run_dir / MODEL_FINGERPRINTS, "a", encoding="utf-8") as file:
        file.write(line)
    return digest


def recorded_models(run_dir: str | Path) -> dict[str, str] | None:
    """{model folder relative to `run_dir`: sha256} of the models the run recorded; None when it recorded none (a run
    made before runs recorded them)."""
    path = Path(run_dir) / MODEL_FINGERPRINTS
    if not path.is_file():
        return None
    records = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            records[entry["model"]] = entry["sha256"]
        except (ValueError, KeyError, TypeError):
            raise InputError(f"{path}, line {number}: not a {{'model': ..., 'sha256': ...}} record") from None
    return records
