"""Offline providers: ``Scripted`` replays a list of replies, ``Function`` asks a Python function.

Both stream their replies as deltas (text in chunks, tool-call arguments in fragments) so that the streaming
paths of everything above them run exactly as they do against a real model.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Union

import anyio.lowlevel
import attrs

from loop import (Delta, DeltaStream, Finish, ProviderInfo, Reasoning, Request, Text, TextDelta, ToolCall,
                  ToolCallDelta, Usage, UsageError)
from loop.checks import positive_int
from loop.errors import ScriptExhausted
from provider._replies import Reply, ReplyPart, check_reply, chunks, interleave, reply_deltas

_STOP = Finish("stop")  # deltas are immutable, so every plain-text reply can end with the same one
_TOOL_CALLS = Finish("tool_calls")
_PLAIN = frozenset({str, Text, Reasoning, ToolCall, Usage})  # replies taken as they are (exact types)
ReplyFunction = Callable[[Request], Union[Reply, Awaitable[Reply], AsyncIterator[Delta]]]


async def _play(deltas: list[Delta]) -> AsyncGenerator[Delta, None]:
    for delta in deltas:
        # A real stream yields to the event loop between chunks; so does this one, once per reply, which is
        # enough for cancellation to reach a consumer mid-stream without slowing it down.
        yield delta
    await anyio.lowlevel.checkpoint()


async def _raise(error: BaseException) -> AsyncGenerator[Delta, None]:
    raise error
    yield  # pragma: no cover - makes this an async generator


class _Script:
    """One script of a ``Scripted`` provider: its replies and how many were handed out."""

    __slots__ = ("key", "replies", "next")

    def __init__(self, key: str, replies: tuple[tuple[ReplyPart, ...] | BaseException, ...]) -> None:
        self.key = key
        self.replies = replies
        self.next = 0


def _replies(replies: Any, where: str) -> tuple[tuple[ReplyPart, ...] | BaseException, ...]:
    if isinstance(replies, (str, bytes, Mapping)) or not isinstance(replies, Iterable):
        raise UsageError(f"{where}Scripted takes a list of replies; wrap a single reply in a list: Scripted([...])")
    return tuple(check_reply(r, f"{where}reply {i}") for i, r in enumerate(replies))


class Scripted:
    """Replies with ``replies`` in order, one per request; the stand-in for a model in tests and demos.

    Each reply is a string, a part (``Text``, ``Reasoning``, ``ToolCall``, ``Usage``), a sequence of those, or
    an exception instance to raise in place of a response. Tool calls without an id get one. Every request is
    kept in ``requests`` for assertions. Asking for more replies than there are raises ``ScriptExhausted``.

    ``replies`` may instead be a mapping from run paths to lists of replies, to answer each branch of a run
    from its own script whatever order the branches run in: a request takes the next reply of the script
    whose key is the longest prefix of ``request.path`` (``""`` is the default script, a prefix of every
    path). Keys are plain string prefixes, so ``"Vote/sample 1"`` also matches ``"Vote/sample 10/ReAct"``;
    end a key with ``/`` to stop it at a path segment. A request no key matches raises a ``UsageError``
    naming its path and the keys. ``used`` and ``remaining`` add up over the scripts.

    When a request asks for several choices (``Options.n`` above 1; ``info.choices``), the matching
    script hands out ``n`` replies in order, one per choice; every delta carries its choice's index, the
    choices' deltas interleave as a real stream's do, and one ``Finish`` per choice ends the stream, in choice
    order. If one of those replies is an exception, it is raised in place of the whole response.
    """

    # It returns several choices for one request (Options.n), and the replies may read Options.output_schema.
    info = ProviderInfo(choices=True, json_schema=True)

    def __init__(self, replies: Iterable[Reply] | Mapping[str, Iterable[Reply]], *, chunk_size: int = 16) -> None:
        if isinstance(replies, Mapping):
            scripts = []
            for key, script in replies.items():
                if not isinstance(key, str):
                    raise UsageError(f"Scripted takes scripts keyed by run path (a string), got the key {key!r}")
                scripts.append(_Script(key, _replies(script, f"script {key!r}: ")))
            # Longest key first: the first that prefixes a path is the one to answer it.
            self._scripts = tuple(sorted(scripts, key=lambda s: len(s.key), reverse=True))
            self._keyed = True
        else:
            self._scripts = (_Script("", _replies(replies, "")),)
            self._keyed = False
        self._chunk = positive_int("chunk_size", chunk_size)
        self._ids = itertools.count()
        self.requests: list[Request] = []

    @property
    def used(self) -> int:
        """How many replies have been handed out."""
        return sum(s.next for s in self._scripts)

    @property
    def remaining(self) -> int:
        return sum(len(s.replies) - s.next for s in self._scripts)

    def stream(self, request: Request) -> DeltaStream:
        self.requests.append(request)
        script = self._script(request.path)
        if script is None:
            keys = ", ".join(repr(s.key) for s in sorted(self._scripts, key=lambda s: s.key)) or "none"
            return _raise(UsageError(f"Scripted provider has no script for the run path {request.path!r}: no key "
                                     f"is a prefix of it (keys: {keys}); add one, or a default script under ''"))
        n = request.options.n or 1
        index = script.next
        if index + n > len(script.replies):
            return _raise(self._exhausted(script, n, request.path))
        script.next = index + n
        if n == 1:
            reply = script.replies[index]
            if isinstance(reply, BaseException):
                return _raise(reply)
            return _play(reply_deltas(reply, self._ids, self._chunk))
        choices: list[tuple[ReplyPart, ...]] = []
        for reply in script.replies[index:index + n]:
            if isinstance(reply, BaseException):
                return _raise(reply)
            choices.append(reply)
        return _play(interleave([reply_deltas(r, self._ids, self._chunk, i) for i, r in enumerate(choices)]))

    def _exhausted(self, script: _Script, n: int, path: str) -> ScriptExhausted:
        total = len(script.replies)
        named = f"the script {script.key!r} of a Scripted provider" if self._keyed else "Scripted provider"
        spent = f"all {total} were used" if script.next == total else f"{script.next} of {total} were used"
        asked = f"{n} (one per choice)" if n > 1 else "another"
        where = f" (run path {path!r})" if self._keyed else ""
        return ScriptExhausted(f"{named} ran out of replies: {spent} and request {len(self.requests)}{where} "
                               f"asked for {asked}; add replies to the script", used=script.next)

    def _script(self, path: str) -> _Script | None:
        for script in self._scripts:
            if path.startswith(script.key):
                return script
        return None

    def __repr__(self) -> str:
        return f"Scripted(used={self.used}, remaining={self.remaining})"


class Function:
    """A provider that calls ``fn(request)`` for each response.

    ``fn`` may be sync or async and return a reply (as for ``Scripted``), or be an async generator that yields
    ``Delta`` values itself for full control of the stream. A function that returns an async iterator of
    deltas (such as another provider's ``stream(request)``) is streamed from the same way. ``request.path``
    says which pattern of a run asked (e.g. ``SelfConsistency/sample 3/ReAct``), so ``fn`` can answer each
    branch by it.

    When a request asks for several choices (``Options.n`` above 1; ``info.choices``), ``fn`` is called
    ``n`` times with the same request, once per choice, one after another. Every delta carries its choice's
    index (deltas ``fn`` streams itself are re-tagged), the choices' deltas interleave as a real stream's do,
    and the ``Finish`` deltas come last, in choice order: one per choice when ``fn`` returns replies.
    """

    # It returns several choices for one request (Options.n), and the replies may read Options.output_schema.
    info = ProviderInfo(choices=True, json_schema=True)

    def __init__(self, fn: ReplyFunction, *, chunk_size: int = 16) -> None:
        if not callable(fn):
            raise UsageError(f"Function needs a callable taking a Request, got {fn!r}")
        self._fn = fn
        # An async generator function streams its own deltas: its call is the stream.
        self._gen: Callable[[Request], DeltaStream] | None = fn if inspect.isasyncgenfunction(fn) else None
        self._chunk = positive_int("chunk_size", chunk_size)
        self._ids = itertools.count()

    def stream(self, request: Request) -> DeltaStream:
        n = request.options.n
        if n is not None and n > 1:
            return self._choices(request, n)
        if self._gen is not None:
            return self._gen(request)
        return self._respond(request)

    async def _respond(self, request: Request) -> AsyncGenerator[Delta, None]:
        reply: Any = self._fn(request)
        kind = type(reply)
        waited = False
        if kind not in _PLAIN:  # a string or a part is neither awaitable nor an async iterator
            waited = inspect.isawaitable(reply)
            if waited:
                reply = await reply
                kind = type(reply)
            if isinstance(reply, AsyncIterator):
                try:
                    async for delta in reply:
                        yield delta
                finally:
                    await _close(reply)
                return
        if kind is str:
            # The usual reply, streamed as ``reply_deltas`` would stream its Text part, without building it.
            for piece in chunks(reply, self._chunk):
                yield TextDelta(piece)
            yield _STOP
        elif kind is ToolCall:
            # The other usual reply, one call, streamed as ``reply_deltas`` streams it: a header with the first
            # half of the arguments, the rest, then the finish.
            arguments = reply.arguments
            half = len(arguments) // 2
            yield ToolCallDelta(0, reply.id or f"call_{next(self._ids)}", reply.name, arguments[:half])
            if arguments[half:]:
                yield ToolCallDelta(0, None, None, arguments[half:])
            yield _TOOL_CALLS
        else:
            # One part is the reply ``check_reply`` would make of it; anything else is checked there.
            parts = (reply,) if kind in _PLAIN else self._parts(reply)
            for delta in reply_deltas(parts, self._ids, self._chunk):
                yield delta
        if not waited:
            # A sync function never gave the event loop a turn; yield once so a consumer can be cancelled. On
            # asyncio that is anyio's checkpoint exactly (``sleep(0)``), without asking anyio which loop runs.
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                await anyio.lowlevel.checkpoint()
            else:
                await asyncio.sleep(0)

    async def _choices(self, request: Request, n: int) -> AsyncGenerator[Delta, None]:
        streams: list[list[Delta]] = []
        for choice in range(n):
            reply: Any = self._fn(request)
            if inspect.isawaitable(reply):
                reply = await reply
            if isinstance(reply, AsyncIterator):
                try:
                    streams.append([attrs.evolve(delta, choice=choice) async for delta in reply])
                finally:
                    await _close(reply)
            else:
                streams.append(reply_deltas(self._parts(reply), self._ids, self._chunk, choice))
        for delta in interleave(streams):
            yield delta
        await anyio.lowlevel.checkpoint()

    def _parts(self, reply: Any) -> tuple[ReplyPart, ...]:
        parts = check_reply(reply, f"reply of {getattr(self._fn, '__name__', 'function')}")
        if isinstance(parts, BaseException):
            raise parts
        return parts

    def __repr__(self) -> str:
        return f"Function({getattr(self._fn, '__name__', self._fn)!r})"


async def _close(stream: Any) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
