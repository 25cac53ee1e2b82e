"""What a finished run looks like on the wire: the ``Answer`` a request gets (the message, its finish reason and
usage), the deltas a stream sends while the run goes on, and the error a failed run is answered with."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs

from cognitive import GuardrailTripped, answer_value, left_open
from loop import (LoopError, OutputType, Reasoning, ReasoningDelta, Role, State, TextDelta, ToolCall, ToolFinished,
                  ToolResult, ToolStarted, Turn, TurnCompleted, TurnKind, TurnStarted, Usage, tracing)
from loop.errors import ProviderError
from session._serving import json_text
from session._message import ToolResultsMismatch
from session._manager import SessionLimit, ShuttingDown
from session._session import SessionBusy, SessionClosed
from session.openai._errors import OpenAIError
from session.openai._stop import StopCut, cut

_log = tracing.logger("session.openai")


@attrs.frozen
class Answer:
    """A finished run as the client sees it: the assistant ``message`` (``content``, ``reasoning_content``,
    ``tool_calls``), the ``finish_reason`` and the ``usage`` of every model call the request made."""

    message: dict[str, Any]
    finish_reason: str
    usage: dict[str, Any]

    @classmethod
    def of(cls, state: State, turns: list[Turn], *, output: OutputType[Any] | None,
           client_tools: frozenset[str], stop: tuple[str, ...] = ()) -> Answer:
        """The answer to a request whose run left ``state``, having added ``turns``: its content is the final
        answer, cut at the first ``stop`` sequence; a typed answer's content is its validated JSON; calls left for
        the client are its ``tool_calls`` (``finish_reason`` "tool_calls")."""
        calls = [c for c in state.pending_calls if c.name in client_tools] if left_open(state) else []
        content = state.answer
        if output is not None and not calls:
            content = json_text(answer_value(state, output), separators=(",", ":"))  # as WithOutput validated it
        elif content is not None and stop:
            content = cut(content, stop)
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        trace = "".join(f"{line}\n" for line in trace_lines(turns, state))
        if trace:
            message["reasoning_content"] = trace
        if calls:
            message["tool_calls"] = [_tool_call(c) for c in calls]
        return cls(message, "tool_calls" if calls else _finish(state), usage(turns))

    @classmethod
    def blocked(cls, tripped: GuardrailTripped, turns: list[Turn]) -> Answer:
        """The answer to a request whose run a guardrail stopped, having added ``turns``: as OpenAI answers what
        its content filter stops, a completion (not an error) whose ``finish_reason`` is "content_filter"; its
        ``content`` is null (an answer that tripped is never shown) and its ``refusal`` says which check stopped
        it, at which stage, and why."""
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": tripped.notice}
        trace = "".join(f"{line}\n" for line in trace_lines(turns, tripped.state, outcome=False))
        if trace:
            message["reasoning_content"] = trace
        return cls(message, "content_filter", usage(turns))


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def stream_tool_calls(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The delta that hands ``calls`` (as ``Answer.message`` holds them) to a streaming client, each at its index."""
    return {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}


class Deltas:
    """Turns one message's events into chunk deltas: the answer as ``content``, the agent's work (reasoning, the
    text of turns that called tools, tool calls and results, verification reports) as ``reasoning_content``.

    ``live``: no turn of the run can call a tool, so whatever text a turn writes is an answer, streamed as
    ``content`` the moment it comes (cut at the ``stop`` sequences). Otherwise a turn's text shows what it is only
    once the turn ends: the text of one that called the server's tools is working text, sent as a
    ``reasoning_content`` block then, and the answer is sent as ``content`` once the run has ended (``end``), as
    the non-streaming answer holds it."""

    def __init__(self, *, live: bool, stop: tuple[str, ...] = (), client_tools: frozenset[str] = frozenset()) -> None:
        self.live = live
        self.client_tools = client_tools
        self.cut = StopCut(stop)
        self.wrote_content = False
        self.turn_text: list[str] = []  # the text streamed since the last model turn began
        self.mid_line = False  # the reasoning sent so far does not end with a newline

    def of(self, event: Any) -> list[dict[str, str]]:
        if isinstance(event, TurnStarted):
            self.turn_text = []
        elif isinstance(event, TextDelta) and event.text and self.live:
            return self.content(event.text)
        elif isinstance(event, ReasoningDelta) and event.text:
            self.mid_line = not event.text.endswith("\n")
            return [{"reasoning_content": event.text}]
        elif isinstance(event, ToolStarted):
            return [self.line(_call_line(event.call))]
        elif isinstance(event, ToolFinished):
            return [self.line(_result_line(event.result))]
        elif isinstance(event, TurnCompleted):
            turn = event.turn
            if turn.kind == TurnKind.VERIFICATION:
                return [self.line(_report_line(turn))]
            calls = turn.tool_calls if turn.role is Role.ASSISTANT else ()
            text = turn.text.rstrip()
            if not self.live and text and calls and not any(c.name in self.client_tools for c in calls):
                return [self.line(text)]  # working text: the turn goes on to the server's tools
        return []

    def content(self, text: str) -> list[dict[str, str]]:
        separator = "\n\n" if self.wrote_content and not self.turn_text else ""
        self.wrote_content = True
        self.turn_text.append(text)
        sent = self.cut.feed(separator + text)
        return [{"content": sent}] if sent else []

    def end(self, content: str | None, answer: str | None) -> list[dict[str, str]]:
        """What completes the streamed content once the run has ended. Not ``live``: the answer's ``content``
        (cut, or a typed answer's JSON), whole. ``live``: what makes the content end with the final ``answer``:
        the held end of the last turn when that turn streamed the answer; the answer itself when it was not
        streamed (a turn middleware replayed it) or another branch won."""
        if not self.live:
            return [{"content": content}] if content else []
        out: list[dict[str, str]] = []
        if answer and "".join(self.turn_text) != answer:
            self.turn_text = []
            out += self.content(answer)
        rest = self.cut.flush()
        return out + [{"content": rest}] if rest else out

    def line(self, text: str) -> dict[str, str]:
        prefix = "\n" if self.mid_line else ""
        self.mid_line = False
        return {"reasoning_content": f"{prefix}{text}\n"}


