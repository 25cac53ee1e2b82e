"""``StdioConduit``: a terminal chat with one session.

Text streams as it arrives; tool calls, tool results and verification reports show as they happen. Ctrl-C
interrupts the turn in progress; a second Ctrl-C (or Ctrl-C with nothing running) exits, as does end of input.

Each message runs for the person at the terminal (``local_caller``). Tool calls that need approval are asked about
one by one, ``y`` approving and anything else denying, read from the same input as the chat: those the
conversation keeps open once the message that made them has finished (the answer resumes the run, and the prompt
comes back when it ends), those a running program waits on (a branch's, a code-action program's) at once.
"""

from __future__ import annotations

import getpass
import json
import signal
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
import attrs

from loop import (CANCELLED, Caller, Decision, Role, Stamped, TextDelta, ToolCall, ToolFinished, ToolStarted,
                  TurnCompleted, TurnKind, UsageError)
from session._events import (ApprovalAnswered, ApprovalRequested, Interrupted, MessageFailed, MessageFinished)
from session._manager import Manager
from session._session import Session

PROMPT = "you> "
DENIED_HERE = "denied at the terminal"
ARGUMENTS_SHOWN = 200  # characters of a call's arguments an approval prompt shows
READ_AHEAD = 16  # lines read from the input before the chat takes them


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
        tripped = event.guardrail
        if tripped is not None:
            reason = " ".join(tripped.get("reason", "").split())  # a check's report, on one line
            return f"\n  [blocked by guardrail {tripped.get('check', '?')} ({tripped.get('stage', '?')})] {reason}\n"
        return f"\n  [error] {event.kind}: {event.error}\n"
    if isinstance(event, Interrupted):
        return "\n  [interrupted]\n"
    if isinstance(event, ApprovalAnswered):
        if event.approved:
            return f"  ✓ approved {event.name}\n"
        return f"  ✗ denied {event.name}" + (f": {event.reason}\n" if event.reason else "\n")
    return None


def local_caller() -> Caller:
    """Who is at this terminal: the local user's name (``"local"`` when the system cannot say), in the
    namespace ``"local"``."""
    try:
        name = getpass.getuser()
    except Exception:  # no user name in the environment nor the password database (a bare container)
        name = ""
    return Caller(name or "local", "local")


def _arguments(call: ToolCall) -> str:
    """A call's arguments as JSON on one line (as the model wrote them when they do not parse), cut to
    ``ARGUMENTS_SHOWN`` characters."""
    try:
        text = json.dumps(json.loads(call.arguments), ensure_ascii=False)
    except ValueError:
        text = " ".join(call.arguments.split())
    return text if len(text) <= ARGUMENTS_SHOWN else text[:ARGUMENTS_SHOWN] + "…"


@attrs.frozen
class _Ended:
    """The writer has shown the end of message ``message_id`` (``None``: an interrupt with nothing running)."""

    message_id: str | None


class _Inbox:
    """What the chat waits on: the lines typed, read by a daemon thread so that a blocked read never keeps the
    process alive, and notices from the task writing events (a message ended, approval asked or answered).

    Both wait in queues the chat takes from when it chooses, so waiting for one thing never loses another: a
    line typed while a message runs stays for the next prompt, an approval asked while the chat reads a line is
    seen at once."""

    def __init__(self, stream: TextIO) -> None:
        self.lines: deque[str] = deque()
        self.notices: deque[Any] = deque()
        self.ended = False  # the input ended (the lines queued may still be taken)
        self.closed = False  # the chat is over: the reader stops
        self._changed = anyio.Event()
        self._room = threading.Semaphore(READ_AHEAD)
        token = anyio.lowlevel.current_token()

        def pump() -> None:
            try:
                while True:
                    self._room.acquire()
                    if self.closed:
                        return
                    line = stream.readline()
                    anyio.from_thread.run_sync(self._typed, line or None, token=token)
                    if not line:
                        return
            except (RuntimeError, ValueError, OSError):
                pass  # the chat ended first, or the stream was closed: nobody is listening any more

        threading.Thread(target=pump, name="stdin reader", daemon=True).start()

    def _typed(self, line: str | None) -> None:
        if line is None:
            self.ended = True
        else:
            self.lines.append(line.rstrip("\n"))
        self._changed.set()

    def tell(self, notice: Any) -> None:
        self.notices.append(notice)
        self._changed.set()

    def take_line(self) -> str:
        self._room.release()
        return self.lines.popleft()

    def close(self) -> None:
        """Stop reading (a read under way still ends with its line, which nobody takes)."""
        self.closed = True
        self._room.release()

    async def changed(self) -> None:
        """Wait until a line or a notice comes (or the input ends)."""
        self._changed = event = anyio.Event()
        await event.wait()


