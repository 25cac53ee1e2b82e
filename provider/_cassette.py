"""Cassettes: record a provider's request/response pairs once, replay them offline forever.

A cassette is a JSON Lines file, one exchange per line, written as each exchange ends:
``{"request": ..., "deltas": [...]}``, with ``"error"`` (type, message, status, body, retryable,
retry_after) after the deltas streamed before it when the provider failed part-way, or ``"incomplete": true``
when the consumer stopped reading (closed the stream or was cancelled) before the response ended.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import attrs

from loop import (Delta, DeltaStream, Options, Provider, ProviderInfo, Request, Turn, UsageError, UseTool,
                  provider_info, require)
from loop.codec import delta_from_dict, delta_to_dict
from loop.errors import (
    AuthenticationError,
    BadRequestError,
    OverloadedError,
    ProviderError,
    ProviderTimeout,
    ProviderUnreachable,
    RateLimitError,
    ScriptExhausted,
    ServerError,
    StreamError,
)
from provider._http import json_data

_ERRORS: dict[str, type[ProviderError]] = {cls.__name__: cls for cls in (
    ProviderError, AuthenticationError, BadRequestError, RateLimitError, ServerError, OverloadedError,
    ProviderTimeout, ProviderUnreachable, StreamError, ScriptExhausted)}


class CassetteMismatch(UsageError):
    """Raised when a replayed request differs from the recorded one, or the cassette has no more exchanges."""


def _turn_to_dict(turn: Turn) -> dict[str, Any]:
    # A turn's meta is bookkeeping (timestamps, ids, finish reasons) that no provider sends to the model and
    # that turn equality ignores; keeping it would make replays fail on a timestamp and recordings fail on
    # anything JSON cannot hold.
    data = turn.to_dict()
    data.pop("meta", None)
    return {key: json_data(value) for key, value in data.items()}


def request_to_dict(request: Request) -> dict[str, Any]:
    """``request`` as plain JSON data: what a cassette stores and compares."""
    options = {f.name: getattr(request.options, f.name) for f in attrs.fields(Options) if f.name != "run_tools"}
    choice = options["tool_choice"]
    if isinstance(choice, UseTool):
        options["tool_choice"] = {"tool": choice.name}
    return {
        "turns": [_turn_to_dict(t) for t in request.turns],
        "tools": [{"name": t.name, "description": t.description, "parameters": json_data(t.parameters)}
                  for t in request.tools],
        "options": {k: json_data(v) for k, v in options.items() if v is not None},
    }


def _error_to_dict(exc: BaseException) -> dict[str, Any]:
    data: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, ProviderError):
        data.update(status=exc.status, body=exc.body, retryable=exc.retryable)
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            data["retry_after"] = retry_after
    return data


def _error_from_dict(data: dict[str, Any]) -> ProviderError:
    """The recorded error, raised again as the same ``ProviderError`` subclass when it was one, so wrappers
    such as ``Retry`` decide on a replay exactly as they did on the recording."""
    name = data.get("type") or "error"
    cls = _ERRORS.get(name, ProviderError)
    message = f"recorded {name}: {data.get('message', '')}"
    status, body, retry_after = data.get("status"), data.get("body") or "", data.get("retry_after")
    exc: ProviderError
    if issubclass(cls, (RateLimitError, ServerError)):
        exc = cls(message, status=status, body=body, retry_after=retry_after)
    elif issubclass(cls, ScriptExhausted):
        exc = ScriptExhausted(message, used=0)
    else:
        exc = cls(message, status=status, body=body)
    if "retryable" in data:
        exc.retryable = bool(data["retryable"])
    return exc


class Recording:
    """Passes requests to ``inner`` and appends each exchange to the cassette at ``path`` as it completes.

    An exchange is written when its stream ends: after the last delta, after an error (which is recorded
    with the deltas before it), or when the consumer closes the stream or is cancelled (marked incomplete).
    Concurrent streams each write one whole line. ``info`` is the inner provider's.
    """

    def __init__(self, inner: Provider, path: str | os.PathLike[str]) -> None:
        require(inner, Provider, "Recording", "a provider to wrap (something with stream(request))")
        self.inner = inner
        self.path = Path(path)
        self._lock = anyio.Lock()

    @property
    def info(self) -> ProviderInfo:
        """What ``inner`` says of itself."""
        return provider_info(self.inner)

    def stream(self, request: Request) -> DeltaStream:
        return self._stream(request)

    async def _stream(self, request: Request) -> AsyncGenerator[Delta, None]:
        deltas: list[dict[str, Any]] = []
        error: dict[str, Any] | None = None
        complete = False
        stream: Any = None
        try:
            stream = self.inner.stream(request)
            async for delta in stream:
                try:
                    deltas.append(delta_to_dict(delta))
                except UsageError as exc:
                    raise StreamError(f"provider streamed {delta!r}, which is not a Delta (TextDelta, "
                                      "ToolCallDelta, ...)") from exc
                yield delta
            complete = True
        except Exception as exc:
            error = _error_to_dict(exc)
            raise
        finally:
            # ``async for`` does not close what it iterates when left early; close the inner stream here so
            # its connection is released now, not whenever the garbage collector gets to it.
            with anyio.CancelScope(shield=True):
                try:
                    if stream is not None:  # None when the inner provider failed in stream() itself
                        await stream.aclose()
                finally:
                    entry: dict[str, Any] = {"request": request_to_dict(request), "deltas": deltas}
                    if error is not None:
                        entry["error"] = error
                    elif not complete:
                        entry["incomplete"] = True
                    line = json.dumps(entry, ensure_ascii=False) + "\n"
                    async with self._lock:
                        await anyio.to_thread.run_sync(self._append, line)

    def _append(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = line.encode("utf-8")
        # One write to a file opened for appending: lines from concurrent recordings (even other Recording
        # objects or processes on the same file) land whole, never interleaved.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, data)
            while written < len(data):  # only on a full disk or a signal; finish the line regardless
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        return f"Recording({self.inner!r}, {str(self.path)!r})"


@attrs.frozen
class _Exchange:
    line: int
    request: dict[str, Any]
    key: str
    deltas: tuple[Delta, ...]
    error: dict[str, Any] | None
    incomplete: bool


def _key(request: dict[str, Any]) -> str:
    try:
        return json.dumps(request, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON data, so equal to nothing recorded; the slow compare says why
        return ""


def _load(path: Path, number: int, line: str) -> _Exchange:
    where = f"{path}:{number}"
    try:
        entry = json.loads(line)
    except ValueError as exc:
        raise UsageError(f"{where}: not valid JSON: {exc}") from None
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: an exchange must be a JSON object with 'request' and 'deltas'")
    missing = [key for key in ("request", "deltas") if key not in entry]
    if missing:
        raise UsageError(f"{where}: an exchange needs 'request' and 'deltas'; missing {', '.join(missing)}")
    request, deltas, error = entry["request"], entry["deltas"], entry.get("error")
    if not isinstance(request, dict):
        raise UsageError(f"{where}: 'request' must be an object")
    if not isinstance(deltas, list):
        raise UsageError(f"{where}: 'deltas' must be a list")
    status = error.get("status") if isinstance(error, dict) else None
    if error is not None and not (isinstance(error, dict) and isinstance(error.get("type", ""), str)
                                  and (status is None or (isinstance(status, int) and not isinstance(status, bool)))):
        raise UsageError(f"{where}: 'error' must be an object with a string 'type' and an integer 'status'")
    turns = request.get("turns")
    if isinstance(turns, list):  # cassettes written before meta was left out still replay
        request = {**request, "turns": [
            {k: v for k, v in t.items() if k != "meta"} if isinstance(t, dict) else t for t in turns]}
    parsed = tuple(delta_from_dict(d, where=f"{where}, delta {i}") for i, d in enumerate(deltas))
    return _Exchange(number, request, _key(request), parsed, error, bool(entry.get("incomplete")))


class Replay:
    """Serves the exchanges of the cassette at ``path``, and fails loudly on anything unexpected.

    Each request gets the first unused exchange recorded for an equal request, so a run that makes its
    requests in the recorded order gets the exchanges in order, and concurrent requests (whose exchanges
    were written in the order they finished) still find theirs. A request no unused exchange matches raises
    ``CassetteMismatch`` naming the first field that differs from the next unused exchange, or saying that
    every exchange was used. A recorded error is raised again as the recorded ``ProviderError`` subclass.
    ``info.choices`` is true when the cassette holds a request for several choices (``Options.n``), and
    ``info.model`` is the model of the first recorded request that names one.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise UsageError(f"no cassette at {str(self.path)!r}; record one with provider.Recording") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the cassette {str(self.path)!r}: {exc}") from None
        self._exchanges = tuple(_load(self.path, number, line)
                                for number, line in enumerate(lines, 1) if line.strip())
        self._unused = list(range(len(self._exchanges)))
        self._served = 0
        # Several choices per request can be replayed exactly when they were recorded: a run that asked for
        # them of a provider that could not return them made separate requests, and must again.
        model = next((e.request.get("options", {}).get("model") for e in self._exchanges
                      if isinstance(e.request.get("options"), dict) and e.request["options"].get("model")), None)
        self.info = ProviderInfo(model=model, choices=any(_choices(e.request) for e in self._exchanges))

    @property
    def remaining(self) -> int:
        """How many recorded exchanges have not been served yet."""
        return len(self._unused)

    def stream(self, request: Request) -> DeltaStream:
        return self._play(request)

    def _claim(self, request: Request) -> _Exchange:
        # No await in here: claiming is atomic, so concurrent streams never get the same exchange.
        number = self._served + 1
        if not self._unused:
            raise CassetteMismatch(f"the cassette {self.path} holds {len(self._exchanges)} exchanges and all were "
                                   f"used; request {number} was not recorded")
        got = request_to_dict(request)
        key = _key(got)
        found = next((i for i in self._unused if key and self._exchanges[i].key == key), None)
        if found is None:  # equal but spelt differently in JSON (1 and 1.0)
            found = next((i for i in self._unused
                          if _first_difference(self._exchanges[i].request, got) is None), None)
        if found is None:
            nearest = self._exchanges[self._unused[0]]
            where = _first_difference(nearest.request, got)
            raise CassetteMismatch(f"request {number} does not match the cassette {self.path} (next unused "
                                   f"exchange on line {nearest.line}): {where}")
        self._unused.remove(found)
        self._served = number
        return self._exchanges[found]

    async def _play(self, request: Request) -> AsyncGenerator[Delta, None]:
        exchange = self._claim(request)
        for delta in exchange.deltas:
            yield delta
        await anyio.lowlevel.checkpoint()
        if exchange.error is not None:
            raise _error_from_dict(exchange.error)
        if exchange.incomplete:
            raise CassetteMismatch(
                f"the exchange on line {exchange.line} of {self.path} was cut short when it was recorded (the "
                f"consumer stopped reading after {len(exchange.deltas)} deltas); this replay read past that point")

    def __repr__(self) -> str:
        return f"Replay({str(self.path)!r}, remaining={self.remaining})"