def _call_line(call: ToolCall) -> str:
    return f"→ calling {call.name}({call.arguments})"


def _result_line(result: ToolResult) -> str:
    shown = [result.content] if result.content else []
    shown += [f"[{a.media_type or type(a).__name__.lower()}{'' if a.data is None else f', {len(a.data):,} bytes'}]"
              for a in result.attachments]
    return f"← {result.name}: {' '.join(shown)}"


def _report_line(turn: Turn) -> str:
    attempt = turn.meta.get("attempt")
    return f"verification report{f' (attempt {attempt})' if attempt else ''}:\n{turn.text.rstrip()}"


def not_ok(state: State) -> bool:
    """Whether the run ended neither ok nor with calls left for the client: degraded or failed."""
    outcome = state.outcome
    return outcome is not None and outcome.status not in ("ok", "pending")


def degraded_line(state: State) -> str:
    outcome = state.outcome
    reason = outcome.reason if outcome is not None else ""
    return f"{outcome.status if outcome is not None else 'degraded'}: {reason or 'the run stopped early'}"


def trace_lines(turns: list[Turn], state: State, *, outcome: bool = True) -> list[str]:
    """The ``reasoning_content`` lines for what ``turns`` hold, as the stream would have sent them, and a line
    for an outcome that is not ok (unless not ``outcome``)."""
    lines = []
    handed = {c.id for c in state.pending_calls}  # left for the client: its tool_calls, not its trace
    for turn in turns:
        if turn.role is Role.ASSISTANT:
            lines += [p.text.rstrip("\n") for p in turn.parts if type(p) is Reasoning and p.text]
            calls = turn.tool_calls
            if calls and turn.text.strip() and not any(c.id in handed for c in calls):
                lines.append(turn.text.rstrip())  # working text: written before calling the server's tools
            lines += [_call_line(c) for c in calls if c.id not in handed]
        elif turn.role is Role.TOOL:
            lines += [_result_line(r) for r in turn.tool_results]
        elif turn.kind == TurnKind.VERIFICATION:
            lines.append(_report_line(turn))
    if outcome and not_ok(state):
        lines.append(degraded_line(state))
    return lines


def _finish(state: State) -> str:
    # A run that did not end ok never passes for a clean one: "length" says the answer was cut short.
    return "length" if not_ok(state) else "stop"


def usage(turns: list[Turn]) -> dict[str, Any]:
    total = sum((t.usage for t in turns if t.usage is not None), Usage())
    return {"prompt_tokens": total.input_tokens, "completion_tokens": total.output_tokens,
            "total_tokens": total.total_tokens, "prompt_tokens_details": {"cached_tokens": total.cache_read_tokens}}


def sse(data: dict[str, Any]) -> bytes:
    return f"data: {json_text(data, separators=(',', ':'))}\n\n".encode()


def shutting_down() -> OpenAIError:
    """The answer to a request the server could not finish because it is shutting down (its run, if it had one,
    was cancelled): 503, which a client may retry once the server is back."""
    return OpenAIError(503, "The server is shutting down; the request was stopped before it finished. Retry it "
                            "once the server is back.", type="server_error", code="server_shutting_down")


def failure(exc: Exception) -> OpenAIError:
    """The answer to a run that raised. Only a message that was never accepted may be retried by the client:
    any other retry would run the agent, and its tools, again."""
    if isinstance(exc, SessionBusy):
        return OpenAIError(429, str(exc), type="requests", code="session_busy")
    if isinstance(exc, ToolResultsMismatch):  # the conversation moved on since the request was checked
        return OpenAIError(400, f"The tool messages do not answer the session's open tool calls: {exc}",
                           param="messages", code="tool_call_mismatch")
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


@contextlib.contextmanager
def opening_errors() -> Iterator[None]:
    """Opening a session, with its failures answered in OpenAI's format: 503 when the server is shutting down or
    has its most sessions open, 500 when the store failed."""
    try:
        yield
    except OpenAIError:
        raise
    except ShuttingDown:
        raise shutting_down() from None
    except SessionLimit as exc:
        raise OpenAIError(503, str(exc), type="server_error", code="session_limit") from exc
    except LoopError as exc:
        _log.warning("could not open a session", error=repr(exc))
        raise OpenAIError(500, f"Could not open a session: {exc}", type="server_error",
                          code="session_unavailable") from exc
