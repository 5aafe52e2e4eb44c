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
