"""Checkpoints: where a search or a plan saves its progress as JSON, so that a run stopped by its budget, an
interrupt or a crash goes on where it stopped when the same pattern (or a new instance, in a new process) runs
on the same conversation again."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import anyio

from loop import State, UsageError

_KEY = re.compile(r"[A-Za-z0-9_.-]{1,200}")


@runtime_checkable
class Checkpoints(Protocol):
    """Saved progress by key: ``save`` replaces what the key held, ``load`` gives it back (``None`` when there is
    none), ``drop`` forgets it (a finished run drops its checkpoint)."""

    async def save(self, key: str, data: Mapping[str, Any]) -> None: ...

    async def load(self, key: str) -> Mapping[str, Any] | None: ...

    async def drop(self, key: str) -> None: ...


def checkpoint_key(pattern: str, state: State) -> str:
    """The key a run of ``pattern`` (its name and settings, e.g. its ``repr``) on ``state`` saves under: the
    same pattern run again on the same conversation finds its checkpoint; any other run does not."""
    digest = hashlib.sha256()
    digest.update(pattern.encode())
    digest.update(b"\0")
    digest.update(state.without_outcome().to_json().encode())
    return digest.hexdigest()[:32]


class MemoryCheckpoints:
    """Checkpoints kept in this process (for tests, and for resuming after an interrupt in the same process)."""

    __slots__ = ("_saved",)

    def __init__(self) -> None:
        self._saved: dict[str, str] = {}

    async def save(self, key: str, data: Mapping[str, Any]) -> None:
        self._saved[_check_key(key)] = json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    async def load(self, key: str) -> Mapping[str, Any] | None:
        text = self._saved.get(_check_key(key))
        loaded: Mapping[str, Any] | None = None if text is None else json.loads(text)
        return loaded

    async def drop(self, key: str) -> None:
        self._saved.pop(_check_key(key), None)

    def __len__(self) -> int:
        return len(self._saved)


class FileCheckpoints:
    """Checkpoints as JSON files in ``directory`` (created when missing, readable by its owner only), one per key.
    A save writes a new file and renames it over the old one, so a crash mid-save leaves the previous checkpoint
    whole."""

    __slots__ = ("directory",)

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = pathlib.Path(directory)

    def _path(self, key: str) -> pathlib.Path:
        return self.directory / f"{_check_key(key)}.json"

    async def save(self, key: str, data: Mapping[str, Any]) -> None:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        await anyio.to_thread.run_sync(self._write, self._path(key), text)

    def _write(self, path: pathlib.Path, text: str) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)

    async def load(self, key: str) -> Mapping[str, Any] | None:
        path = self._path(key)
        try:
            text = await anyio.to_thread.run_sync(path.read_text, "utf-8")
        except FileNotFoundError:
            return None
        try:
            loaded: Mapping[str, Any] = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"the checkpoint {path} is not valid JSON ({exc}); delete it to start afresh") from None
        return loaded

    async def drop(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"FileCheckpoints({str(self.directory)!r})"


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise UsageError(f"a checkpoint key is 1 to 200 letters, digits, '.', '_' or '-', got {key!r}")
    return key
