"""A full disk under acknowledged messages, on a real file system that fills: a 4 MiB tmpfs mounted for the test.

Twenty-four messages are posted to a running session (each acknowledged once in the SQLite store's inbox) while
its first one runs; the disk then fills to the last byte. Every run that meets the full disk waits (``StorePaused``), the
queue behind it in order; once space is freed, all twenty-four run, in order, and none is reported failed.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cognitive import SingleShot, new_turn_processor
from loop import Role
from provider import Function
from session import Manager, MessageFailed, MessageFinished, SQLiteStore, StorePaused
from tests.sandbox.docker_env import in_ci

pytestmark = [pytest.mark.slow, pytest.mark.anyio]
COUNT = 24


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def small_disk() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="small-disk-") as folder:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", folder],
                                 capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            message = f"cannot mount a small tmpfs (needs root): {mounted.stderr.strip()}"
            if in_ci():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        try:
            yield Path(folder)
        finally:
            subprocess.run(["umount", "-l", folder], check=False)


def fill(folder: Path) -> Path:
    """Write a file until the file system has no byte left; the file, to delete when space is wanted back."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                continue
    finally:
        os.close(fd)
    return filler


async def test_acknowledged_messages_wait_out_a_full_disk_in_order_and_none_fails(
        small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("session._mainline.FIRST_PAUSE", 0.05)
    monkeypatch.setattr("session._mainline.MAX_PAUSE", 0.2)
    path = small_disk / "chats.db"
    go = anyio.Event()
    reply = "an answer that needs room on the disk"

    async def model(request: object) -> str:
        await go.wait()  # the first message runs until the disk is full; the others queue behind it
        return reply

    seen: list[object] = []
    filler: Path | None = None
    running = SQLiteStore(path)
    manager = Manager(new_turn_processor(SingleShot), provider=Function(model), store=running, queue_size=COUNT)
    async with running, manager:
        session = await manager.open("s")
        with session.events.subscribe(buffer=None) as events:
            for n in range(1, COUNT + 1):
                await session.post(f"m{n}")  # acknowledged: stored in the inbox
            filler = fill(small_disk)
            go.set()
            with anyio.fail_after(60):
                async for event in events:
                    seen.append(event)
                    if isinstance(event, StorePaused) and filler.exists():
                        filler.unlink()  # the operator frees space
                    if sum(isinstance(e, MessageFinished) for e in seen) == COUNT:
                        break
        stored = session.state
    assert [e for e in seen if isinstance(e, StorePaused)], "the disk never filled: the test proves nothing"
    assert not [e for e in seen if isinstance(e, MessageFailed)], "an acknowledged message was said to fail"
    users = [t.text for t in stored if t.role is Role.USER]
    assert users == [f"m{n}" for n in range(1, COUNT + 1)], "each message once, in order"
    assert [t.text for t in stored if t.role is Role.ASSISTANT] == [reply] * COUNT
    async with SQLiteStore(path) as store:
        assert await store.inbox("s") == ()
        reread = await store.load("s")
    assert reread is not None and [t.text for t in reread] == [t.text for t in stored]
