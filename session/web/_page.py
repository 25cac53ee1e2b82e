"""The chat page's routes: ``GET /`` and the few files the page loads, at exact paths.

The files ship in this package's ``static`` folder and are read once, on first use, into memory. Every answer
carries a strict Content-Security-Policy: scripts and styles only from this server's own files (nothing inline,
nothing from elsewhere), requests only to this server, no framing. The page holds the bearer token in the
browser's ``sessionStorage`` and sends it with each API request, so these paths need no token themselves: they
hold no data, only the page.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Awaitable, Callable
from importlib import resources

import attrs
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["CONTENT_SECURITY_POLICY", "PAGE_PATHS", "page_routes"]

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                           "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

_JS = "text/javascript; charset=utf-8"
# Each path the page is served at: the file in ``static`` and its content type.
_FILES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    "/app.js": ("app.js", _JS),
    "/api.js": ("api.js", _JS),
    "/chat.js": ("chat.js", _JS),
    "/tree.js": ("tree.js", _JS),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}

PAGE_PATHS: tuple[str, ...] = tuple(_FILES)
"""Every path the page's routes answer: open to requests without a token, and not rate limited."""

_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
    "cross-origin-opener-policy": "same-origin",
}


@attrs.frozen
class _File:
    body: bytes
    media_type: str
    etag: str


@functools.cache
def _load(path: str) -> _File:
    """The file served at ``path``, read from the package once. A file missing from the package is a broken
    install, named as such."""
    name, media_type = _FILES[path]
    try:
        body = resources.files("session.web").joinpath("static", name).read_bytes()
    except FileNotFoundError:
        raise RuntimeError(f"the chat page's file static/{name} is missing from the installed session.web package; "
                           "reinstall the package") from None
    return _File(body, media_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def _endpoint(path: str) -> Callable[[Request], Awaitable[Response]]:
    async def serve(request: Request) -> Response:
        found = _load(path)
        headers = {**_HEADERS, "etag": found.etag}
        if found.etag in (tag.strip() for tag in request.headers.get("if-none-match", "").split(",")):
            return Response(status_code=304, headers=headers)  # the browser's copy is current
        return Response(found.body, media_type=found.media_type, headers=headers)

    return serve


def page_routes() -> list[Route]:
    """The routes of the chat page: ``GET`` (and ``HEAD``) at each of ``PAGE_PATHS``."""
    return [Route(path, _endpoint(path), methods=["GET"]) for path in PAGE_PATHS]
