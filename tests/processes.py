"""Whether a process still runs, and waiting for processes to end: for tests that check nothing outlives a run."""

from __future__ import annotations

from pathlib import Path

import anyio


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (killed but not yet reaped: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_until_dead(*pids: int, timeout: float = 10.0) -> None:
    """Wait until none of ``pids`` runs; fail after ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        while any(running(pid) for pid in pids):
            await anyio.sleep(0.01)
