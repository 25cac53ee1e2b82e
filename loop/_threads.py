"""Sync tools on asyncio: a small pool of parked worker threads that a sync tool call is handed to directly.

anyio's ``to_thread.run_sync`` costs two extra trips round the event loop (a checkpoint and the capacity limiter),
a cancel scope and a worker queue per call; handing the call straight to a parked thread costs little more than
the two thread wake-ups themselves. On other event loops ``FunctionTool`` uses anyio's.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

_ASYNC_LIBRARY: contextvars.ContextVar[str | None] | None
try:  # optional for anyio; when present it names the async library of the running context
    from sniffio import current_async_library_cvar as _ASYNC_LIBRARY
except ImportError:  # pragma: no cover
    _ASYNC_LIBRARY = None


THREAD_LIMIT = 40  # sync tool calls running at once in the process, as many as anyio's default thread limiter
_IDLE_SECONDS = 10.0  # a worker thread with nothing to do for this long exits
_WAITING, _RUNNING, _ABANDONED, _DONE = range(4)


class _Call:
    """One sync tool call: the function, the context it runs in, and the future its caller awaits."""

    __slots__ = ("loop", "future", "context", "fn", "kwargs", "stage")

    def __init__(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        # The caller's context variables (the run scope among them) are visible in the tool, as with anyio's
        # worker threads, which also run the function outside any async library.
        self.context = contextvars.copy_context()
        if _ASYNC_LIBRARY is not None:
            self.context.run(_ASYNC_LIBRARY.set, None)
        self.fn = fn
        self.kwargs = kwargs
        self.stage = _WAITING

    def run(self) -> tuple[Any, BaseException | None]:
        """Call the function, unless its caller gave up first: its value, or the exception it raised."""
        if self.stage == _ABANDONED:
            return None, None
        try:
            return self.context.run(self.fn, **self.kwargs), None
        except BaseException as exc:
            return None, exc

    def report(self, value: Any, error: BaseException | None) -> None:
        """Hand the outcome to the caller's loop."""
        try:
            self.loop.call_soon_threadsafe(_settle, self.future, value, error)
        except RuntimeError:  # the loop is closed: nobody is waiting
            pass


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the caller was cancelled meanwhile
        return
    if error is None:
        future.set_result(value)
    elif isinstance(error, StopIteration):  # a future refuses it, as a coroutine would
        future.set_exception(RuntimeError(f"the tool raised StopIteration: {error}"))
    else:
        future.set_exception(error)


class _WorkerThreads:
    """The threads that run sync tools for every asyncio loop in the process.

    A call goes straight to the queue of one parked thread (the most recently used, so idle ones can age
    out). At most ``limit`` calls run at once; later ones wait in order. A call whose caller is cancelled
    while it runs is abandoned: it stops counting toward the limit at once, as with anyio's
    ``abandon_on_cancel``, and its thread finishes it unobserved. Threads are daemons, so an abandoned call
    never keeps the process from exiting.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._forget()

    def _forget(self) -> None:
        # Also after a fork: the child has none of the parent's threads.
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[_Call]] = []
        self._waiting: deque[_Call] = deque()
        self._running = 0  # calls running whose caller still waits for them

    async def run(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """``fn(**kwargs)`` in a worker thread; cancelling the caller abandons the call."""
        call = _Call(loop, fn, kwargs)
        with self._lock:
            self._waiting.append(call)
        self._dispatch()
        try:
            return await call.future
        except asyncio.CancelledError:
            self._abandon(call)
            raise

    def _claim(self) -> _Call | None:
        """With the lock held: the first waiting call, now counted as running, if the limit allows one more."""
        if not self._waiting or self._running >= self._limit:
            return None
        call = self._waiting.popleft()
        call.stage = _RUNNING
        self._running += 1
        return call

    def _dispatch(self) -> None:
        with self._lock:
            call = self._claim()
            if call is None:
                return
            inbox = self._idle.pop() if self._idle else None
        if inbox is not None:
            inbox.put(call)
            return
        try:
            threading.Thread(target=self._serve, args=(call,), name="loop tool worker", daemon=True).start()
        except RuntimeError as exc:  # can't start new thread: the call fails, the next may find one idle
            with self._lock:
                call.stage = _DONE
                self._running -= 1
            call.report(None, exc)

    def _abandon(self, call: _Call) -> None:
        with self._lock:
            if call.stage == _WAITING:
                self._waiting.remove(call)
                return
            if call.stage != _RUNNING:
                return
            call.stage = _ABANDONED
            self._running -= 1
        self._dispatch()

    def _serve(self, call: _Call | None) -> None:
        inbox: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        while call is not None:
            value, error = call.run()
            done = call
            # Account before reporting: once the caller's loop wakes, this thread should hold the GIL as
            # briefly as possible, and be ready for the next call.
            with self._lock:
                awaited = done.stage == _RUNNING  # else abandoned: its caller is gone
                if awaited:
                    done.stage = _DONE
                    self._running -= 1
                call = self._claim()
                if call is None:
                    self._idle.append(inbox)
            if awaited:
                done.report(value, error)
            del done, value, error  # an idle thread holds nothing of the last call
            if call is None:
                call = self._wait(inbox)

    def _wait(self, inbox: queue.SimpleQueue[_Call]) -> _Call | None:
        try:
            return inbox.get(timeout=_IDLE_SECONDS)
        except queue.Empty:
            with self._lock:
                if inbox in self._idle:
                    self._idle.remove(inbox)
                    return None
            return inbox.get()  # a call was handed over just as the wait ran out


_WORKERS = _WorkerThreads(THREAD_LIMIT)
if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_WORKERS._forget)
