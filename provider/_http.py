"""What the HTTP providers share: status codes to typed errors, httpx errors translated, and SSE parsing."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
import httpx

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


def _message(body: str) -> str:
    """The server's own error message when the body is the usual ``{"error": {"message": ...}}``."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    if isinstance(error, str):
        return error
    return ""


def status_error(who: str, status: int, body: str, headers: Mapping[str, str]) -> ProviderError:
    """The typed error for an HTTP error status from provider ``who``."""
    said = _message(body)
    detail = f": {said}" if said else ""
    body = excerpt(body)
    wait = retry_after(headers)
    if status in (401, 403):
        return AuthenticationError(f"{who} refused the credentials (HTTP {status}){detail}; check the API key",
                                   status=status, body=body)
    if status == 429:
        return RateLimitError(f"{who} is rate limiting (HTTP 429){detail}", body=body, retry_after=wait)
    if status in (503, 529):
        return OverloadedError(f"{who} is overloaded (HTTP {status}){detail}", status=status, body=body,
                               retry_after=wait)
    if status >= 500:
        return ServerError(f"{who} failed (HTTP {status}){detail}", status=status, body=body, retry_after=wait)
    if status == 408:
        return ProviderTimeout(f"{who} timed out the request (HTTP 408){detail}", status=status, body=body,
                               retryable=True)
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
    return ProviderError(f"talking to {who} failed: {type(exc).__name__} {exc}", retryable=False)


@attrs.frozen
class SSEEvent:
    """One server-sent event: its ``event`` type (``message`` unless named), ``data``, and the line it ended on."""

    event: str
    data: str
    line: int

    def json(self, who: str) -> Any:
        try:
            return json.loads(self.data)
        except ValueError as exc:
            raise StreamError(
                f"{who} sent invalid JSON in the event ending on line {self.line} of the stream "
                f"({exc}): {excerpt(self.data, 200)!r}"
            ) from None


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[SSEEvent]:
    """Parse a server-sent event stream (HTML Living Standard, "event stream interpretation") from its lines.

    Comments (``:``) and unknown fields are skipped as the standard says; ``data`` lines join with newlines;
    a blank line dispatches. An event still being built when the lines end is dropped, as the standard says.
    """
    event = ""
    data: list[str] = []
    number = 0
    async for raw in lines:
        number += 1
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SSEEvent(event or "message", "\n".join(data), number)
            event, data = "", []
            continue
        if line[0] == ":":
            continue
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
