"""The run folder (elc_bert/runs/): a trial's claim (`runs.claim`, in runs/writers.py) is taken over when the
process that made it died, even though its pid now belongs to another live process, and is respected while that
process itself holds it.
"""

import socket
import subprocess
from pathlib import Path

import pytest


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="process start times are read from /proc (Linux)")
def test_a_claim_whose_pid_now_belongs_to_another_process_is_taken_over(tmp_path):
    """A trial claimed by a process that died, its pid since given to another live process (here a `sleep`): the
    claim's start time is not that process's, so the trial is taken over instead of being skipped forever. The
    claim of the live process itself (its own start time) is respected."""
    import os

    from elc_bert import runs
    from elc_bert.runs import claim

    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        trial = tmp_path / "n8" / "trial0"
        trial.mkdir(parents=True)
        started = int(Path(f"/proc/{sleeper.pid}/stat").read_text().rpartition(")")[2].split()[19])  # clock ticks
        (trial / runs.CLAIM).write_text(f"{socket.gethostname()} {sleeper.pid} {started - 100}")
        assert claim(trial) is None
        assert (trial / runs.CLAIM).read_text().split(" ")[1] == str(os.getpid())
        (trial / runs.CLAIM).write_text(f"{socket.gethostname()} {sleeper.pid} {started}")
        assert claim(trial) == f"{socket.gethostname()} pid {sleeper.pid}"
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="process start times are read from /proc (Linux)")
def test_a_claim_without_a_start_time_is_taken_over_from_a_process_that_started_after_it(tmp_path):
    """A claim that records no start time (written by an earlier version) whose pid now belongs to a process that
    started after the claim was written: that process cannot be the claimer, so the trial is taken over. Written
    after that process started, the claim is respected. An empty claim (a kill while writing it) is taken over."""
    import os
    import time

    from elc_bert import runs
    from elc_bert.runs import claim

    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        trial = tmp_path / "n8" / "trial0"
        trial.mkdir(parents=True)
        (trial / runs.CLAIM).write_text(f"{socket.gethostname()} {sleeper.pid}")
        assert claim(trial) == f"{socket.gethostname()} pid {sleeper.pid}"
        os.utime(trial / runs.CLAIM, (time.time() - 3600, time.time() - 3600))
        assert claim(trial) is None
        assert (trial / runs.CLAIM).read_text().split(" ")[1] == str(os.getpid())
        (trial / runs.CLAIM).write_text("")
        assert claim(trial) is None
    finally:
        sleeper.kill()
        sleeper.wait()
