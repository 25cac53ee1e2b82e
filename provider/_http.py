"""What the HTTP providers share: status codes to typed errors, httpx errors translated, and SSE parsing."""

from __future__ import annotations

import email.utils
import ipaddress
import json
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import anyio
import attrs
import httpx

from loop import UsageError
from loop.errors import (
    AuthenticationError,
    BadRequestError,
    OverloadedError,
    ProviderError,
    ProviderTimeout,
    ProviderUnreachable,
    RateLimitError,
    ServerError,
    StreamError,
)

BODY_EXCERPT = 2000
# How long to keep reading after a stream's final event for the end of the body, so the connection goes back
# to the pool for the next turn instead of being closed (the end usually arrives at once).
DRAIN_SECONDS = 0.25


def json_data(value: Any) -> Any:
    """``value`` with every mapping a dict and every sequence a list, as JSON reads back (schemas may be frozen)."""
    if isinstance(value, Mapping):
        return {str(k): json_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_data(v) for v in value]
    return value


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def http_url(base_url: object, example: str = "http://127.0.0.1:8000/v1") -> httpx.URL:
    """``base_url`` parsed; a ``UsageError`` (showing ``example``) unless it is an http(s) URL with a host."""
    try:
        url = httpx.URL(base_url)  # type: ignore[arg-type]  # anything else is refused below
    except (TypeError, httpx.InvalidURL):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"base_url must be an http(s) URL like {example}, got {base_url!r}")
    return url


def openai_key(api_key: str | None, url: httpx.URL) -> str | None:
    """The API key to send to ``url``: ``api_key``, else ``OPENAI_API_KEY``. OpenAI itself needs one, so a
    missing key is a ``UsageError`` there, not a 401 later; a local server may need none."""
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    if not key and url.host == "api.openai.com":
        raise UsageError("OpenAI needs an API key: set OPENAI_API_KEY or pass api_key=")
    return key


def excerpt(text: str, limit: int = BODY_EXCERPT) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit:,} more characters]"


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, or ``Retry-After`` as seconds or an HTTP date."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_object(body: str) -> dict[str, Any]:
    """The usual ``{"error": {"message": ..., "type": ..., "code": ...}}`` of an error body, or ``{}``."""
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, str):
        return {"message": error}
    return error if isinstance(error, dict) else {}


# Codes that say waiting will not help: the account is out of credit, so a 429 is not worth retrying.
_NOT_RETRYABLE_429 = ("insufficient_quota", "billing_hard_limit_reached")


def status_error(who: str, status: int, body: str, headers: Mapping[str, str]) -> ProviderError:
    """The typed error for an HTTP error status from provider ``who``."""
    error = _error_object(body)
    said = error.get("message")
    detail = f": {said}" if isinstance(said, str) and said else ""
    body = excerpt(body)
    wait = retry_after(headers)
    if status in (401, 403):
        return AuthenticationError(f"{who} refused the credentials (HTTP {status}){detail}; check the API key",
                                   status=status, body=body)
    if status == 429:
        limited = RateLimitError(f"{who} is rate limiting (HTTP 429){detail}", body=body, retry_after=wait)
        if error.get("code") in _NOT_RETRYABLE_429 or error.get("type") in _NOT_RETRYABLE_429:
            limited.retryable = False
        return limited
    if status in (503, 529):
        return OverloadedError(f"{who} is overloaded (HTTP {status}){detail}", status=status, body=body,
                               retry_after=wait)
    if status >= 500:
        return ServerError(f"{who} failed (HTTP {status}){detail}", status=status, body=body, retry_after=wait)
    if status == 408:
        return ProviderTimeout(f"{who} timed out the request (HTTP 408){detail}", status=status, body=body,
                               retryable=True)
    if 300 <= status < 400:
        where = headers.get("location")
        return BadRequestError(f"{who} redirected the request (HTTP {status}{f' to {where}' if where else ''}); "
                               "set the base URL to the address that answers", status=status, body=body)
    return BadRequestError(f"{who} rejected the request (HTTP {status}){detail}", status=status, body=body)


def transport_error(who: str, exc: httpx.HTTPError) -> ProviderError:
    """The typed error for an httpx failure talking to provider ``who``."""
    if isinstance(exc, httpx.ConnectTimeout):
        return ProviderTimeout(f"connecting to {who} timed out: {exc}", retryable=True)
    if isinstance(exc, httpx.TimeoutException):
        return ProviderTimeout(f"{who} did not answer in time: {type(exc).__name__} {exc}", retryable=True)
    if isinstance(exc, httpx.ConnectError):
        return ProviderUnreachable(f"cannot connect to {who}: {exc}", retryable=True)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return StreamError(f"the connection to {who} broke mid-response: {type(exc).__name__} {exc}",
                           retryable=True)
    if isinstance(exc, httpx.WriteError):
        # The request never fully left, so the server cannot have acted on it: sending it again is safe.
        return ProviderError(f"the connection to {who} broke while sending the request: {exc}", retryable=True)
    return ProviderError(f"talking to {who} failed: {type(exc).__name__} {exc}", retryable=False)


