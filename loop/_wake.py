"""``Wake``: a one-shot wake-up call for one waiting task, the cheapest that each event loop offers.

Sessions and subscriptions park a task once per message, so what a parked task holds matters when thousands
of conversations run at once: each live object is one more for the garbage collector to scan. On asyncio an
``anyio.Event`` is an Event wrapping an ``asyncio.Event`` wrapping a future, with two coroutines on top; a
``Wake`` is the future alone. On any other loop it is an ``anyio.Event``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import anyio


class Wake:
    """``await wake`` parks the one task waiting until ``wake.set()`` (at once if it was set before).

    Made inside a running event loop. One waiter only (on asyncio, cancelling the waiter cancels the
    future it waits on). ``is_set`` tells whether ``set`` was called, even after the waiter was cancelled:
    a hand-over that raced a cancellation is not lost.
    """

    __slots__ = ("_waiter", "_set")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | anyio.Event
        try:
            self._waiter = asyncio.get_running_loop().create_future()
        except RuntimeError:  # not asyncio
            self._waiter = anyio.Event()

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if isinstance(waiter, anyio.Event):
            waiter.set()
        elif not waiter.done():
            waiter.set_result(None)

    def is_set(self) -> bool:
        return self._set

    def __await__(self) -> Generator[Any, None, None]:
        waiter = self._waiter
        if isinstance(waiter, anyio.Event):
            return waiter.wait().__await__()
        return waiter.__await__()
