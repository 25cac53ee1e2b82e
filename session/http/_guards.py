"""The ASGI middlewares in front of the HTTP conduit: request log, rate limit and body size, and the bearer
auth every conduit's server shares (``session._bearer``, with this API's errors by default).

Each is Starlette-shaped: ``Middleware(app, *, settings)`` with one ``__call__`` that either answers the
request itself (with a JSON error) or passes it to ``app``. Errors are ``{"error": {"type", "message"}}``, but
under ``/v1`` (the OpenAI-compatible API) they are OpenAI's ``{"error": {"message", "type", "param", "code"}}``,
so that OpenAI clients map them to their own exceptions.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from loop import tracing
from loop.checks import positive_int, positive_number
from session._bearer import BearerAuth as BearerAuth  # the conduit's guards include the shared bearer check
from session._bearer import under
from session._manager import SessionLimit
from session._problem import Problem as Problem  # raised by every route, answered by ERROR_HANDLERS
from session._session import SessionBusy, SessionClosed
from session.openai._errors import OpenAIError
from session.stores._protocol import StoreError

_log = tracing.logger("session.http")
_SESSION_PATH = re.compile(r"^/sessions/([^/]+)")
Scope = dict[str, Any]
ASGIApp = Callable[..., Any]


OPENAI_PREFIX = "/v1"
"""Where the OpenAI-compatible API is served: every error answered under it is in OpenAI's format."""

# OpenAI's (type, code) for the kinds of problem OpenAI has names of its own for. Any other kind is OpenAI's
# "invalid_request_error" (or "server_error", 5xx) with the kind as its code.
_OPENAI_NAMES = {
    "rate_limited": ("requests", "rate_limit_exceeded"),
    "session_busy": ("requests", "session_busy"),
    "payload_too_large": ("invalid_request_error", "request_too_large"),
    "not_found": ("invalid_request_error", "unknown_url"),
}


def _body(problem: Problem, path: str) -> bytes:
    """The JSON body answering a request for ``path`` with ``problem``: OpenAI's error format under ``/v1``, else
    this API's."""
    if under(path, OPENAI_PREFIX):
        error_type, code = _OPENAI_NAMES.get(
            problem.kind, ("server_error" if problem.status >= 500 else "invalid_request_error", problem.kind))
        return json.dumps(OpenAIError(problem.status, problem.message, type=error_type, code=code).body()).encode()
    return json.dumps(problem.error()).encode() + b"\n"


async def send_problem(send: Callable[..., Any], problem: Problem, scope: Scope) -> None:
    """Answer the request ``scope`` describes with ``problem`` as a JSON error response."""
    headers = [(b"content-type", b"application/json")]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in problem.headers.items()]
    await send({"type": "http.response.start", "status": problem.status, "headers": headers})
    await send({"type": "http.response.body", "body": _body(problem, scope["path"])})


def _answer(request: Request, problem: Problem) -> Response:
    return Response(_body(problem, request.scope["path"]), problem.status, problem.headers,
                    media_type="application/json")


async def _on_problem(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, Problem):  # pragma: no cover - Starlette routes only Problems here
        raise exc
    return _answer(request, exc)


async def _on_http(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 500)
    kind = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    method, path = request.method, request.scope["path"]
    if under(path, OPENAI_PREFIX):  # as OpenAI words it
        message = {404: f"Unknown request URL: {method} {path}.", 405: f"Method not allowed: {method} {path}."}
    else:
        message = {404: f"no route {path}", 405: f"{method} is not allowed on {path}"}
    return _answer(request, Problem(status, kind, message.get(status, str(getattr(exc, "detail", exc))),
                                    getattr(exc, "headers", None)))


async def _on_store(request: Request, exc: Exception) -> Response:
    _log.error("store failure", path=request.url.path, error=repr(exc))
    return _answer(request, Problem(500, "store_error", f"the session store failed, nothing was written: {exc}"))


def _on(status: int, kind: str, headers: Mapping[str, str] | None = None) -> Callable[..., Any]:
    async def handle(request: Request, exc: Exception) -> Response:
        return _answer(request, Problem(status, kind, str(exc), headers))

    return handle


async def _on_crash(request: Request, exc: Exception) -> Response:
    return _answer(request, Problem(500, "internal_error", f"the server failed ({type(exc).__name__}); see its log"))


# Starlette exception handlers: every error a route can raise, answered as a JSON ``Problem``.
ERROR_HANDLERS: dict[Any, Callable[..., Any]] = {
    Problem: _on_problem,
    HTTPException: _on_http,
    StoreError: _on_store,
    SessionBusy: _on(429, "session_busy", {"retry-after": "1"}),
    SessionLimit: _on(503, "session_limit"),
    SessionClosed: _on(409, "session_closed"),
    Exception: _on_crash,
}


def _header(scope: Scope, name: bytes) -> str | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())  # ASGI: (name, value) byte pairs
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


