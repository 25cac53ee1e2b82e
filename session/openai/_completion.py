"""One chat completion: a user message run in a session, answered as a ``chat.completion`` or as a stream of
``chat.completion.chunk`` events (the formats are described in ``session.openai._app``)."""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
from starlette.responses import Response

from loop import (LoopError, Reasoning, ReasoningDelta, Role, State, Subscription, TextDelta, ToolCall, ToolFinished,
                  ToolResult, ToolStarted, Turn, TurnCompleted, TurnKind, TurnStarted, Usage, tracing)
from loop.errors import ProviderError
from session._events import MessageFailed, MessageFinished, MessageQueued, MessageStarted
from session._serving import json_text
from session._session import Session, SessionBusy, SessionClosed
from session.openai._request import ChatRequest, OpenAIError

if TYPE_CHECKING:
    from session.openai._app import _Endpoint

SESSION_HEADER = "x-session-id"
_log = tracing.logger("session.openai")


class _Run:
    """A user message sent to a session, followed through the session's events to its outcome."""

    def __init__(self, session: Session, text: str) -> None:
        self.session = session
        self.text = text
        self.events: Subscription | None = None
        self.message_id: str | None = None
        self.running = False  # the session is processing this message now
        self.ended = False  # the session reported this message finished or failed
        self.state: State | None = None
        self.error: Exception | None = None
        self.done = anyio.Event()

    async def __call__(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        # Subscribing and sending with no checkpoint between makes this message's MessageQueued the first event
        # the subscription holds: that is how a caller of ``ask`` learns which events are its message's.
        with self.session.events.subscribe(buffer=None, main_line=True) as self.events:
            task_status.started()
            try:
                self.state = await self.session.ask(self.text)
            except Exception as exc:
                self.error = exc
            finally:
                self.done.set()

    def observe(self, event: Any) -> bool:
        """Note what ``event`` says about this message; whether it was published while the message ran."""
        if self.message_id is None:
            if isinstance(event, MessageQueued):
                self.message_id = event.message_id
            return False
        if isinstance(event, MessageStarted):
            self.running = event.message_id == self.message_id
        elif isinstance(event, (MessageFinished, MessageFailed)) and event.message_id == self.message_id:
            self.running, self.ended = False, True
        else:
            return self.running
        return False

    def turns(self, state: State) -> list[Turn]:
        """The turns of ``state`` after this message's user turn: what this request added."""
        added = []
        for turn in state.reversed():
            if turn.role is Role.USER and turn.meta.get("message_id") == self.message_id:
                break
            added.append(turn)
        added.reverse()
        return added


class Completion:
    """One chat completion: runs the request's message in its session and answers with the outcome, as one
    JSON response (``respond``) or, called as an ASGI app, as a stream of chunks."""

    def __init__(self, endpoint: _Endpoint, session: Session, chat: ChatRequest, *, name: str, fresh: bool) -> None:
        # ``fresh``: a session for this request alone, named after the completion; else the one the client
        # names ``name`` (the session's own id may be that name in a namespace: see ``session_key``).
        self.endpoint = endpoint
        self.session = session
        self.chat = chat
        self.fresh = fresh
        self.id = name if fresh else "chatcmpl-" + secrets.token_urlsafe(18)
        self.created = int(time.time())
        self.run = _Run(session, chat.message)
        self.finished = False  # the whole answer went out
        self.client_gone = False
        kept = not fresh or endpoint.keep_conversations
        self.headers = {SESSION_HEADER: name} if kept else {}

    async def respond(self) -> Response:
        """Run the message and answer with a ``chat.completion`` object, or the error in OpenAI's format."""
        try:
            await self.run()
        finally:
            with anyio.CancelScope(shield=True):
                await self._release()
        assert self.run.events is not None  # set by the run
        for event in self.run.events.drain():
            self.run.observe(event)
        if self.run.error is not None:
            return self._failure(self.run.error).response()
        state = self.run.state
        assert state is not None  # a run without an error has a state
        turns = self.run.turns(state)
        message: dict[str, Any] = {"role": "assistant", "content": state.answer, "refusal": None}
        trace = "".join(f"{line}\n" for line in _trace(turns, state))
        if trace:
            message["reasoning_content"] = trace
        return Response(json_text({
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.endpoint.model_name,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(state)}],
            "usage": _usage(turns),
        }, separators=(",", ":")), headers=self.headers, media_type="application/json")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            async with anyio.create_task_group() as group:
                await group.start(self.run)
                if self.run.done.is_set() and self.run.error is not None:  # refused at once: answer with a status
                    await self._failure(self.run.error).response()(scope, receive, send)
                    return
                async with anyio.create_task_group() as streaming:
                    streaming.start_soon(self._watch, receive, streaming.cancel_scope)
                    await self._stream(send, streaming.cancel_scope)
                    streaming.cancel_scope.cancel()
                if self.client_gone and not self.run.done.is_set():
                    self._abandon(group.cancel_scope)
        finally:
            with anyio.CancelScope(shield=True):
                await self._release()

    async def _watch(self, receive: Any, scope: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.finished:
            self.client_gone = True
            scope.cancel()

    def _abandon(self, waiting: anyio.CancelScope) -> None:
        """The client left before the answer: stop this request's message, or stop waiting for it."""
        assert self.run.events is not None  # set by the run
        for event in self.run.events.drain():  # catch up, so ``running`` is true now, not when last read
            self.run.observe(event)
        if self.fresh:
            self.session.interrupt()
        elif self.run.running:
            self.session.interrupt(drop_queued=False)
        else:
            waiting.cancel()  # queued behind another message of a shared session; it runs later

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
        await emit(body(self._chunk({"role": "assistant", "content": ""})))
        deltas = _Deltas()
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
                    await emit(body(self._chunk(delta)))
        await self.run.done.wait()
        if self.run.error is not None:
            self.finished = True
            await emit(body(_sse(self._failure(self.run.error).body())))
            await emit(body(b"", more=False))
            return
        state = self.run.state
        assert state is not None  # a run without an error has a state
        for delta in deltas.answer(state.answer):
            await emit(body(self._chunk(delta)))
        if _not_ok(state):
            await emit(body(self._chunk(deltas.line(_degraded_line(state)))))
        await emit(body(self._chunk({}, _finish(state))))
        if self.chat.include_usage:
            await emit(body(_sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                  "model": self.endpoint.model_name, "choices": [],
                                  "usage": _usage(self.run.turns(state))})))
        self.finished = True
        await emit(body(b"data: [DONE]\n\n", more=False))

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.endpoint.model_name,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self.chat.include_usage:
            chunk["usage"] = None  # as OpenAI does: only the last chunk has usage
        return _sse(chunk)

    def _failure(self, exc: Exception) -> OpenAIError:
        _log.warning("chat completion failed", session=self.session.id, error=repr(exc))
        return _failure(exc)

    async def _release(self) -> None:
        if self.fresh:
            await self.endpoint.manager.close(self.session.id)
            if self.run.done.is_set():  # the worker is idle, so nothing more will be written
                await self.endpoint.forget(self.session.id)


