"""``BearerAuth``: the one bearer-token check in front of every HTTP server a conduit runs; and ``TokenQuota``,
how many sessions each token may hold open there.

The HTTP conduit, the OpenAI-compatible app and the MCP conduit over HTTP all use it; each answers a refused
request in its own error format (``error_body``, or one per path prefix: ``error_bodies``), and otherwise they
behave the same: a 401 with a ``WWW-Authenticate: Bearer`` challenge, a case-insensitive scheme, and tokens
compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from loop import Caller, Turn, UsageError
from loop.checks import positive_int
from session._manager import Manager, SessionLimit
from session._session import Session

Refusal = Literal["missing", "invalid"]
"""Why a request was refused: it sent no bearer token, or one that is not valid."""
Scope = dict[str, Any]
ErrorBody = Callable[[Refusal], Mapping[str, Any]]
"""The JSON body of a refused request, from why it was refused."""
Challenge = Callable[[Scope, Refusal], str]
"""The ``WWW-Authenticate`` value of a refused request, from the request's ASGI scope and why it was refused."""

_MESSAGES: dict[Refusal, str] = {
    "missing": "this route needs an 'Authorization: Bearer <token>' header",
    "invalid": "the bearer token is not valid",
}


def unauthorized(refusal: Refusal) -> dict[str, Any]:
    """The session API's error body for a refused request: ``{"error": {"type": "unauthorized", "message"}}``."""
    return {"error": {"type": "unauthorized", "message": _MESSAGES[refusal]}}


def under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or below it, by whole segments: ``/v1`` holds ``/v1/models``, not ``/v1x``."""
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


ANONYMOUS = "anonymous"
"""The owner of every request a server without tokens lets in (only ever on a loopback address)."""


def owner_in(scope: Mapping[str, Any]) -> str:
    """The owner ``BearerAuth`` let the ASGI request ``scope`` in as; ``ANONYMOUS`` when no ``BearerAuth`` saw it
    (an app served without a token)."""
    state = scope.get("state")
    owner = state.get("owner") if isinstance(state, Mapping) else None
    return owner if isinstance(owner, str) else ANONYMOUS


def caller_in(scope: Mapping[str, Any]) -> Caller:
    """Who sends the ASGI request ``scope``: its token's owner, which is also the namespace its sessions live in."""
    owner = owner_in(scope)
    return Caller(owner, owner)


def owner_of(token: str) -> str:
    """The name a token's sessions and logs go by: a short digest, so the token never reaches a log."""
    return "tok_" + hashlib.sha256(token.encode()).hexdigest()[:16]


class BearerAuth:
    """Requires ``Authorization: Bearer <token>`` with one of ``tokens`` on every path but ``open_paths``.

    A refused request gets 401, ``WWW-Authenticate: Bearer realm="<realm>"`` (plain ``Bearer`` with
    ``realm=None``; ``challenge(scope, refusal)`` instead, when given) and the JSON body
    ``error_body(refusal)``, or, for a path under one of the prefixes of ``error_bodies`` (the longest that
    holds it), that prefix's body. A request let in has its owner (``owner_of(token)``) in
    ``scope["state"]["owner"]``.
    With ``tokens=None`` every request is let in as the owner ``"anonymous"`` (only for a server on a loopback
    address; the conduits check that). Other ASGI scopes (lifespan) pass through.
    """

    def __init__(self, app: Callable[..., Any], *, tokens: Iterable[str] | None, open_paths: Iterable[str] = (),
                 realm: str | None = "session", error_body: ErrorBody = unauthorized,
                 error_bodies: Mapping[str, ErrorBody] | None = None, challenge: Challenge | None = None) -> None:
        if isinstance(tokens, str):
            raise UsageError("tokens must be a list of tokens, not one string")
        self.app = app
        self._tokens = None if tokens is None else tuple(
            (hashlib.sha256(t.encode()).digest(), owner_of(t)) for t in tokens)
        self._open = frozenset(open_paths)
        plain = "Bearer" if realm is None else f'Bearer realm="{realm}"'
        self._challenge: Challenge = challenge or (lambda scope, refusal: plain)
        # Longest prefix first, so that the most specific body wins.
        self._bodies = sorted((error_bodies or {}).items(), key=lambda item: -len(item[0]))
        self._error_body = error_body

    def _owner(self, token: bytes) -> str | None:
        # Every token's digest is compared in constant time, and all of them: how long a check takes depends on
        # neither which token matched nor how much of a guess was right.
        given = hashlib.sha256(token).digest()
        found = None
        for digest, owner in self._tokens or ():
            if hmac.compare_digest(given, digest):
                found = owner
        return found

    async def _refuse(self, scope: Scope, send: Any, refusal: Refusal) -> None:
        make = next((body for prefix, body in self._bodies if under(scope["path"], prefix)), self._error_body)
        body = json.dumps(make(refusal)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"www-authenticate", self._challenge(scope, refusal).encode("latin-1"))]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self.app(scope, receive, send)
            return
        if self._tokens is None:
            owner = ANONYMOUS
        else:
            header = next((v for k, v in scope.get("headers", ()) if k.lower() == b"authorization"), b"")
            scheme, _, credentials = header.partition(b" ")
            credentials = credentials.strip()
            if scheme.lower() != b"bearer" or not credentials:
                await self._refuse(scope, send, "missing")
                return
            found = self._owner(credentials)
            if found is None:
                await self._refuse(scope, send, "invalid")
                return
            owner = found
        scope.setdefault("state", {})["owner"] = owner
        await self.app(scope, receive, send)


class TokenQuota:
    """At most ``per_token`` sessions open at once for each token (each owner, as ``BearerAuth`` names it), so
    that no client can take all of a manager's ``max_sessions`` for itself.

    Every session a server opens for a token goes through ``open``. A session counts while the manager holds
    it open (sessions being opened count too): one closed, by its client or as idle, frees its place.
    """

    def __init__(self, manager: Manager, *, per_token: int) -> None:
        self.manager = manager
        self.per_token = positive_int("per_token (sessions a token may hold open)", per_token)
        self._held: dict[str, set[str]] = {}  # owner: the ids of the sessions opened for it, maybe closed since
        self._opening: dict[str, int] = {}

    def held(self, owner: str) -> int:
        """How many sessions ``owner`` holds open (or is opening) now."""
        keys = self._held.get(owner)
        if keys is not None:
            for key in [k for k in keys if not self._is_open(k)]:
                keys.discard(key)
            if not keys:
                del self._held[owner]
        return len(keys or ()) + self._opening.get(owner, 0)

    def _is_open(self, key: str) -> bool:
        session = self.manager.get(key)
        return session is not None and not session.closed

    async def open(self, owner: str, session_id: str, *, history: Sequence[Turn] = (),
                   refuse: Callable[[str], Exception] = SessionLimit) -> Session:
        """``manager.open(session_id, history=history)`` for ``owner``: a session already open is returned as it
        is; one to open beyond the owner's quota raises ``refuse(message)`` instead (``SessionLimit`` unless the
        caller answers in a format of its own: the conduits answer 429)."""
        if self._is_open(session_id):
            return await self.manager.open(session_id, history=history)
        held = self.held(owner)
        if held >= self.per_token:
            raise refuse(f"this token already holds {held} open sessions, the most one token may hold at once; "
                         "close one (or let an idle one close) and try again")
        self._opening[owner] = self._opening.get(owner, 0) + 1
        try:
            session = await self.manager.open(session_id, history=history)
        finally:
            self._opening[owner] -= 1
            if not self._opening[owner]:
                del self._opening[owner]
        self._held.setdefault(owner, set()).add(session_id)
        return session
