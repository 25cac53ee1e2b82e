"""One chat completion: a request's message run in a session, answered as a ``chat.completion`` or as a stream of
``chat.completion.chunk`` events (the formats are described in ``session.openai._app``), and stopped when its
client leaves."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
from starlette.responses import Response

from cognitive import GuardrailTripped
from loop import Approver, Caller, Role, State, Subscription, Turn, tracing
from session._followed import Followed
from session._serving import json_text
from session._session import Session
from session.openai._answer import Answer, Deltas, degraded_line, failure, not_ok, shutting_down
from session.openai._errors import OpenAIError, answer_client_closed
from session.openai._replay import Entry
from session.openai._wire import Wire
from session.openai._request import ChatRequest

if TYPE_CHECKING:
    from session.openai._app import _Endpoint

SESSION_HEADER = "x-session-id"
_WORKER_STOP_WAIT = 10.0  # how long a cancelled request waits for its fresh session's worker to stop
_log = tracing.logger("session.openai")


class _Run(Followed):
    """A request's message sent to a session, followed through the session's events to its outcome."""

    def __init__(self, session: Session, chat: ChatRequest, caller: Caller | None = None,
                 approver: Approver | None = None) -> None:
        super().__init__()
        self.session = session
        self.chat = chat
        self.caller = caller  # who sent it: the request's token
        self.approver = approver  # decides the run's calls that need approval (the endpoint's policy)
        self.events: Subscription | None = None
        self.state: State | None = None
        self.error: Exception | None = None
        self.refused = False  # the session did not take the message (closed, or its queue full): nothing ran
        self.done = anyio.Event()
        self.over = False  # the message itself ended (not just the wait for it): the session wrote it all

    async def __call__(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        # Subscribing and sending with no checkpoint between makes this message's MessageQueued the first event
        # the subscription holds: that is how a caller of ``ask`` learns which events are its message's.
        # ``taken`` tells a refusal from a run that failed however soon: a message the session takes is announced
        # (``MessageQueued``) as it is queued, and one it refuses publishes nothing before ``ask`` raises.
        chat = self.chat
        bus = self.session.events
        with bus.subscribe(buffer=None, main_line=True) as self.events, bus.subscribe(buffer=1) as taken:
            task_status.started()
            try:
                self.state = await self.session.ask(chat.message, output=chat.output, tools=chat.tools,
                                                    options=chat.options, caller=self.caller,
                                                    approver=self.approver)
                self.over = True
            except Exception as exc:
                self.error = exc
                self.refused = not taken.drain()
                self.over = True
            finally:
                self.done.set()

    def catch_up(self) -> None:
        """Observe every event received so far."""
        assert self.events is not None  # set by the run
        for event in self.events.drain():
            self.observe(event)

    def turns(self, state: State) -> list[Turn]:
        """The turns of ``state`` after this message's own turn: what this request added."""
        added = []
        for turn in state.reversed():
            if turn.meta.get("message_id") == self.message_id and turn.role in (Role.USER, Role.TOOL):
                break
            added.append(turn)
        added.reverse()
        return added