class _Deltas:
    """Turns one message's events into chunk deltas: text as ``content``, the rest as ``reasoning_content``."""

    def __init__(self) -> None:
        self.wrote_content = False
        self.turn_text: list[str] = []  # the text streamed since the last model turn began
        self.mid_line = False  # the reasoning sent so far does not end with a newline

    def of(self, event: Any) -> list[dict[str, str]]:
        if isinstance(event, TurnStarted):
            self.turn_text = []
        elif isinstance(event, TextDelta) and event.text:
            return [self.content(event.text)]
        elif isinstance(event, ReasoningDelta) and event.text:
            self.mid_line = not event.text.endswith("\n")
            return [{"reasoning_content": event.text}]
        elif isinstance(event, ToolStarted):
            return [self.line(_call_line(event.call))]
        elif isinstance(event, ToolFinished):
            return [self.line(_result_line(event.result))]
        elif isinstance(event, TurnCompleted) and event.turn.kind is TurnKind.VERIFICATION:
            return [self.line(_report_line(event.turn))]
        return []

    def content(self, text: str) -> dict[str, str]:
        separator = "\n\n" if self.wrote_content and not self.turn_text else ""
        self.wrote_content = True
        self.turn_text.append(text)
        return {"content": separator + text}

    def answer(self, answer: str | None) -> list[dict[str, str]]:
        """What makes the streamed content end with ``answer``: nothing when the last turn streamed it; the
        answer itself when it was not streamed (a turn middleware replayed it) or another branch won."""
        if not answer or "".join(self.turn_text) == answer:
            return []
        self.turn_text = []
        return [self.content(answer)]

    def line(self, text: str) -> dict[str, str]:
        prefix = "\n" if self.mid_line else ""
        self.mid_line = False
        return {"reasoning_content": f"{prefix}{text}\n"}


