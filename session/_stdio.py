"""``StdioConduit``: a terminal chat with one session.

Text streams as it arrives; tool calls, tool results and verification reports show as they happen. Ctrl-C
interrupts the turn in progress; a second Ctrl-C (or Ctrl-C with nothing running) exits, as does end of input.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from loop import CANCELLED, Role, TextDelta, ToolFinished, ToolStarted, TurnCompleted, TurnKind
from session._events import Interrupted, MessageFailed, MessageFinished
from session._manager import Manager
from session._session import Session

PROMPT = "you> "


def _render(event: Any) -> str | None:
    """What the terminal shows for one event; ``None`` for events it does not show."""
    if isinstance(event, TextDelta):
        return event.text
    if isinstance(event, ToolStarted):
        return f"\n  → {event.call.name}({event.call.arguments})\n"
    if isinstance(event, ToolFinished):
        mark = "✗" if event.result.is_error else "←"
        content = event.result.content if len(event.result.content) <= 300 else event.result.content[:300] + "…"
        return f"  {mark} {event.call.name}: {content}\n"
    if isinstance(event, TurnCompleted) and event.turn.role is Role.TOOL:
        # Calls cut short by an interrupt never finished, so they had no ToolFinished: show them here.
        cut = [r for r in event.turn.tool_results if r.is_error and r.content == f"error: {CANCELLED}"]
        return "".join(f"  ✗ {r.name}: cancelled\n" for r in cut) or None
    if isinstance(event, TurnCompleted) and event.turn.kind == TurnKind.VERIFICATION:
        return "\n  [verification]\n" + "".join(f"  {line}\n" for line in event.turn.text.splitlines()) + "\n"
    if isinstance(event, MessageFinished):
        note = f" [{event.status}: {event.reason}]" if not event.ok else ""
        return f"{note}\n"
    if isinstance(event, MessageFailed):
        return f"\n  [error] {event.kind}: {event.error}\n"
    if isinstance(event, Interrupted):
        return "\n  [interrupted]\n"
    return None


async def _lines(stream: TextIO) -> AsyncIterator[str]:
    """Lines of ``stream``, read by a daemon thread so that a blocked read never keeps the process alive."""
    send, receive = anyio.create_memory_object_stream[str](16)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        try:
            for line in iter(stream.readline, ""):
                anyio.from_thread.run(send.send, line, token=token)
            anyio.from_thread.run_sync(send.close, token=token)
        except (RuntimeError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the chat ended first; nobody is listening any more

    threading.Thread(target=pump, name="stdin reader", daemon=True).start()
    async with receive:
        async for line in receive:
            yield line.rstrip("\n")


class StdioConduit:
    """Chat with one session in a terminal (``session_id``: resume a stored conversation)."""

    def __init__(
        self,
        *,
        session_id: str | None = None,
        input: TextIO | None = None,
        output: Callable[[str], Any] | None = None,
        handle_signals: bool = True,
    ) -> None:
        self.session_id = session_id
        self._input = input or sys.stdin
        self._write = output or (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
        self._signals = handle_signals

    async def serve(self, manager: Manager) -> None:
        session = await manager.open(self.session_id)
        self._write(f"session {session.id} — Ctrl-C interrupts a turn; at the prompt, Ctrl-C or Ctrl-D quits\n")
        # One task writes every event, in order; it tells the chat which messages it has shown the end of, so the
        # next prompt never comes before a message's last words (its answer, its error).
        ended, endings = anyio.create_memory_object_stream[str | None](math.inf)
        async with anyio.create_task_group() as group, ended, endings:
            with session.events.subscribe(buffer=None, main_line=True) as events:
                group.start_soon(self._show, events, ended)
                if self._signals:
                    group.start_soon(self._on_interrupt, session, group.cancel_scope)
                await self._chat(session, endings)
            group.cancel_scope.cancel()

    async def _chat(self, session: Session, endings: MemoryObjectReceiveStream[str | None]) -> None:
        self._write(PROMPT)
        async for line in _lines(self._input):
            if line.strip():
                sent = session.send(line)
                async for message_id in endings:
                    if message_id == sent or message_id is None:  # None: an interrupt with nothing running
                        break
            self._write(PROMPT)
        self._write("\n")

    async def _show(self, events: AsyncIterator[Any], ended: MemoryObjectSendStream[str | None]) -> None:
        async for event in events:
            text = _render(event)
            if text:
                self._write(text)
            if isinstance(event, (MessageFinished, MessageFailed, Interrupted)):
                ended.send_nowait(event.message_id)

    async def _on_interrupt(self, session: Session, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                if session.busy:
                    session.interrupt()
                else:
                    self._write("\nbye\n")
                    scope.cancel()
                    return