@attrs.frozen
class SSEEvent:
    """One server-sent event: its ``event`` type (``message`` unless named), ``data``, and the line number of
    its (last) data line."""

    event: str
    data: str
    line: int

    def json(self, who: str) -> Any:
        try:
            return json.loads(self.data)
        except ValueError as exc:
            raise StreamError(
                f"{who} sent invalid JSON on line {self.line} of the stream "
                f"({exc}): {excerpt(self.data, 200)!r}"
            ) from None


class _Lines:
    """Splits an event stream's bytes into lines where the standard ends them: CRLF, LF or CR.

    (``httpx``'s ``aiter_lines`` also splits at U+2028, U+2029 and U+0085, which JSON carries unescaped, so a
    chunk holding one would be cut in two.) Lines split on bytes, so a character split across reads stays
    whole; they decode as UTF-8 whatever the headers say, as the standard requires.
    """

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self.pending + chunk if self.pending else chunk
        if b"\r" in data:
            # A CR at the very end may be the first half of a CRLF whose LF is in the next read.
            tail = b"\r" if data.endswith(b"\r") else b""
            parts = (data[:-1] if tail else data).replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
            self.pending = parts.pop() + tail
        else:
            parts = data.split(b"\n")
            self.pending = parts.pop()
        return [part.decode("utf-8", errors="replace") for part in parts]

    def end(self) -> list[str]:
        """The last line, when the bytes ended right after its CR; an unterminated line is no line."""
        last, self.pending = self.pending, b""
        return [last[:-1].decode("utf-8", errors="replace")] if last.endswith(b"\r") else []


class _Events:
    """Builds events from lines (HTML Living Standard, "event stream interpretation")."""

    __slots__ = ("event", "data", "number", "last_data")

    def __init__(self) -> None:
        self.event = ""
        self.data: list[str] = []
        self.number = 0
        self.last_data = 0

    def line(self, raw: str) -> SSEEvent | None:
        """The event this line completes, if it completes one."""
        self.number += 1
        line = raw.rstrip("\r\n")
        if self.number == 1 and line.startswith("\ufeff"):
            line = line[1:]  # the standard allows one byte order mark before the first line
        if not line:
            event = SSEEvent(self.event or "message", "\n".join(self.data), self.last_data) if self.data else None
            self.event, self.data = "", []
            return event
        if line[0] == ":":
            return None  # a comment
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self.data.append(value)
            self.last_data = self.number
        elif name == "event":
            self.event = value
        return None  # id, retry and unknown fields change nothing here


async def sse_stream(chunks: AsyncIterator[bytes]) -> AsyncGenerator[SSEEvent, None]:
    """The events of a server-sent event stream from its bytes as they arrive (``response.aiter_bytes()``).

    Comments and unknown fields are skipped as the standard says; ``data`` lines join with newlines; a blank
    line dispatches. An event still being built when the bytes end is dropped, as the standard says. Closing
    this iterator closes ``chunks``.
    """
    lines, events = _Lines(), _Events()
    try:
        async for chunk in chunks:
            for line in lines.feed(chunk):
                event = events.line(line)
                if event is not None:
                    yield event
        for line in lines.end():
            event = events.line(line)
            if event is not None:
                yield event
    finally:
        await _close(chunks)


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[SSEEvent]:
    """The events of a server-sent event stream from its lines (see ``sse_stream`` to read bytes, which avoids
    ``httpx``'s ``aiter_lines`` splitting at Unicode line separators). Closing this iterator closes ``lines``."""
    events = _Events()
    try:
        async for raw in lines:
            event = events.line(raw)
            if event is not None:
                yield event
    finally:
        await _close(lines)


async def _close(source: Any) -> None:
    # Close a source left mid-way now, rather than leaving it to the event loop's finalizer after garbage
    # collection (which runs it as a task of its own, at some later time).
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()


async def drain(events: AsyncIterator[SSEEvent]) -> None:
    """Read what follows a stream's final event (normally only the end of the body), briefly, ignoring it."""
    with anyio.move_on_after(DRAIN_SECONDS):
        try:
            async for _ in events:
                pass
        except httpx.HTTPError:
            pass  # the answer is complete; the connection is simply not reused
