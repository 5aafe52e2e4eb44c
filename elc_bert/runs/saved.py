"""What a run saved and whether it is whole: the checkpoints to resume from (a damaged one passed over), final
files replaced whole, and a full disk named.
"""

import contextlib
import errno
import json
import logging
import os
import pickle
import re
import shutil
import zipfile
from pathlib import Path

from ..models.errors import InputError
from ..models.loading import complete_safetensors
from .layout import CHECKPOINT_PREFIX, SAVING, TRAINER_STATE

logger = logging.getLogger(__name__)


def checkpoints(folder: str | Path) -> list[Path]:
    """The Trainer's checkpoint folders in `folder`, by step."""
    pattern = re.compile(re.escape(CHECKPOINT_PREFIX) + r"(\d+)")
    found = [p for p in Path(folder).glob(CHECKPOINT_PREFIX + "*") if p.is_dir() and pattern.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(pattern.fullmatch(p.name).group(1)))


def last_checkpoint(folder: str | Path) -> str | None:
    """The newest complete checkpoint in `folder` to resume from, or None (start from the beginning). A damaged one
    (a process killed while writing it, a full disk) is passed over with a warning naming it; it is never deleted.
    One whose random states the Trainer would refuse to load is refused (`check_rng_states`).
    (Not `transformers.trainer_utils.get_last_checkpoint`, which returns the newest folder, whole or not.)"""
    for checkpoint in reversed(checkpoints(folder)):
        damage = checkpoint_damage(checkpoint)
        if damage is None:
            check_rng_states(checkpoint)
            return str(checkpoint)
        logger.warning(
            "%s is damaged (%s): passed over for an earlier checkpoint (it is left as it is)", checkpoint, damage
        )
    return None


@contextlib.contextmanager
def replacing_files(folder: str | Path, writes: bool = True):
    """Yields a temporary folder (`folder/.saving`) to save files into; when the `with` block ends without an
    error, each file saved there replaces its namesake in `folder` by a rename (atomic: a reader or a process killed
    at any moment sees the old file or the new one whole, never one cut short), config.json last. A process that
    `writes` nothing (not the main one of a distributed run) gets the path and moves nothing."""
    folder = Path(folder)
    scratch = folder / SAVING
    if not writes:
        yield scratch
        return
    if scratch.exists():  # left by a process killed while saving: never read, nothing to keep
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    try:
        yield scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)  # e.g. a full disk: the space comes back, the old files stay
        raise
    for path in sorted(scratch.iterdir(), key=lambda path: path.name == "config.json"):
        os.replace(path, folder / path.name)
    scratch.rmdir()


def checkpoint_damage(checkpoint: Path) -> str | None:
    """What is wrong with a checkpoint folder, or None when it is complete. The Trainer writes trainer_state.json
    last, so a checkpoint without it is half-written; a weights or state file cut short is caught by its format
    (safetensors: the header's data size; torch.save: a zip archive's end record)."""
    try:
        json.loads((checkpoint / TRAINER_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"no readable {TRAINER_STATE}"
    for path in sorted(checkpoint.iterdir()):
        if path.suffix == ".safetensors" and not complete_safetensors(path):
            return f"{path.name} is cut short"
        if path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
            return f"{path.name} is cut short"
    return None


def check_rng_states(checkpoint: Path) -> None:
    """Refuses, naming the file, a checkpoint's random states (rng_state*.pth) that hold pickled objects besides
    tensors and the NumPy arrays the Trainer allows: the Trainer loads them as it resumes, with
    `torch.load(weights_only=True)`, whose refusal names no file. They are a few kilobytes: loading them twice is
    free."""
    import torch
    from transformers.trainer_pt_utils import safe_globals  # what the Trainer allows beyond tensors

    for path in sorted(Path(checkpoint).glob("rng_state*.pth")):
        try:
            with safe_globals():
                torch.load(path, weights_only=True)
        except pickle.UnpicklingError as error:
            found = re.search(r"WeightsUnpickler error: (.*?)(?: was not an allowed global|\n|$)", str(error))
            raise InputError(
                f"{path}: holds pickled objects that PyTorch does not load for safety "
                f"({found.group(1) if found else str(error)[:200]}), so the run "
                f"cannot resume from {Path(checkpoint).name}. Delete that file to resume without it (dropout then "
                "draws other numbers than the uninterrupted run would), or move the checkpoint aside to resume from "
                "an earlier one"
            ) from None


# How a full disk shows: an OSError, the words of safetensors' Rust I/O error, or torch.save's zip writer failing
# ("[enforce fail at inline_container.cc...] unexpected pos ...", naming no cause) on a disk with next to no space left.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)

DISK_FULL_WORDS = ("No space left on device", "os error 28", "Disk quota exceeded")

ZIP_WRITER_FAILED = "inline_container.cc"

NEXT_TO_NO_SPACE = 16 << 20  # bytes


@contextlib.contextmanager
def naming_full_disk(run_dir: str | Path):
    """Turns a full disk while the `with` block writes into `run_dir` into an OSError (ENOSPC) that names the run
    folder, the folder being written (that of the newest file, e.g. a checkpoint) and what to do; the libraries' own
    errors name no file. What was cut short is passed over on resume (`last_checkpoint`, `replacing_files`)."""
    try:
        yield
    except Exception as error:
        full = isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS
        full = full or any(words in str(error) for words in DISK_FULL_WORDS)
        if ZIP_WRITER_FAILED in str(error) and Path(run_dir).is_dir():
            full = full or shutil.disk_usage(run_dir).free < NEXT_TO_NO_SPACE
        if not full:
            raise
        written = [path for path in Path(run_dir).rglob("*") if path.is_file() and not path.name.startswith(".")]
        newest = max(written, key=lambda path: path.stat().st_mtime, default=Path(run_dir) / "-")
        raise OSError(
            errno.ENOSPC,
            f"no space left on the disk of {run_dir} while writing into {newest.parent} ({str(error).strip()}). Free "
            "some space and run the same command again: it resumes from the last whole checkpoint",
        ) from error
