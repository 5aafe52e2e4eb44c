"""What a run saved and whether it is whole: the checkpoints to resume from (a damaged one passed over), files and
folders written whole or not at all (the one owner of the write-then-rename), and a full disk named.
"""

import contextlib
import errno
import logging
import os
import pickle
import re
import shutil
import uuid
import zipfile
from pathlib import Path

from ..data.jsonl import read_json
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


def _scratch_name(path: Path) -> str:
    """A hidden name beside `path` that no other write (process or thread) uses; made with the usual modes (umask),
    unlike `tempfile`'s private ones."""
    return f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"


def replace_file(path: str | Path, text: str) -> None:
    """Writes `text` to `path` (its folder made if need be) whole or not at all: into a scratch file of its own
    beside it, then renamed onto `path`, so that a reader, a process killed at any moment or another writer of the
    same file sees the old file or a new one, never one cut short or mixed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(_scratch_name(path))
    try:
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def replacing_folder(folder: str | Path, scratch: str | Path | None = None):
    """Yields a scratch folder to write `folder` into; when the `with` block ends without an error, it takes the
    place of `folder` (a folder or file there is removed) by a rename, so that `folder` never holds a write cut
    short. The scratch folder is a new one of its own beside `folder` (two writers at once each write whole), or
    `scratch` where the caller holds the folder alone (a run's lock): one left there by a killed write is removed
    before writing. One whose write raised is removed at once; an interruption (Ctrl-C) leaves it, as a kill does:
    stopping is not held up by deleting a large folder."""
    folder = Path(folder)
    scratch = folder.with_name(_scratch_name(folder)) if scratch is None else Path(scratch)
    if scratch.exists():  # the caller's, left by a killed write (a name of our own is new)
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    try:
        yield scratch
    except Exception:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder)
    elif folder.exists() or folder.is_symlink():
        folder.unlink()
    scratch.rename(folder)


def checkpoint_damage(checkpoint: Path) -> str | None:
    """What is wrong with a checkpoint folder, or None when it is complete. The Trainer writes trainer_state.json
    last, so a checkpoint without it is half-written; a weights or state file cut short is caught by its format
    (safetensors: the header's data size; torch.save: a zip archive's end record)."""
    try:
        read_json(checkpoint / TRAINER_STATE, "a Trainer state")
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
