"""Cassettes: record a provider's request/response pairs once, replay them offline forever.

A cassette is a JSON Lines file, one exchange per line: ``{"request": ..., "deltas": [...]}``, or with
``"error"`` in place of the tail of ``deltas`` when the provider failed part-way.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from loop import (
    Delta,
    Finish,
    Options,
    Provider,
    ReasoningDelta,
    Request,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageDelta,
    UsageError,
    UseTool,
)
from loop.errors import ProviderError

_DELTAS: dict[str, type] = {"text": TextDelta, "reasoning": ReasoningDelta, "tool_call": ToolCallDelta,
                            "usage": UsageDelta, "finish": Finish}
_TAGS = {cls: tag for tag, cls in _DELTAS.items()}


class CassetteMismatch(UsageError):
    """Raised when a replayed request differs from the recorded one, or the cassette has no more exchanges."""


def request_to_dict(request: Request) -> dict[str, Any]:
    """``request`` as plain JSON data: what a cassette stores and compares."""
    options = {f.name: getattr(request.options, f.name) for f in attrs.fields(Options)}
    choice = options["tool_choice"]
    if isinstance(choice, UseTool):
        options["tool_choice"] = {"tool": choice.name}
    options["output_schema"] = dict(options["output_schema"]) if options["output_schema"] is not None else None
    options["stop"] = list(options["stop"]) if options["stop"] is not None else None
    return {
        "turns": [t.to_dict() for t in request.turns],
        "tools": [{"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
                  for t in request.tools],
        "options": {k: v for k, v in options.items() if v is not None},
    }


def delta_to_dict(delta: Delta) -> dict[str, Any]:
    data = attrs.asdict(delta)
    data["type"] = _TAGS[type(delta)]
    return data


def delta_from_dict(data: dict[str, Any], where: str) -> Delta:
    data = dict(data)
    cls = _DELTAS.get(data.pop("type", None))
    if cls is None:
        raise UsageError(f"{where}: unknown delta {data!r}")
    if cls is UsageDelta:
        return UsageDelta(Usage(**data["usage"]))
    try:
        return cls(**data)
    except TypeError as exc:
        raise UsageError(f"{where}: bad delta {data!r}: {exc}") from None


class Recording:
    """Passes requests to ``inner`` and appends each exchange to the cassette at ``path`` as it completes."""

    def __init__(self, inner: Provider, path: str | os.PathLike[str]) -> None:
        if not callable(getattr(inner, "stream", None)):
            raise UsageError(f"Recording wraps a provider (something with stream(request)), got {inner!r}")
        self.inner = inner
        self.path = Path(path)
        self._lock = anyio.Lock()

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        return self._stream(request)

    async def _stream(self, request: Request) -> AsyncIterator[Delta]:
        deltas: list[dict[str, Any]] = []
        error: dict[str, Any] | None = None
        try:
            async for delta in self.inner.stream(request):
                deltas.append(delta_to_dict(delta))
                yield delta
        except ProviderError as exc:
            error = {"type": type(exc).__name__, "message": str(exc), "status": exc.status}
            raise
        finally:
            entry = {"request": request_to_dict(request), "deltas": deltas}
            if error is not None:
                entry["error"] = error
            line = json.dumps(entry, ensure_ascii=False) + "\n"
            with anyio.CancelScope(shield=True):
                async with self._lock:
                    await anyio.to_thread.run_sync(self._append, line)

    def _append(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


class Replay:
    """Serves the exchanges of the cassette at ``path`` in order, and fails loudly on anything unexpected.

    Each request must equal the recorded one; a difference raises ``CassetteMismatch`` naming the first
    differing field. A recorded error is raised again as a ``ProviderError``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise UsageError(f"no cassette at {str(self.path)!r}; record one with provider.Recording") from None
        self._entries: list[dict[str, Any]] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError as exc:
                raise UsageError(f"{self.path}:{number}: not valid JSON: {exc}") from None
            if not isinstance(entry, dict) or "request" not in entry or "deltas" not in entry:
                raise UsageError(f"{self.path}:{number}: an exchange needs 'request' and 'deltas'")
            entry["deltas"] = [delta_from_dict(d, f"{self.path}:{number}") for d in entry["deltas"]]
            self._entries.append(entry)
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self._entries) - self._next

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        return self._play(request)

    async def _play(self, request: Request) -> AsyncIterator[Delta]:
        index = self._next
        if index >= len(self._entries):
            raise CassetteMismatch(f"the cassette {self.path} holds {len(self._entries)} exchanges and all were "
                                   f"used; request {index + 1} was not recorded")
        entry = self._entries[index]
        where = _first_difference(entry["request"], request_to_dict(request))
        if where is not None:
            raise CassetteMismatch(f"request {index + 1} does not match the cassette {self.path}: {where}")
        self._next = index + 1
        for delta in entry["deltas"]:
            yield delta
        await anyio.lowlevel.checkpoint()
        error = entry.get("error")
        if error is not None:
            raise ProviderError(f"recorded {error.get('type', 'error')}: {error.get('message', '')}",
                                status=error.get("status"))


def _first_difference(recorded: Any, got: Any, path: str = "request") -> str | None:
    if type(recorded) is not type(got) and not (isinstance(recorded, (int, float)) and isinstance(got, (int, float))):
        return f"at {path}: recorded {_short(recorded)}, got {_short(got)}"
    if isinstance(recorded, dict):
        for key in sorted(set(recorded) | set(got)):
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
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."

