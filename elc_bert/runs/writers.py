"""Who writes a run folder: the one writer's lock, the start of a run shared by processes, and trial claims."""

import contextlib
import os
import socket
from pathlib import Path

from ..models.errors import InputExistsError
from .layout import CLAIM, STARTING_LOCK, WRITER, WRITER_LOCK


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
        raise InputExistsError(
            f"{run_dir} is being written by {holder} ({job}): one process per run folder. Wait for it to end, or "
            "choose another output_dir"
        ) from None
    try:
        (run_dir / WRITER).write_text(f"{socket.gethostname()} pid {os.getpid()}\n")
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def starting_trials(run_dir: str | Path):
    """Holds `run_dir/.starting.lock` while the `with` block runs: processes that share out the trials of one run
    check its config and claim their first trial one at a time, so that a second process started beside the first
    sees the first's claim (`has_work`) and is held to its config."""
    import filelock

    Path(run_dir).mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(Path(run_dir) / STARTING_LOCK), timeout=-1):
        yield


def remove_starting_lock(run_dir: str | Path) -> None:
    """Removes `run_dir/.starting.lock` once this process's run of the folder has ended, so that a finished run leaves
    no lock file behind; only when this process can take the lock at once. A process starting on the folder now holds
    it, and keeps it (the file is its to leave). It is removed while held: a process that was waiting on it then
    finds the file gone and locks a new one (`filelock` checks that the file it locked still exists)."""
    import filelock

    path = Path(run_dir) / STARTING_LOCK
    if not path.exists():
        return
    lock = filelock.FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        return
    try:
        path.unlink(missing_ok=True)
    finally:
        lock.release()


def claim(run_dir: Path) -> str | None:
    """Takes a trial for this process by writing `run_dir/.claimed` (host, pid and the process's start time), so
    that several processes running the same jobs side by side share out the trials. Returns None when the trial is
    this process's to run, else the live process that holds it (`holder`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM
    me = f"{socket.gethostname()} {os.getpid()} {_start_time(os.getpid()) or '-'}"
    try:
        with open(path, "x") as file:
            file.write(me)
        return None
    except FileExistsError:
        held_by = holder(run_dir)
        if held_by is None:
            path.write_text(me)  # this process's own claim, or a stale one
        return held_by


def holder(run_dir: Path) -> str | None:
    """The live process that holds the trial of `run_dir` by its claim ("HOST pid PID"), or None: no claim, this
    process's own, or a stale one. A claim is stale when its process is gone (on this host), when its pid now belongs
    to another process (a start time other than the one recorded, or a process that started after the claim was
    written: claims of earlier versions record none), or when it is empty (a kill while writing it). A claim from
    another host is respected: delete the file if that run is dead."""
    path = run_dir / CLAIM
    try:
        text, written = path.read_text().strip(), path.stat().st_mtime
    except FileNotFoundError:
        return None
    if " " not in text:  # empty: a kill while writing it
        return None
    host, pid, *started = text.split(" ")
    started = started[0] if started and started[0] != "-" else None  # claims of earlier versions record none
    if host != socket.gethostname():
        return f"{host} pid {pid}"
    if not pid.isdigit() or int(pid) == os.getpid():  # garbled, or this process's pid: its own or a stale claim
        return None
    return f"{host} pid {pid}" if _alive(int(pid), started, written) else None


def _alive(pid: int, started: str | None, claimed_at: float) -> bool:
    """Whether process `pid` runs and is still the process that claimed (the system hands a dead process's pid to a
    new one sooner or later): its start time is `started`, where the claim records it; for a claim that records none,
    it started before `claimed_at` (the claim's modification time, seconds since the epoch)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, another user's
        pass
    now = _start_time(pid)
    if now is None:  # where start times cannot be read, the pid alone identifies a claim's process
        return True
    if started is not None:
        return now == started
    # A minute's leeway: the boot time is in whole seconds, and a file server's clock may differ from this host's.
    return _boot_time() + int(now) / os.sysconf("SC_CLK_TCK") <= claimed_at + 60


def _boot_time() -> float:
    """When the system booted (Linux: the btime line of /proc/stat), in seconds since the epoch."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def _start_time(pid: int) -> str | None:
    """When process `pid` started, in clock ticks since boot (Linux: /proc/PID/stat, unaffected by changes of the
    clock); None where that cannot be read, e.g. on other systems, where the pid alone identifies a claim's process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]  # field 22, starttime; field 2 (the command) may hold spaces
