"""A plain-text progress report for a benchmark run: one line redrawn in place on a terminal, one line per
pattern otherwise."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from cognitive.bench._run import PatternResult

_WIDTH = 24  # characters of the bar


class Progress:
    """Reports a benchmark's progress on ``stream`` (stderr, say). ``live`` (default: whether ``stream`` is a
    terminal) redraws one line with ``\\r`` as each task finishes; otherwise one line is written per pattern,
    when it is done or skipped."""

    __slots__ = ("stream", "live", "_name", "_total", "_done", "_started")

    def __init__(self, stream: TextIO, *, live: bool | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self._name = ""
        self._total = 0
        self._done = 0
        self._started = 0.0

    def start(self, name: str, total: int) -> None:
        self._name, self._total, self._done, self._started = name, total, 0, time.perf_counter()
        self._draw()

    def advance(self) -> None:
        self._done += 1
        self._draw()

    def finish(self, result: PatternResult) -> None:
        took = time.perf_counter() - self._started
        times = f" x{result.repeats}" if result.repeats > 1 else ""
        line = (f"{result.name:<22} {result.tasks} tasks{times}  accuracy {result.accuracy:.2f}  "
                f"degraded {result.degraded_rate:.2f}  {result.mean_tokens:,.0f} tokens/task  {took:.1f} s")
        self._line(line)

    def skip(self, name: str, reason: str) -> None:
        self._line(f"{name:<22} skipped: {reason}")

    def _draw(self) -> None:
        if not self.live or not self._total:
            return
        filled = _WIDTH * self._done // self._total
        bar = "#" * filled + "." * (_WIDTH - filled)
        self.stream.write(f"\r{self._name:<22} [{bar}] {self._done}/{self._total}")
        self.stream.flush()

    def _line(self, text: str) -> None:
        # On a terminal the finished line replaces the bar (padded to cover it); elsewhere it is simply written.
        self.stream.write(f"\r{text:<{_WIDTH + 40}}\n" if self.live else f"{text}\n")
        self.stream.flush()