def _call_line(call: ToolCall) -> str:
    return f"→ calling {call.name}({call.arguments})"


def _result_line(result: ToolResult) -> str:
    return f"← {result.name}: {result.content}"


def _report_line(turn: Turn) -> str:
    attempt = turn.meta.get("attempt")
    return f"verification report{f' (attempt {attempt})' if attempt else ''}:\n{turn.text.rstrip()}"


def _not_ok(state: State) -> bool:
    outcome = state.outcome
    return outcome is not None and not outcome.ok


def _degraded_line(state: State) -> str:
    outcome = state.outcome
    reason = outcome.reason if outcome is not None else ""
    return f"{outcome.status if outcome is not None else 'degraded'}: {reason or 'the run stopped early'}"


def _trace(turns: list[Turn], state: State) -> list[str]:
    """The ``reasoning_content`` lines for what ``turns`` hold, as the stream would have sent them."""
    lines = []
    for turn in turns:
        if turn.role is Role.ASSISTANT:
            lines += [p.text.rstrip("\n") for p in turn.parts if type(p) is Reasoning and p.text]
            lines += [_call_line(c) for c in turn.tool_calls]
        elif turn.role is Role.TOOL:
            lines += [_result_line(r) for r in turn.tool_results]
        elif turn.kind is TurnKind.VERIFICATION:
            lines.append(_report_line(turn))
    if _not_ok(state):
        lines.append(_degraded_line(state))
    return lines


def _finish(state: State) -> str:
    # A run that did not end ok never passes for a clean one: "length" says the answer was cut short.
    return "length" if _not_ok(state) else "stop"


def _usage(turns: list[Turn]) -> dict[str, Any]:
    total = sum((t.usage for t in turns if t.usage is not None), Usage())
    return {"prompt_tokens": total.input_tokens, "completion_tokens": total.output_tokens,
            "total_tokens": total.total_tokens, "prompt_tokens_details": {"cached_tokens": total.cache_read_tokens}}


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json_text(data, separators=(',', ':'))}\n\n".encode()


def _failure(exc: Exception) -> OpenAIError:
    """The answer to a run that raised. Only a message that was never accepted may be retried by the client:
    any other retry would run the agent, and its tools, again."""
    if isinstance(exc, SessionBusy):
        return OpenAIError(429, str(exc), type="requests", code="session_busy")
    no_retry = {"x-should-retry": "false"}
    if isinstance(exc, SessionClosed):
        return OpenAIError(409, f"The message was interrupted before it finished: {exc}", type="server_error",
                           code="interrupted", headers=no_retry)
    if isinstance(exc, ProviderError):
        return OpenAIError(502, f"The model provider failed: {exc}", type="server_error", code="provider_error",
                           headers=no_retry)
    if isinstance(exc, LoopError):
        code = "".join(f"_{c.lower()}" if c.isupper() else c for c in type(exc).__name__).lstrip("_")
        return OpenAIError(500, f"The agent run failed: {exc}", type="server_error", code=code, headers=no_retry)
    return OpenAIError(500, f"The agent run failed with {type(exc).__name__}; the server log has the details.",
                       type="server_error", code="internal_error", headers=no_retry)
