"""Serving an ASGI app over HTTP for the conduits: a listening socket, served until cancelled (by uvicorn on
asyncio, by Hypercorn on trio) with a deadline for each request's headers, and the checks every conduit makes of
a JSON request body before and after parsing it (that it is UTF-8, how deeply it nests, and whether it holds
text UTF-8 cannot carry)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import anyio.abc
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from loop import LoopError, UsageError, tracing
from loop.checks import positive_number
from loop.codec import json_depth as json_depth  # read by the routes before they parse a body

_log = tracing.logger("session.serving")

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest request body the conduits' HTTP servers take by default (4 MiB, 4,194,304 bytes); larger gets 413."""
DEFAULT_MAX_CONVERSATION_BYTES = 64 * 1024 * 1024
"""The most message text (UTF-8 bytes) a conversation served over HTTP may hold by default (64 MiB)."""

MAX_JSON_DEPTH = 64
"""How deeply the arrays and objects of a JSON request body may nest. Deeper bodies are refused (400) before they
are parsed: the parser recurses once per level, and some 200,000 levels exhaust the interpreter's stack."""

# A surrogate code point can only come from a \uD800-\uDFFF escape, or from its UTF-8 form (ED A0..BF ..),
# which ``json.loads`` lets through.
_SURROGATE_IN_TEXT = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_ENCODINGS = {"utf-16": "UTF-16 (by its byte-order mark)", "utf-32": "UTF-32 (by its byte-order mark)",
              "utf-16-le": "UTF-16-LE", "utf-16-be": "UTF-16-BE", "utf-32-le": "UTF-32-LE", "utf-32-be": "UTF-32-BE"}


def utf8_json(body: bytes) -> str:
    """The text of the JSON request ``body``, read as UTF-8, the one encoding JSON may use (RFC 8259): the
    checks of the bytes (``json_depth``, ``lone_surrogate``) read them as UTF-8, so the parser must too, where
    ``json.loads(bytes)`` would guess UTF-16 or UTF-32 from the first bytes. Raises ``ValueError`` saying what is
    wrong ("it is UTF-16-LE"): UTF-16 or UTF-32 (by a byte-order mark, or by the NUL bytes such text puts beside
    ASCII characters), a NUL byte anywhere (never in JSON text), or bytes that are not UTF-8. A UTF-8 byte-order
    mark is dropped, as RFC 8259 lets a parser do; a surrogate written in UTF-8 (ED A0 80) is kept, for
    ``lone_surrogate`` to name."""
    guess = json.detect_encoding(body)
    if guess in _ENCODINGS:
        raise ValueError(f"it is {_ENCODINGS[guess]}")
    nul = body.find(0)
    if nul >= 0:
        raise ValueError(f"it holds a NUL byte at offset {nul}, which JSON text never does (UTF-16 or UTF-32?)")
    try:
        text = body.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ValueError(f"byte 0x{body[exc.start]:02x} at offset {exc.start} is not UTF-8 ({exc.reason})") from None
    return text.removeprefix("\ufeff")


def json_text(data: Any, **options: Any) -> str:
    """``json.dumps(data, ensure_ascii=False, **options)``, but always valid UTF-8: a string holding a lone
    surrogate (which a model or a tool could hand over) is written with ``\\u`` escapes, as JSON allows, so that
    it cannot break the response that carries it."""
    text = json.dumps(data, ensure_ascii=False, **options)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(data, ensure_ascii=True, **options)
    return text