class StdioConduit:
    """Chat with one session in a terminal (``session_id``: resume a stored conversation) as ``caller`` (by
    default ``local_caller()``, the local user)."""

    def __init__(
        self,
        *,
        session_id: str | None = None,
        input: TextIO | None = None,
        output: Callable[[str], Any] | None = None,
        handle_signals: bool = True,
        caller: Caller | None = None,
    ) -> None:
        if caller is not None and not isinstance(caller, Caller):
            raise UsageError(f"StdioConduit(caller=...) takes a loop.Caller, got {type(caller).__name__}")
        self.session_id = session_id
        self.caller = caller if caller is not None else local_caller()
        self._input = input or sys.stdin
        self._print = output or (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
        self._signals = handle_signals
        self._open = False  # a prompt waits for input on the line shown last
        self._quitting = False  # the input ended while approval was asked: quit once the run is over

    def _write(self, text: str) -> None:
        self._open = False
        self._print(text)

    def _ask_for_input(self, prompt: str) -> None:
        self._print(prompt)
        self._open = True

    async def serve(self, manager: Manager) -> None:
        session = await manager.open(self.session_id)
        self._write(f"session {session.id} — Ctrl-C interrupts a turn; at the prompt, Ctrl-C or Ctrl-D quits\n")
        # One task writes every event, in order; it tells the chat which messages it has shown the end of, so the
        # next prompt never comes before a message's last words (its answer, its error), and which approvals
        # were asked. Stamped, not main-line only: a branch's or a program's live request is shown too.
        inbox = _Inbox(self._input)
        try:
            async with anyio.create_task_group() as group:
                with session.events.subscribe(buffer=None, stamped=True) as events:
                    group.start_soon(self._show, events, inbox)
                    if self._signals:
                        group.start_soon(self._on_interrupt, session, group.cancel_scope)
                    await self._chat(session, inbox)
                group.cancel_scope.cancel()
        finally:
            inbox.close()

    # -- the chat --------------------------------------------------------------------------------------------

    async def _chat(self, session: Session, inbox: _Inbox) -> None:
        for request in session.pending_approvals():  # left waiting when the conversation was stored
            await self._settle(session, inbox, request)
        while not self._quitting:
            got = await self._next(inbox, PROMPT, lambda notice: isinstance(notice, ApprovalRequested), take=True)
            if got is None:
                break
            if isinstance(got, ApprovalRequested):  # a message this chat did not send asks
                if _still_waiting(session, got):
                    if self._open:
                        self._write("\n")
                    await self._settle(session, inbox, got)
            elif got.strip():
                await self._follow(session, inbox, session.send(got, caller=self.caller))
        if self._open:  # end the prompt's line
            self._write("\n")

    async def _next(self, inbox: _Inbox, prompt: str, stop: Callable[[Any], bool], *, take: bool) -> Any:
        """The next line typed after ``prompt`` (``None`` at end of input), unless a notice ``stop`` picks comes
        first: then that notice (taken with those before it, if ``take``). The prompt shows again when something
        was written over it."""
        while True:
            for index, notice in enumerate(inbox.notices):
                if stop(notice):
                    if take:
                        for _ in range(index + 1):
                            inbox.notices.popleft()
                    return notice
            if not self._open:
                self._ask_for_input(prompt)
            if inbox.lines:
                self._open = False  # a terminal echoes the line and its newline
                return inbox.take_line()
            if inbox.ended:
                return None
            await inbox.changed()

    async def _follow(self, session: Session, inbox: _Inbox, message_id: str | None) -> None:
        """Wait until message ``message_id`` has ended and shown its last words, answering the approvals it asks
        for; then those of the runs the answers resume, in turn."""
        while message_id is not None:
            kept: ApprovalRequested | None = None
            while True:
                while not inbox.notices:
                    await inbox.changed()
                notice = inbox.notices.popleft()
                if isinstance(notice, ApprovalRequested):
                    if notice.live:
                        await self._ask(session, inbox, notice)
                    else:
                        kept = notice  # asked once the message has ended
                elif isinstance(notice, _Ended) and notice.message_id in (message_id, None):
                    break
            message_id = None if kept is None else await self._ask(session, inbox, kept)

    async def _settle(self, session: Session, inbox: _Inbox, request: ApprovalRequested) -> None:
        await self._follow(session, inbox, await self._ask(session, inbox, request))

    async def _ask(self, session: Session, inbox: _Inbox, request: ApprovalRequested) -> str | None:
        """Ask about each call of ``request`` still waiting, and answer them: the id of the message that resumes
        the run for calls the conversation keeps, ``None`` otherwise. The questions stop when the calls no
        longer wait (answered elsewhere, out of time, their message ended)."""
        calls = _still_waiting(session, request)
        if not calls:
            return None
        ids = {call.id for call in calls}

        def moot(notice: Any) -> bool:
            if isinstance(notice, ApprovalAnswered):
                return notice.call_id in ids
            return request.live and isinstance(notice, _Ended) and notice.message_id == request.message_id

        many = f"{len(calls)} calls" if len(calls) > 1 else "a call"
        self._write(f"  [approval] {'a running program waits on' if request.live else 'the run stopped at'} "
                    f"{many} needing your approval\n")
        decisions: list[Decision] = []
        for call in calls:
            answer = await self._next(inbox, f"approve {call.name}({_arguments(call)})? [y/N] ", moot, take=False)
            if answer is None:  # end of input: the rest are denied, and the chat ends once the run has
                self._write("\n")
                self._quitting = True
                decisions.extend(Decision.deny(c.id, DENIED_HERE) for c in calls[len(decisions):])
                break
            if not isinstance(answer, str):
                return None  # the calls were answered elsewhere, or their run ended: shown by the writer
            yes = answer.strip().lower() in ("y", "yes")
            decisions.append(Decision.approve(call.id) if yes else Decision.deny(call.id, DENIED_HERE))
        now = {call.id for call in _still_waiting(session, request)}  # the time may have run out meanwhile
        decisions = [d for d in decisions if d.call_id in now]
        return session.approve(decisions, caller=self.caller) if decisions else None

    # -- the writer and the interrupt ---------------------------------------------------------------------------

    async def _show(self, events: AsyncIterator[Stamped], inbox: _Inbox) -> None:
        for_chat = (ApprovalRequested, ApprovalAnswered)
        async for stamped in events:
            event = stamped.event
            if not stamped.main and not isinstance(event, for_chat):
                continue  # a branch's, tool's or side task's own text
            text = _render(event)
            if text:
                if self._open and not text.startswith("\n"):  # a prompt waits on this line: start a new one
                    self._write("\n")
                self._write(text)
            if isinstance(event, (MessageFinished, MessageFailed, Interrupted)):
                inbox.tell(_Ended(event.message_id))
            elif isinstance(event, for_chat):
                inbox.tell(event)

    async def _on_interrupt(self, session: Session, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                if session.busy:
                    session.interrupt()
                else:
                    self._write("\nbye\n")
                    scope.cancel()
                    return


def _still_waiting(session: Session, request: ApprovalRequested) -> tuple[ToolCall, ...]:
    """The calls of ``request`` that still wait for approval."""
    waiting = {call.id for asked in session.pending_approvals() if asked.live == request.live
               for call in asked.calls}
    return tuple(call for call in request.calls if call.id in waiting)
