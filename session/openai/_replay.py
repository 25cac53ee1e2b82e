"""Idempotent requests: a request carrying ``X-Request-Id`` runs the agent once, however often it is retried.

The first request with a key runs; a retry with the same key (from the same owner) waits for that run, or takes
its stored answer, instead of running the agent again. A run is never forgotten while it goes on; its answer is
kept ``ttl`` seconds after it came, and at most ``size`` answers are kept per owner (the oldest go first), so one
token's requests never push another's answers out. A key sent
again with a different body (or for another ``X-Session-Id``) is a client bug, answered 400.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import anyio

from loop.checks import positive_int, positive_number
from session._serving import json_text
from session.openai._answer import Answer
from session.openai._errors import OpenAIError, answer_client_closed
from session.openai._wire import Wire

KEY_HEADER = "x-request-id"


class Entry:
    """One key's run: ``done`` once its ``result`` (an ``Answer`` or the ``OpenAIError`` answered) is in;
    ``attached`` once a retry waits for it."""

    def __init__(self, key: tuple[str, str], fingerprint: str) -> None:
        self.key = key  # (owner, X-Request-Id)
        self.fingerprint = fingerprint
        self.expires = float("inf")  # set when the answer comes: a running entry never expires
        self.done = anyio.Event()
        self.attached = anyio.Event()
        self.result: Answer | OpenAIError | None = None
        self.id = ""
        self.created = 0
        self.headers: dict[str, str] = {}

    def finish(self, result: Answer | OpenAIError, *, id: str, created: int, headers: dict[str, str],
               ttl: float) -> None:
        if not self.done.is_set():
            self.result, self.id, self.created, self.headers = result, id, created, headers
            self.expires = time.monotonic() + ttl
            self.done.set()


class Replays:
    """The entries by (owner, key): every run going on, and each owner's answers kept, in the order they came."""

    def __init__(self, *, ttl: float = 600.0, size: int = 1000) -> None:
        self.ttl = positive_number("idempotency_ttl", ttl, unit="seconds")
        self.size = positive_int("idempotency_size", size)
        self._entries: dict[tuple[str, str], Entry] = {}
        # Finished, per owner, oldest answer first: each owner's own bound.
        self._kept: dict[str, OrderedDict[tuple[str, str], Entry]] = {}

    def take(self, owner: str, key: str, request: bytes) -> tuple[Entry, bool]:
        """The entry for ``key``, and whether it is new (this request runs) rather than an earlier run's.
        ``request`` is what makes a retry the same request (its body and session). Raises ``OpenAIError`` (400)
        when the key was used for another request."""
        if not key or len(key) > 200 or not key.isprintable():
            raise OpenAIError(400, "The X-Request-Id header must be 1 to 200 printable characters.",
                              code="invalid_request_id")
        self._forget_old(owner)
        fingerprint = hashlib.sha256(request).hexdigest()
        found = self._entries.get((owner, key))
        if found is not None:
            if found.fingerprint != fingerprint:
                raise OpenAIError(400, f"The X-Request-Id {key!r} was already used for a different request; an "
                                       "idempotency key names one request and its retries.",
                                  code="request_id_reused")
            return found, False
        entry = self._entries[(owner, key)] = Entry((owner, key), fingerprint)
        return entry, True

    def finish(self, entry: Entry, result: Answer | OpenAIError, *, id: str, created: int,
               headers: dict[str, str]) -> None:
        """``entry``'s run is over: its answer is kept for retries, ``ttl`` seconds from now."""
        entry.finish(result, id=id, created=created, headers=headers, ttl=self.ttl)
        if self._entries.get(entry.key) is entry:
            self._kept.setdefault(entry.key[0], OrderedDict())[entry.key] = entry

    def _forget_old(self, owner: str) -> None:
        """Drop ``owner``'s answers past their time, and its oldest beyond ``size``; never a run still going on.
        Answers all live ``ttl``, so the oldest answer is the first to expire."""
        now = time.monotonic()
        kept = self._kept.get(owner)
        while kept:
            key, oldest = next(iter(kept.items()))
            if oldest.expires > now and len(kept) <= self.size:
                break
            del kept[key]
            del self._entries[key]
        if kept is not None and not kept:
            del self._kept[owner]

    def drop(self, entry: Entry) -> None:
        """Forget ``entry`` (its run was stopped, or never started): a later retry runs afresh, and a retry already
        waiting for it is told to try again (503, which the SDKs retry)."""
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
            kept = self._kept.get(entry.key[0])
            if kept is not None:
                kept.pop(entry.key, None)
        entry.finish(OpenAIError(503, "The first attempt of this request stopped before it finished; send it again "
                                      "to run it.", type="server_error", code="request_abandoned"),
                     id="", created=0, headers={}, ttl=0.0)


class Replay:
    """The ASGI answer to a retry: waits for the first run's result and sends it through a wire made with the first
    run's id (``wire(id, created)``): as one JSON body or, for a streaming request, as one burst of events."""

    def __init__(self, entry: Entry, *, stream: bool, wire: Callable[[str, int], Wire]) -> None:
        self.entry = entry
        self.stream = stream
        self.wire = wire
        entry.attached.set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async with anyio.create_task_group() as group:
            async def gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()  # this retry's client left too: the run goes on for the next

            group.start_soon(gone)
            await self.entry.done.wait()
            group.cancel_scope.cancel()
        if not self.entry.done.is_set():  # this retry's client left
            await answer_client_closed(scope, receive, send)
            return
        result = self.entry.result
        if isinstance(result, OpenAIError):
            await result.response()(scope, receive, send)
            return
        assert result is not None  # set with done
        wire = self.wire(self.entry.id, self.entry.created)
        headers = [(k.encode(), v.encode()) for k, v in self.entry.headers.items()]
        if not self.stream:
            body = json_text(wire.body(result), separators=(",", ":")).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"), *headers]})
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), *headers]})
        await send({"type": "http.response.body", "body": b"".join(wire.burst(result)), "more_body": False})