class Completion:
    """One chat completion: runs the request's message in its session and answers with the outcome, as one
    JSON response (``respond``) or, called as an ASGI app, as a stream of chunks.

    A client that leaves before the answer stops the run (see ``_left``). With an idempotency ``entry``, the
    answer is kept there for retries, and a client that leaves gets ``grace`` seconds for a retry to take the
    run over before it is stopped."""

    def __init__(self, endpoint: _Endpoint, session: Session, chat: ChatRequest, wire: Wire, *, fresh: bool,
                 entry: Entry | None = None, caller: Caller | None = None,
                 headers: dict[str, str] | None = None) -> None:
        # ``fresh``: a session for this request alone, closed (and forgotten, unless kept) once it is answered.
        # ``wire`` writes the answer in the request's API; ``headers`` go with it (the session it was kept in).
        self.endpoint = endpoint
        self.session = session
        self.chat = chat
        self.wire = wire
        self.fresh = fresh
        self.entry = entry
        self.run = _Run(session, chat, caller, endpoint.approver)
        self.finished = False  # the whole answer went out
        self.client_gone = False
        self.abandoned = False  # the client left and the run was stopped for it
        self.result: Answer | OpenAIError | None = None
        self.headers = dict(headers or {})
        self.client_tools = frozenset(spec.name for spec in chat.tools)

    async def respond(self, receive: Any) -> Any:
        """Run the message and answer with a ``chat.completion`` object, or the error in OpenAI's format."""
        try:
            async with anyio.create_task_group() as group:
                await group.start(self.run)
                async with anyio.create_task_group() as waiting:
                    waiting.start_soon(self._watch, receive, waiting.cancel_scope)
                    await self.run.done.wait()
                    waiting.cancel_scope.cancel()
                if self.client_gone and not self.run.done.is_set():
                    await self._left(group.cancel_scope)
        finally:
            with anyio.CancelScope(shield=True):
                await self._release()
        result = await self._settle()
        if self.client_gone:
            return answer_client_closed
        if isinstance(result, OpenAIError):
            return result.response()
        return Response(json_text(self.wire.body(result), separators=(",", ":")), headers=self.headers,
                        media_type="application/json")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            async with anyio.create_task_group() as group:
                await group.start(self.run)
                if self.run.refused and self.run.error is not None:  # answered with a status: nothing was sent
                    refusal = shutting_down() if self._stopping() else self._fail(self.run.error)
                    await refusal.response()(scope, receive, send)
                    return
                async with anyio.create_task_group() as streaming:
                    streaming.start_soon(self._watch, receive, streaming.cancel_scope)
                    await self._stream(send, streaming.cancel_scope)
                    streaming.cancel_scope.cancel()
                if self.client_gone and not self.run.done.is_set():
                    await self._left(group.cancel_scope)
        finally:
            with anyio.CancelScope(shield=True):
                await self._release()
        await self._settle()

    async def _watch(self, receive: Any, scope: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.finished:
            self.client_gone = True
            scope.cancel()

    async def _left(self, waiting: anyio.CancelScope) -> None:
        """The client left before the answer. With an idempotency key, a retry may take the run over within the
        grace period (or the run may end meanwhile): it then goes on. Otherwise this request's message is
        stopped, or no longer waited for."""
        entry = self.entry
        if entry is not None:
            with anyio.move_on_after(self.endpoint.retry_grace):
                await _first(entry.attached, self.run.done)
            if entry.attached.is_set() or self.run.done.is_set():
                await self.run.done.wait()
                return
        self.run.catch_up()  # so ``running`` is true now, not when last read
        self.abandoned = True
        if self.fresh:
            self.session.interrupt()
        elif self.run.running:
            self.session.interrupt(drop_queued=False)
        else:
            waiting.cancel()  # queued behind another message of a shared session; it runs later
        with anyio.CancelScope(shield=True):
            await self.run.done.wait()  # the interrupt ends the message at once; its open calls are answered

    async def _settle(self) -> Answer | OpenAIError:
        """The request's result, kept for retries when it has an idempotency key."""
        if self.result is not None:
            return self.result
        run = self.run
        run.catch_up()  # learns the message's id, which marks the turns this request added
        result: Answer | OpenAIError
        if run.state is None and self._stopping():
            result = shutting_down()
        elif isinstance(run.error, GuardrailTripped):  # answered as OpenAI answers what its filter stops
            _log.info("the run was stopped by a guardrail", session=self.session.id, check=run.error.check,
                      stage=run.error.stage)
            result = Answer.blocked(run.error, run.turns(run.error.state))
        elif run.error is not None or run.state is None:
            result = self._fail(run.error if run.error is not None else RuntimeError("the run did not finish"))
        else:
            answer = functools.partial(Answer.of, run.state, run.turns(run.state), output=self.chat.output,
                                       client_tools=self.client_tools, stop=self.chat.stop)
            try:
                if self.chat.output is None:
                    result = answer()
                else:  # the typed value is checked against the client's schema: as WithOutput does, off the loop
                    with anyio.CancelScope(shield=True):  # kept for retries: it must be had, even when cancelled
                        result = await anyio.to_thread.run_sync(answer)
            except Exception as exc:  # a typed answer without its value: the run's result is unusable
                result = self._fail(exc)
        if self.entry is not None:
            if self.abandoned or (isinstance(result, OpenAIError) and result.status in (429, 503)):
                self.endpoint.replays.drop(self.entry)  # stopped, or never accepted: a retry runs afresh
            else:
                self.endpoint.replays.finish(self.entry, result, id=self.wire.id, created=self.wire.created,
                                             headers=self.headers)
        self.result = result
        return result

    async def _stream(self, send: Any, scope: anyio.CancelScope) -> None:
        async def emit(message: dict[str, Any]) -> None:
            try:
                await send(message)
            except OSError:  # servers on ASGI spec 2.4 report a gone client this way
                self.client_gone = True
                scope.cancel()
                await anyio.lowlevel.checkpoint()

        def body(data: bytes, *, more: bool = True) -> dict[str, Any]:
            return {"type": "http.response.body", "body": data, "more_body": more}

        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                   (b"x-accel-buffering", b"no")] + [(k.encode(), v.encode()) for k, v in self.headers.items()]
        await emit({"type": "http.response.start", "status": 200, "headers": headers})
        for data in self.wire.opening():
            await emit(body(data))
        deltas = Deltas(live=self._live(), stop=self.chat.stop, client_tools=self.client_tools)
        events = self.run.events
        assert events is not None  # set by the run before it was started
        while not self.run.ended:
            with anyio.move_on_after(self.endpoint.keepalive) as quiet:
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    break
            if quiet.cancelled_caught:  # a long tool call: tell proxies the stream is alive
                await emit(body(b": keep-alive\n\n"))
            elif self.run.observe(event):
                for delta in deltas.of(event):
                    for data in self.wire.delta(delta):
                        await emit(body(data))
        await self.run.done.wait()
        result = await self._settle()
        if isinstance(result, OpenAIError):
            out = self.wire.failing(result)
        else:
            tail: list[dict[str, str]] = []
            state = self.run.state
            if result.finish_reason != "content_filter":  # a guardrail's refusal has no content
                assert state is not None  # a run with an answer has a state
                tail = deltas.end(result.message["content"], state.answer)
                if not_ok(state):
                    tail.append(deltas.line(degraded_line(state)))
            out = self.wire.closing(result, tail)
        self.finished = True
        for data in out:
            await emit(body(data))
        await emit(body(b"", more=False))

    def _live(self) -> bool:
        """Whether text may stream as the model writes it: it is a text answer and no turn can call a tool (the
        agent has none and the client sent none, or ``tool_choice`` is "none"), so all text is answer text."""
        if self.chat.output is not None:
            return False
        options = self.chat.options
        if options is not None and options.tool_choice == "none":
            return True
        return not self.chat.tools and not self.endpoint.agent_tools()

    def _stopping(self) -> bool:
        return self.endpoint.manager.stopping

    def _fail(self, exc: Exception) -> OpenAIError:
        _log.warning("the run failed", session=self.session.id, error=repr(exc))
        return failure(exc)

    async def _release(self) -> None:
        if self.fresh:
            if self.run.over:
                await self.endpoint.manager.close(self.session.id)
            else:
                # The wait for the message was cut short (this request was cancelled), not the message: the
                # worker still writes it (its open calls answered "cancelled"). Deleting the conversation before
                # it is done would leave the worker appending at an index the store no longer holds.
                with anyio.move_on_after(_WORKER_STOP_WAIT):
                    await self.endpoint.manager.close(self.session.id, wait=True)
                    self.run.over = True
            if self.run.over:  # the worker is done with it, so nothing more will be written
                await self.endpoint.forget(self.session.id)


async def _first(*events: anyio.Event) -> None:
    """Wait until any of ``events`` is set."""
    async with anyio.create_task_group() as group:
        async def wait(event: anyio.Event) -> None:
            await event.wait()
            group.cancel_scope.cancel()

        for event in events:
            group.start_soon(wait, event)
