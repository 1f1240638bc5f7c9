"""The worker supervisor's rules (``casestream.service.workers``) on forked processes that do
no service work, and the fork guard (``casestream.forks``): a crash loop makes the supervisor
give up with status 1, a start-up failure (status 2) stops it at once with 2, a client made
before a fork refuses the forked process with a message naming both pids."""

from __future__ import annotations

import os
import time
from pathlib import Path


from casestream.forks import ForkedClientError, ProcessBound
from casestream.service.workers import Supervisor, exit_status


def _counting(path: Path, status: int):  # noqa: ANN202 - a worker target
    def target(index: int) -> int:
        with path.open("a") as f:
            f.write(f"{index}\n")
        return status

    return target


def test_a_crash_loop_gives_up_with_status_1(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    sup = Supervisor("probe", _counting(starts, 1), 2, stop_budget_s=5, backoff_s=0.01,
                     backoff_max_s=0.05, max_failures=3, poll_s=0.01)
    began = time.monotonic()
    assert sup.run() == 1
    assert time.monotonic() - began < 10
    lines = starts.read_text().split()
    # the first slot to reach its fourth failure in a row stops every worker
    assert max(lines.count("0"), lines.count("1")) == 4, lines
    assert sup.pids() == {}


def test_a_start_up_failure_stops_at_once_with_status_2(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    sup = Supervisor("probe", _counting(starts, 2), 1, stop_budget_s=5, backoff_s=0.01,
                     max_failures=5, poll_s=0.01)
    assert sup.run() == 2
    assert starts.read_text().split() == ["0"]  # not restarted


def test_a_worker_that_raises_system_exit_reports_its_code() -> None:
    assert [exit_status(c) for c in (None, 0, 3, "boom")] == [0, 0, 3, 1]


def test_a_client_carried_across_a_fork_is_refused_with_both_pids() -> None:
    bound = ProcessBound("connection pool probe")
    bound.check()  # the making process may use it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            bound.check()
            os.write(write, b"no error")
        except ForkedClientError as e:
            os.write(write, str(e).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        message = f.read()
    assert message.startswith(f"connection pool probe was created in process {os.getpid()} and is "
                              f"used in process {pid}"), message
    assert "create it after the fork" in message


SLEEPING_SUPERVISOR = """
import os, sys, time
from casestream.service.workers import Supervisor

def target(index):
    os.write(1, f"worker {index}\\n".encode())  # one write: the two workers' lines never interleave
    time.sleep(120)
    return 0

sys.exit(Supervisor("probe", target, 2, stop_budget_s=5).run())
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # dead, not yet reaped by its new parent


def test_a_killed_supervisor_leaves_no_worker_behind() -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", SLEEPING_SUPERVISOR], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for _ in range(2):
            assert proc.stdout.readline().startswith("worker")
        children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        assert len(children) == 2
        proc.kill()  # SIGKILL: no handler runs, the kernel signals the workers (PR_SET_PDEATHSIG)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while not all(_gone(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(c) for c in children), children
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