def _shown(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


def lone_surrogate(data: Any, *, text: bytes | None = None) -> str | None:
    """Where parsed JSON ``data`` holds a lone UTF-16 surrogate (``"\\ud800"`` without its pair): the path of
    the first string (or key) holding one, like ``messages[0].content`` (``""`` for ``data`` itself), or
    ``None``. Such a string is not Unicode text: UTF-8 cannot encode it, so it can be neither stored nor sent.
    Given the ``text`` ``data`` was parsed from, a text that cannot hold one is not searched further."""
    if text is not None and not _SURROGATE_IN_TEXT.search(text):
        return None
    pending: list[tuple[str, Any]] = [("", data)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path
        elif isinstance(value, dict):
            inside = []
            for key, item in value.items():
                where = f"{path}.{_shown(key)}" if path else _shown(key)
                if _SURROGATE.search(key):
                    return where
                inside.append((where, item))
            pending.extend(reversed(inside))  # first key first
        elif isinstance(value, list):
            pending.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return None


def listen(host: str, port: int) -> socket.socket:
    """A bound, non-blocking TCP socket on ``host``:``port`` (0: any free port), ready to hand to ``serve_asgi``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP (not 0) lets asyncio turn Nagle's algorithm off on accepted connections; otherwise a
    # keep-alive client waits ~40 ms for a delayed ACK on every request after its first.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc}") from exc
    return sock


def url_of(sock: socket.socket, host: str, path: str = "") -> str:
    """The URL clients reach ``sock`` at."""
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}{path}"


class _HeaderTimed(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for each request's headers, which uvicorn does not have: a
    connection whose next request's headers are not all in ``header_timeout`` seconds after it opened (or after
    the last response) is closed, with 408 if part of a request came. Slow request bodies are the app's to time
    out. (uvicorn's own keep-alive timeout still closes an idle connection sooner, after a response.)"""

    header_timeout = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._before: Any = None  # the request cycle before the one whose headers are awaited
        self._partial = False  # part of the awaited request has come

    def _await_headers(self) -> None:
        self._stop_waiting()
        self._before, self._partial = self.cycle, False
        self._deadline = self.loop.call_later(self.header_timeout, self._headers_late)

    def _stop_waiting(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.cycle is not self._before:
            return
        _log.info("closing a connection whose request headers came too slowly", client=self.client)
        if self._partial:
            body = (b'{"error": {"type": "request_timeout", "message": "the request headers did not arrive within '
                    + f'{self.header_timeout:g} s"}}}}'.encode())
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                                 + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        self._partial = True
        super().data_received(data)
        if self._deadline is not None and self.cycle is not self._before:  # the headers are in: a request began
            self._stop_waiting()

    def on_response_complete(self) -> None:
        answered = self.cycle
        super().on_response_complete()
        if self.cycle is answered and not self.transport.is_closing():  # no pipelined request began meanwhile
            self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)


def _protocol(header_timeout: float) -> type[H11Protocol]:
    class Protocol(_HeaderTimed):
        pass

    Protocol.header_timeout = header_timeout
    return Protocol


class _Server(uvicorn.Server):
    """uvicorn, stopped by cancelling ``serve_asgi`` rather than by the process's signals."""

    def capture_signals(self) -> Any:
        return contextlib.nullcontext()


class _Uvicorn:
    """The asyncio server: uvicorn, with the header deadline of ``_HeaderTimed``."""

    def __init__(self, app: Any, sock: socket.socket, *, shutdown_timeout: float, header_timeout: float) -> None:
        # uvicorn hints this as int, but only hands it to asyncio.wait_for, which takes any number of seconds.
        config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False, ws="none",
                                http=_protocol(header_timeout), server_header=False,
                                timeout_graceful_shutdown=shutdown_timeout)  # type: ignore[arg-type]
        self._server = _Server(config)
        self._sock = sock

    @property
    def started(self) -> bool:
        return self._server.started

    async def run(self) -> None:
        await self._server.serve(sockets=[self._sock])

    def stop(self) -> None:
        self._server.should_exit = True  # seen within 0.1 s by uvicorn's main loop


class _HTTPOnly:
    """The app as uvicorn runs it here (``lifespan="off"``, ``ws="none"``), for Hypercorn, which has neither
    setting: lifespan events are acknowledged without reaching the app (the conduits start and stop their apps
    themselves; the MCP app's own lifespan would start its session manager a second time), and a WebSocket
    handshake is refused (403) where Hypercorn would otherwise accept it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            while (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})


class _Hypercorn:
    """The trio server: Hypercorn's trio worker, set up as ``_Uvicorn`` is. Where the two differ:

    - Header deadline: Hypercorn's ``keep_alive_timeout`` is the time a connection has, from opening or from
      its last response, to send a request's complete headers, which is what ``header_timeout`` means, so it
      is set to that. A late connection is closed without the 408 ``_HeaderTimed`` writes, and an idle kept
      connection is closed after ``header_timeout`` rather than after uvicorn's ``timeout_keep_alive`` (5 s).
    - Read timeout: ``read_timeout`` (a deadline for every read) stays off, as uvicorn has none: a client
      reading a long event stream sends nothing. Slow bodies are the app's to time out, on both.
    - Header size: headers still unfinished past 16 KiB (``h11_max_incomplete_size``, h11's default, under
      uvicorn too) are answered 431 where uvicorn answers 400, and the connection is closed.
    - HTTP/2: Hypercorn also speaks it in clear text (after an ``h2c`` upgrade, or with prior knowledge), which
      uvicorn does not, and no setting turns it off. The apps and their guards are the same; a header list is
      announced as 16 KiB at most (``h2_max_header_list_size``), but h2 holds it to 64 KiB only.
    - Body size: the apps' own check (``BodyLimit``, the MCP app's limit), on both servers.
    - Shutdown: ``graceful_timeout`` is uvicorn's ``timeout_graceful_shutdown``; the connections still open
      then are cancelled, as uvicorn cancels their tasks. ``stop`` triggers it at once (uvicorn polls).
    - Keep-alive: Hypercorn closes a connection after 1,000 requests (``keep_alive_max_requests``), uvicorn
      never; a client then opens another.
    - No ``server`` header, no access log; Hypercorn's own messages go to the ``hypercorn.error`` logger
      (uvicorn's to ``uvicorn.error``). Backlog 2,048, as uvicorn's.
    """

    def __init__(self, app: Any, sock: socket.socket, *, shutdown_timeout: float, header_timeout: float) -> None:
        from hypercorn.config import Config

        config = Config()
        config.keep_alive_timeout = header_timeout
        config.read_timeout = None
        config.h11_max_incomplete_size = config.h2_max_header_list_size = 16 * 1024
        config.graceful_timeout = shutdown_timeout
        config.include_server_header = False
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        config.backlog = 2048
        self._config = config
        self._app = _HTTPOnly(app)
        self._sock = sock
        self._stopped = anyio.Event()
        self.started = False

    async def run(self) -> None:
        from hypercorn.config import Sockets
        from hypercorn.trio import worker_serve
        from hypercorn.utils import wrap_app

        self._sock.listen(self._config.backlog)  # Hypercorn listens only on the sockets it makes
        await worker_serve(wrap_app(self._app, self._config.wsgi_max_body_size, "asgi"), self._config,
                           sockets=Sockets(secure_sockets=[], insecure_sockets=[self._sock], quic_sockets=[]),
                           shutdown_trigger=self._stopped.wait, task_status=_Started(self))

    def stop(self) -> None:
        self._stopped.set()


class _Started:
    """The ``task_status`` Hypercorn reports to once it accepts connections."""

    def __init__(self, server: _Hypercorn) -> None:
        self.server = server

    def started(self, value: object = None) -> None:
        self.server.started = True


def _on_trio(what: str) -> bool:
    """Whether the running event loop is trio's (Hypercorn serves) rather than asyncio's (uvicorn serves)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        import sniffio  # trio requires it, so it is there whenever trio runs

        library = sniffio.current_async_library()
        if library != "trio":
            raise UsageError(f"the {what} runs on asyncio (uvicorn) or trio (Hypercorn), not on {library}") from None
        return True
    return False


async def serve_asgi(
    app: Any,
    sock: socket.socket,
    *,
    host: str,
    path: str = "",
    shutdown_timeout: float,
    task_status: anyio.abc.TaskStatus[str],
    around: AbstractAsyncContextManager[Any] | None = None,
    on_stop: Callable[[], None] | None = None,
    what: str = "HTTP server",
    header_timeout: float = 10.0,
) -> None:
    """Serve ``app`` on ``sock`` (from ``listen``; the caller closes it) until cancelled: with uvicorn on asyncio,
    with Hypercorn on trio (``_Hypercorn`` says where the two differ). ``host`` and ``path`` make the URL. A
    connection whose request headers take longer than ``header_timeout`` seconds to arrive is closed (on asyncio
    with 408 when part of them came).

    ``task_status`` gets the URL once the server accepts connections. ``on_stop`` runs as shutdown begins, so
    long-lived responses can end before the server waits up to ``shutdown_timeout`` seconds for requests in
    flight. ``around`` is entered for as long as the server runs; on the way out it is left once the server
    stopped accepting connections (and before that wait ends), so it may first wait for requests in flight.
    """
    url = url_of(sock, host, path)
    positive_number("header_timeout", header_timeout, unit="seconds")
    server: _Uvicorn | _Hypercorn
    if _on_trio(what):
        server = _Hypercorn(app, sock, shutdown_timeout=shutdown_timeout, header_timeout=float(header_timeout))
    else:
        server = _Uvicorn(app, sock, shutdown_timeout=shutdown_timeout, header_timeout=float(header_timeout))
    stopped = anyio.Event()
    stopping = False

    async def run() -> None:
        with anyio.CancelScope(shield=True):  # the server stops by ``stop``, below
            try:
                await server.run()
            finally:
                stopped.set()

    def stop() -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            if on_stop is not None:
                on_stop()
            server.stop()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            try:
                async with around if around is not None else contextlib.nullcontext():
                    try:
                        while not (server.started or stopped.is_set()):
                            await anyio.sleep(0.005)
                        if not server.started:
                            raise LoopError(f"the {what} on {url} stopped while starting")
                        _log.info("serving", what=what, url=url)
                        task_status.started(url)
                        await stopped.wait()
                    finally:
                        stop()  # no new connections while ``around`` ends
            finally:
                stop()
    finally:
        _log.info("stopped serving", what=what, url=url)
