"""Offline providers: ``Scripted`` replays a list of replies, ``Function`` asks a Python function.

Both stream their replies as deltas (text in chunks, tool-call arguments in fragments) so that the streaming
paths of everything above them run exactly as they do against a real model.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Union

import anyio.lowlevel

from loop import Delta, Finish, Request, TextDelta, UsageError
from loop.errors import ScriptExhausted
from provider._replies import Reply, check_reply, chunks, reply_deltas

_STOP = Finish("stop")  # deltas are immutable, so every plain-text reply can end with the same one
ReplyFunction = Callable[[Request], Union[Reply, Awaitable[Reply], AsyncIterator[Delta]]]


async def _play(deltas: list[Delta]) -> AsyncIterator[Delta]:
    for delta in deltas:
        # A real stream yields to the event loop between chunks; so does this one, once per reply, which is
        # enough for cancellation to reach a consumer mid-stream without slowing it down.
        yield delta
    await anyio.lowlevel.checkpoint()


async def _raise(error: BaseException) -> AsyncIterator[Delta]:
    raise error
    yield  # pragma: no cover - makes this an async generator


def _check_chunk_size(chunk_size: object) -> None:
    if not (isinstance(chunk_size, int) and not isinstance(chunk_size, bool) and chunk_size > 0):
        raise UsageError(f"chunk_size must be a positive integer, got {chunk_size!r}")


class Scripted:
    """Replies with ``replies`` in order, one per request; the stand-in for a model in tests and demos.

    Each reply is a string, a part (``Text``, ``Reasoning``, ``ToolCall``, ``Usage``), a sequence of those, or
    an exception instance to raise in place of a response. Tool calls without an id get one. Every request is
    kept in ``requests`` for assertions. Asking for more replies than there are raises ``ScriptExhausted``.
    """

    def __init__(self, replies: Iterable[Reply], *, chunk_size: int = 16) -> None:
        if isinstance(replies, (str, bytes)) or not isinstance(replies, Iterable):
            raise UsageError("Scripted takes a list of replies; wrap a single reply in a list: Scripted([...])")
        self._replies = tuple(check_reply(r, f"reply {i}") for i, r in enumerate(replies))
        _check_chunk_size(chunk_size)
        self._chunk = chunk_size
        self._ids = itertools.count()
        self._next = 0
        self.requests: list[Request] = []

    @property
    def used(self) -> int:
        """How many replies have been handed out."""
        return self._next

    @property
    def remaining(self) -> int:
        return len(self._replies) - self._next

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        index = self._next
        self.requests.append(request)
        if index >= len(self._replies):
            return _raise(ScriptExhausted(
                f"Scripted provider ran out of replies: all {len(self._replies)} were used and request "
                f"{index + 1} asked for another; add replies to the script", used=len(self._replies)))
        self._next = index + 1
        reply = self._replies[index]
        if isinstance(reply, BaseException):
            return _raise(reply)
        return _play(reply_deltas(reply, self._ids, self._chunk))

    def __repr__(self) -> str:
        return f"Scripted(used={self._next}, remaining={self.remaining})"


class Function:
    """A provider that calls ``fn(request)`` for each response.

    ``fn`` may be sync or async and return a reply (as for ``Scripted``), or be an async generator that yields
    ``Delta`` values itself for full control of the stream. A function that returns an async iterator of
    deltas (such as another provider's ``stream(request)``) is streamed from the same way.
    """

    def __init__(self, fn: ReplyFunction, *, chunk_size: int = 16) -> None:
        if not callable(fn):
            raise UsageError(f"Function needs a callable taking a Request, got {fn!r}")
        _check_chunk_size(chunk_size)
        self._fn = fn
        self._gen = inspect.isasyncgenfunction(fn)
        self._chunk = chunk_size
        self._ids = itertools.count()

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        if self._gen:
            return self._fn(request)  # type: ignore[return-value]
        return self._respond(request)

    async def _respond(self, request: Request) -> AsyncIterator[Delta]:
        reply: Any = self._fn(request)
        waited = inspect.isawaitable(reply)
        if waited:
            reply = await reply
        if isinstance(reply, AsyncIterator):
            try:
                async for delta in reply:
                    yield delta
            finally:
                aclose = getattr(reply, "aclose", None)
                if aclose is not None:
                    await aclose()
            return
        if type(reply) is str:
            # The usual reply, streamed as ``reply_deltas`` would stream its Text part, without building it.
            for piece in chunks(reply, self._chunk):
                yield TextDelta(piece)
            yield _STOP
        else:
            parts = check_reply(reply, f"reply of {getattr(self._fn, '__name__', 'function')}")
            if isinstance(parts, BaseException):
                raise parts
            for delta in reply_deltas(parts, self._ids, self._chunk):
                yield delta
        if not waited:
            # A sync function never gave the event loop a turn; yield once so a consumer can be cancelled.
            await anyio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return f"Function({getattr(self._fn, '__name__', self._fn)!r})"