def _choices(request: dict[str, Any]) -> bool:
    options = request.get("options")
    n = options.get("n") if isinstance(options, dict) else None
    return isinstance(n, int) and not isinstance(n, bool) and n > 1


def _first_difference(recorded: Any, got: Any, path: str = "request") -> str | None:
    numbers = (int, float)
    if type(recorded) is not type(got) and not (
        isinstance(recorded, numbers) and isinstance(got, numbers)
        and not isinstance(recorded, bool) and not isinstance(got, bool)
    ):
        return f"at {path}: recorded {_short(recorded)}, got {_short(got)}"
    if isinstance(recorded, dict):
        # In the recorded order (turns, tools, options; a part's type first), then keys only ``got`` has.
        for key in [*recorded, *(k for k in got if k not in recorded)]:
            if key not in got:
                return f"at {path}.{key}: recorded {_short(recorded[key])}, missing now"
            if key not in recorded:
                return f"at {path}.{key}: not recorded, now {_short(got[key])}"
            found = _first_difference(recorded[key], got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list):
        for i, (a, b) in enumerate(zip(recorded, got)):
            found = _first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(recorded) != len(got):
            return f"at {path}: recorded {len(recorded)} items, got {len(got)}"
        return None
    return None if recorded == got else f"at {path}: recorded {_short(recorded)}, got {_short(got)}"


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
