"""``SameSite``: the HTTP conduit's guard against requests a web page could make from a browser.

A browser lets any page send a "simple" cross-site request (a form-like POST with ``content-type: text/plain``,
no preflight) to any address, loopback included, and a page that rebinds its own DNS name to 127.0.0.1 reaches
a loopback server under its own name (``Host: evil.example:PORT``). A server with no token would run the agent
for either. So, on every route:

- the ``Host`` header must name this server (``allowed_hosts``; by default, on a loopback address, the loopback
  names), else 421;
- a request that says where it comes from (``Origin``) must come from this server itself or from one of
  ``cors_origins``, else 403; an allowed cross-origin request gets the CORS headers, and its preflight
  (``OPTIONS`` with ``Access-Control-Request-Method``) is answered here;
- a body sent as one of the types a browser posts without asking first (``text/plain``, a form) is refused
  with 415: the API reads JSON (a body with no type is read as JSON, as curl and many clients send it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from loop import UsageError
from provider import is_loopback
from session.http._guards import Problem, send_problem

Scope = dict[str, Any]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The names a loopback server answers to by default."""

_ALLOW_HEADERS = b"authorization, content-type, idempotency-key, last-event-id, mcp-protocol-version, mcp-session-id"
_ALLOW_METHODS = b"GET, POST, DELETE, OPTIONS"
_EXPOSE_HEADERS = b"mcp-session-id, retry-after, x-request-id"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def check_origins(origins: Iterable[str]) -> tuple[str, ...]:
    """``origins`` as the ``scheme://host[:port]`` values browsers send, checked; ``UsageError`` naming a bad one."""
    if isinstance(origins, str):
        raise UsageError(f"cors_origins takes a list of origins, got the string {origins!r}")
    checked = []
    for origin in origins:
        parts = urlsplit(origin) if isinstance(origin, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or origin.rstrip("/") != \
                f"{parts.scheme}://{parts.netloc}":
            raise UsageError(f"a CORS origin is scheme://host[:port] with nothing after it, as a browser sends "
                             f"it (e.g. https://chat.example.com), got {origin!r}")
        checked.append(origin.rstrip("/").lower())
    return tuple(checked)


def check_hosts(hosts: Iterable[str] | None, bind: str) -> tuple[str, ...] | None:
    """The host names the server answers to: ``hosts`` checked, or the loopback names when ``bind`` is loopback
    (``None``: any, for a server reached under names of its own, behind its token)."""
    if hosts is None:
        return LOOPBACK_NAMES if is_loopback(bind) else None
    if isinstance(hosts, str):
        raise UsageError(f"allowed_hosts takes a list of host names, got the string {hosts!r}")
    checked = tuple(h.strip("[]").lower() for h in hosts if isinstance(h, str) and h.strip())
    if len(checked) != len(tuple(hosts)) or any(":" in h and not h.count(":") > 1 for h in checked):
        raise UsageError(f"allowed_hosts are host names or addresses without a port, got {list(hosts)!r}")
    return checked


def _hostname(host: str) -> str:
    """The name in a ``Host`` header value, without its port (``[::1]:8000`` -> ``::1``)."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0].lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


class SameSite:
    """The guard described in the module docstring, as ASGI middleware."""

    def __init__(self, app: Callable[..., Any], *, allowed_hosts: tuple[str, ...] | None,
                 cors_origins: tuple[str, ...] = ()) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.cors_origins = frozenset(cors_origins)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for key, value in scope["headers"]:
            headers.setdefault(key, value)  # the first of a repeated header
        host = headers.get(b"host", b"").decode("latin-1")
        if self.allowed_hosts is not None and _hostname(host) not in self.allowed_hosts:
            shown = ", ".join(self.allowed_hosts)
            await send_problem(send, Problem(421, "misdirected_request", f"this server answers for {shown}, not "
                                             f"{host!r} (a page rebinding its name to this address?); a name of "
                                             "its own is allowed with --allowed-host or allowed_hosts="), scope)
            return
        origin = headers.get(b"origin")
        cross = None
        if origin is not None:
            said = origin.decode("latin-1").lower()
            if said in self.cors_origins:
                cross = origin
            elif said == "null" or urlsplit(said).netloc != host.lower():
                await send_problem(send, Problem(403, "origin_not_allowed", f"requests from {said!r} are not "
                                                 "allowed: a web page on another origin may not use this server; "
                                                 "allow one with --cors-origin or cors_origins="), scope)
                return
        method = scope["method"]
        if cross is not None and method == "OPTIONS" and b"access-control-request-method" in headers:
            await send({"type": "http.response.start", "status": 204, "headers": [
                *_cors(cross), (b"access-control-allow-methods", _ALLOW_METHODS),
                (b"access-control-allow-headers", _ALLOW_HEADERS), (b"access-control-max-age", b"600")]})
            await send({"type": "http.response.body", "body": b""})
            return
        if method in _BODY_METHODS and _has_body(headers) and _simple(headers.get(b"content-type", b"")):
            await send_problem(send, Problem(415, "unsupported_media_type", "a request body must be JSON, sent "
                                             "with content-type: application/json"), scope)
            return
        if cross is None:
            await self.app(scope, receive, send)
            return

        async def with_cors(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *_cors(cross)]}
            await send(message)

        await self.app(scope, receive, with_cors)


def _cors(origin: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"access-control-allow-origin", origin), (b"vary", b"Origin"),
            (b"access-control-expose-headers", _EXPOSE_HEADERS)]


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length")
    if length is not None:
        return length.strip() not in (b"", b"0")
    return b"transfer-encoding" in headers


_SIMPLE_TYPES = frozenset({b"text/plain", b"application/x-www-form-urlencoded", b"multipart/form-data"})


def _simple(content_type: bytes) -> bool:
    """Whether a body of this type is one a browser sends cross-site without a preflight: never JSON."""
    return content_type.split(b";", 1)[0].strip().lower() in _SIMPLE_TYPES
