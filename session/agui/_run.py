"""One AG-UI run: a ``RunAgentInput``'s message (or its approval decisions) run in the thread's session, answered
as a stream of AG-UI events (``_translate``), and stopped when its client leaves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

import anyio
import anyio.abc
import anyio.lowlevel
from ag_ui.core import BaseEvent
from ag_ui.encoder import EventEncoder

from cognitive import GuardrailTripped, left_open
from loop import Caller, Decision, Part, State, Subscription, awaiting_approval, tracing
from session._followed import Followed
from session._problem import Problem
from session._session import Session
from session.agui._input import RunRequest
from session.agui._translate import Translator
from session.openai._answer import failure

if TYPE_CHECKING:
    from session.agui._app import _Endpoint

_log = tracing.logger("session.agui")
_ENCODER = EventEncoder()
SHUTTING_DOWN = "The server is shutting down; the run was stopped before it finished. Run it again once the server " \
                "is back."


class _Message(Followed):
    """The run's message sent to the thread's session, followed through the session's events to its outcome."""

    def __init__(self, session: Session, message: Union[str, tuple[Part, ...], None],
                 decisions: list[Decision] | None, endpoint: _Endpoint, request: RunRequest, caller: Caller) -> None:
        super().__init__()
        self.session = session
        self.message = message
        self.decisions = decisions
        self.endpoint = endpoint
        self.request = request
        self.caller = caller
        self.events: Subscription | None = None
        self.state: State | None = None
        self.error: Exception | None = None
        self.refused = False  # the session did not take the message: nothing ran
        self.done = anyio.Event()

    async def __call__(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        # Subscribing and sending with no checkpoint between makes this message's MessageQueued the first event the
        # subscription holds; a message the session refuses publishes nothing before it raises.
        bus = self.session.events
        with bus.subscribe(buffer=None, stamped=True) as self.events, bus.subscribe(buffer=1) as taken:
            task_status.started()
            try:
                if self.decisions is not None:
                    self.state = await self.session.decide(self.decisions, caller=self.caller)
                else:
                    assert self.message is not None  # parse_input refuses an input with neither
                    self.state = await self.session.ask(self.message, tools=self.request.tools, caller=self.caller,
                                                        approver=self.endpoint.approver)
            except Exception as exc:
                self.error = exc
                self.refused = not taken.drain()
            finally:
                self.done.set()

    def catch_up(self) -> None:
        assert self.events is not None  # set by the run
        for stamped in self.events.drain():
            self.observe(stamped.event)


class Run:
    """The ASGI answer to one ``POST /agui``: runs the message and streams the run as AG-UI events. A client that
    leaves before the run ends stops it (its message is interrupted if it is running; one still queued behind
    another run of the thread runs later)."""

    def __init__(self, endpoint: _Endpoint, session: Session, request: RunRequest, *,
                 message: Union[str, tuple[Part, ...], None], decisions: list[Decision] | None,
                 caller: Caller) -> None:
        self.endpoint = endpoint
        self.session = session
        self.request = request
        self.message = _Message(session, message, decisions, endpoint, request, caller)
        self.translator = Translator(request.thread_id, request.run_id, request.input.messages)
        self.finished = False  # the whole stream went out
        self.client_gone = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        run = self.message
        async with anyio.create_task_group() as group:
            await group.start(run)
            if run.refused and run.error is not None:  # answered with a status: nothing was sent yet
                await self._refusal(run.error).response()(scope, receive, send)
                return
            async with anyio.create_task_group() as streaming:
                streaming.start_soon(self._watch, receive, streaming.cancel_scope)
                await self._stream(send, streaming.cancel_scope)
                streaming.cancel_scope.cancel()
            if self.client_gone and not run.done.is_set():
                await self._left(group.cancel_scope)

    def _refusal(self, error: Exception) -> Problem:
        if self.endpoint.manager.stopping:
            return Problem(503, "server_shutting_down", SHUTTING_DOWN)
        answer = failure(error)
        return Problem(answer.status, answer.code or "run_refused", answer.message, answer.headers)

    async def _watch(self, receive: Any, scope: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.finished:
            self.client_gone = True
            scope.cancel()

    async def _left(self, waiting: anyio.CancelScope) -> None:
        """The client left before the run ended: its message is stopped if it runs, else no longer waited for."""
        run = self.message
        run.catch_up()  # so ``running`` is true now, not when last read
        _log.info("AG-UI client left; stopping its run", session=self.session.id, run=self.request.run_id)
        if run.running:
            self.session.interrupt(drop_queued=False)
        else:
            waiting.cancel()  # queued behind another run of the thread: it runs later
        with anyio.CancelScope(shield=True):
            await run.done.wait()  # the interrupt ends the message at once; its open calls are answered

    async def _stream(self, send: Any, scope: anyio.CancelScope) -> None:
        async def emit(data: bytes, *, more: bool = True) -> None:
            try:
                await send({"type": "http.response.body", "body": data, "more_body": more})
            except OSError:  # servers on ASGI spec 2.4 report a gone client this way
                self.client_gone = True
                scope.cancel()
                await anyio.lowlevel.checkpoint()

        async def events(out: list[BaseEvent]) -> None:
            if out:
                await emit("".join(_ENCODER.encode(e) for e in out).encode())

        headers = [(b"content-type", _ENCODER.get_content_type().encode()), (b"cache-control", b"no-cache"),
                   (b"x-accel-buffering", b"no")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        translator, run = self.translator, self.message
        await events(translator.started())
        subscription = run.events
        assert subscription is not None  # set by the run before it was started
        while not run.ended:
            with anyio.move_on_after(self.endpoint.keepalive) as quiet:
                try:
                    stamped = await subscription.__anext__()
                except StopAsyncIteration:
                    break
            if quiet.cancelled_caught:  # a long tool call: tell proxies the stream is alive
                await emit(b": keep-alive\n\n")
            elif run.observe(stamped.event):
                await events(translator.on(stamped))
        await run.done.wait()
        self.finished = True
        await events(translator.close() + self._ending())
        await emit(b"", more=False)

    def _ending(self) -> list[BaseEvent]:
        """The events that end the run: the conversation as it now stands, then how the run ended."""
        run, translator = self.message, self.translator
        state = run.state
        if run.error is not None or state is None:
            error = run.error if run.error is not None else RuntimeError("the run did not finish")
            snapshot = translator.snapshot(self.session.state.turns)
            if state is None and self.endpoint.manager.stopping:
                return snapshot + translator.error(SHUTTING_DOWN, "server_shutting_down")
            if isinstance(error, GuardrailTripped):
                _log.info("AG-UI run stopped by a guardrail", session=self.session.id, check=error.check)
                return snapshot + translator.error(error.notice, "guardrail")
            _log.warning("AG-UI run failed", session=self.session.id, error=repr(error))
            answer = failure(error)
            return snapshot + translator.error(answer.message, answer.code or "run_failed")
        snapshot = translator.snapshot(state.turns)
        waiting = awaiting_approval(state)
        if waiting:
            return snapshot + translator.interrupted(waiting, self.session.approvals.deadline(state),
                                                     {"status": "pending", "reason": "tool calls wait for approval"})
        if left_open(state):
            return snapshot + translator.finished({"status": "pending", "reason": "tool calls left for the client"},
                                                  pending=[c.id for c in state.pending_calls])
        outcome = state.outcome
        status = "ok" if outcome is None else outcome.status
        reason = "" if outcome is None else outcome.reason
        if status == "failed":
            return snapshot + translator.error(f"The agent run failed: {reason or 'no reason given'}", "run_failed")
        result: dict[str, Any] = {"status": status, "answer": state.answer}
        if status != "ok":
            result["reason"] = reason or "the run stopped early"
        return snapshot + translator.finished(result)