@attrs.frozen
class RateLimit:
    """At most ``per_second`` POSTs a second per token on average, in bursts of up to ``burst``; and, apart,
    at most ``reads_per_second`` reads (GET, HEAD) in bursts of up to ``read_burst``.

    The default burst lets a client start 100 requests at once (a batch from an SDK) without a 429. Reads get a
    larger budget of their own (a client polling its turns, or a page of requests fetching history), so that
    reading never uses up the budget for posting, nor the other way round."""

    per_second: float = 20.0
    burst: int = 100
    reads_per_second: float = 100.0
    read_burst: int = 200

    def __attrs_post_init__(self) -> None:
        positive_number("per_second", self.per_second)
        positive_int("burst", self.burst)
        positive_number("reads_per_second", self.reads_per_second)
        positive_int("read_burst", self.read_burst)


class RequestLog:
    """Logs every request (method, path, status, duration, session id) and runs it in a tracing span."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        found = _SESSION_PATH.match(path)
        session_id = found.group(1) if found else None
        route = _SESSION_PATH.sub("/sessions/{id}", path)
        status = [500]  # stays 500 if the app raises before answering

        async def observed(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        started = time.perf_counter()
        attributes = {"http.request.method": method, "http.route": route, "url.path": path, "session.id": session_id}
        with tracing.span(f"HTTP {method} {route}", attributes) as span:
            try:
                await self.app(scope, receive, observed)
            finally:
                span.set_attribute("http.response.status_code", status[0])
                if status[0] >= 500:
                    span.set_attribute("error.type", str(status[0]))
                owner = scope.get("state", {}).get("owner")
                log = _log.warning if status[0] >= 500 else _log.info
                log("http request", method=method, path=path, status=status[0], session=session_id,
                          owner=owner, duration_ms=round((time.perf_counter() - started) * 1000, 2))


class _Buckets:
    """A token bucket per owner: ``rate`` tokens a second, holding at most ``burst``."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate, self.burst, self._clock = rate, float(burst), clock
        self._buckets: dict[str, tuple[float, float]] = {}  # owner: (tokens left, when counted)

    def wait(self, owner: str) -> float:
        """Take one token from ``owner``'s bucket; 0 if there was one, else the seconds until there is."""
        now = self._clock()
        tokens, stamp = self._buckets.get(owner, (self.burst, now))
        tokens = min(self.burst, tokens + (now - stamp) * self.rate)
        if tokens >= 1.0:
            self._buckets[owner] = (tokens - 1.0, now)
            return 0.0
        self._buckets[owner] = (tokens, now)
        return (1.0 - tokens) / self.rate


class RateLimited:
    """Refuses requests beyond ``limit`` per owner with 429 and ``Retry-After`` (token buckets per owner): POSTs
    by ``per_second`` and ``burst``, reads (GET, HEAD) by their own ``reads_per_second`` and ``read_burst``.
    Reads of ``exempt`` paths (``/healthz``, the OpenAPI documents, the chat page) are never limited. A request counts once,
    however long its answer runs: an event stream is one read."""

    def __init__(self, app: ASGIApp, *, limit: RateLimit, exempt: Iterable[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.limit = limit
        self.exempt = frozenset(exempt)
        self._posts = _Buckets(limit.per_second, limit.burst, clock)
        self._reads = _Buckets(limit.reads_per_second, limit.read_burst, clock)

    def _refusal(self, scope: Scope) -> Problem | None:
        method = scope["method"]
        if method == "POST":
            buckets, what, rate, burst = self._posts, "requests", self.limit.per_second, self.limit.burst
        elif method in ("GET", "HEAD") and scope["path"] not in self.exempt:
            buckets, what, rate, burst = self._reads, "reads", self.limit.reads_per_second, self.limit.read_burst
        else:
            return None
        wait = buckets.wait(scope.get("state", {}).get("owner", ""))
        if wait <= 0:
            return None
        seconds = max(1, math.ceil(wait))
        return Problem(429, "rate_limited", f"too many {what}; at most {rate:g} a second (bursts of {burst}) per "
                       f"token; retry in {seconds} s", {"retry-after": str(seconds)})

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        problem = self._refusal(scope) if scope["type"] == "http" else None
        if problem is not None:
            await send_problem(send, problem, scope)
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuses POST bodies over ``max_bytes`` with 413: by ``Content-Length`` before reading, and by counting
    the bytes as they arrive (for chunked bodies, or a length that lies). Other requests are never read."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> Problem:
        return Problem(413, "payload_too_large", f"the request body is larger than {self.max_bytes} bytes")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                await send_problem(send, Problem(400, "bad_request", f"invalid Content-Length {declared!r}"), scope)
                return
            if int(declared) > self.max_bytes:
                await send_problem(send, self._too_large(), scope)
                return
        received = [0]
        started = [False]

        async def counted() -> dict[str, Any]:
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > self.max_bytes:
                    raise self._too_large()
            return message

        async def watched(message: dict[str, Any]) -> None:
            started[0] = started[0] or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except Problem as problem:  # the app did not turn it into a response itself
            if started[0] or problem.status != 413:
                raise
            await send_problem(send, problem, scope)
