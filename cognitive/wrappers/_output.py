"""``WithOutput``: an answer that is a value of a Python type, validated, never merely requested."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Generic, TypeVar, overload

import anyio
import anyio.to_thread

from cognitive._pattern import Pattern, left_open
from loop import (Options, OutputType, Role, State, Text, TurnExecutor, TurnKind, UsageError, provider_info, require,
                  scope, tracing, typed_answer)
from loop.checks import non_negative_int
from loop.errors import VerificationFailed
from verifier import Result, SchemaVerifier, build_report

T = TypeVar("T")
MODES = ("native", "text")
PROMPT = """\
Now give your final answer as one JSON value that follows this schema, with nothing before or after it. \
Do not call tools.

```json
{schema}
```"""


class WithOutput(Generic[T]):
    """Runs ``inner`` once and makes its answer a value of ``output_type``: an attrs class, a dataclass, a
    TypedDict, a pydantic model, or a JSON-schema dict (see ``loop.OutputType``).

    With ``mode="native"`` and a provider that takes a schema in a response that may still call tools
    (``ProviderInfo.json_schema``: OpenAI's ``response_format``), the inner run is asked for its answer in
    that shape (``loop.typed_answer``: ``ReAct`` and ``SingleShot`` ask their main-line turns for it), so a
    compliant model answers in one call. If the inner run's answer already holds JSON that validates, that is
    the answer. Otherwise one tool-free formatting turn is asked for, with the schema, through ``step`` (after
    the validation report, when the answer was already asked in the schema): ``mode="native"`` asks the
    provider for structured output (``Options.output_schema``: OpenAI's ``response_format``, a forced output
    tool on Anthropic), ``mode="text"`` asks for the JSON in the text and extracts it. Only that formatting
    turn is retried, up to ``max_retries`` times, each time with the validation report as a ``SYSTEM`` turn, so a
    tool with side effects never runs again for a format error. The validated JSON is kept in the answer's
    outcome (``data[path] == {"type": name, "value": json}``); ``answer_value(state, output_type)`` reads the
    typed value back from any stored conversation.

    An answer that never validates raises ``VerificationFailed`` (its state's outcome ``failed``), or with
    ``on_failure="degrade"`` returns that state with the outcome ``degraded``. Answers are checked in a worker
    thread (anyio's), so that checking a long one never holds up the event loop.
    """

    __slots__ = ("inner", "step", "output", "mode", "max_retries", "on_failure", "_verifier")

    def __init__(
        self,
        inner: Pattern,
        step: TurnExecutor,
        output_type: Any,
        *,
        mode: str = "native",
        max_retries: int = 2,
        on_failure: str = "raise",
    ) -> None:
        require(inner, Pattern, "WithOutput", "a Pattern to wrap (something with run(state))")
        require(step, TurnExecutor, "WithOutput")
        if mode not in MODES:
            raise UsageError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        non_negative_int("max_retries", max_retries)
        if on_failure not in ("raise", "degrade"):
            raise UsageError(f"on_failure must be 'raise' or 'degrade', got {on_failure!r}")
        self.inner = inner
        self.step = step
        self.output: OutputType[T] = OutputType.of(output_type)
        self.mode = mode
        self.max_retries = max_retries
        self.on_failure = on_failure
        self._verifier = SchemaVerifier(self.output, name=f"output {self.output.name}")

    async def run(self, state: State) -> State:
        if not isinstance(state, State):
            raise UsageError(f"WithOutput runs on a loop.State, got {state!r}")
        with scope("WithOutput"), tracing.span("invoke_agent WithOutput", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "WithOutput",
                "output.type": self.output.name}) as span:
            typed = self.mode == "native" and provider_info(self.step).json_schema
            if typed:
                # The provider takes a schema beside tools: patterns whose answer is a plain turn (ReAct,
                # SingleShot) ask for it in that shape, so a compliant model needs no formatting turn.
                with typed_answer(self.output.schema):
                    state = await self.inner.run(state)
            else:
                state = await self.inner.run(state)
            if left_open(state):
                return state  # calls left for the caller: the answer comes once they are answered
            result = await self._verify(state)
            if result.ok:
                span.set_attribute("output.formatting_turns", 0)
                return await self._done(state)
            if typed:  # the answer was asked in the schema and still missed it: say how, then ask again
                state = await self.step.submit(state, Role.SYSTEM, Text(build_report([result])),
                                               meta={"kind": TurnKind.VERIFICATION, "attempt": 1})
            schema = json.dumps(self.output.schema, indent=2, ensure_ascii=False)
            state = await self.step.submit(state, Role.SYSTEM, Text(PROMPT.format(schema=schema)),
                                           meta={"kind": TurnKind.OUTPUT_FORMAT})
            options = Options(tool_choice="none",
                              output_schema=self.output.schema if self.mode == "native" else None)
            for attempt in range(self.max_retries + 1):
                if attempt:
                    state = await self.step.submit(state, Role.SYSTEM, Text(build_report([result])),
                                                   meta={"kind": TurnKind.VERIFICATION, "attempt": attempt + typed})
                state = await self.step.turn(state, options)
                result = await self._verify(state)
                if result.ok:
                    span.set_attribute("output.formatting_turns", attempt + 1)
                    return await self._done(state)
            message = (f"the answer never matched {self.output.name} in {self.max_retries + 1} formatting "
                       f"turn{'s' if self.max_retries else ''}")
            if self.on_failure == "degrade":
                return state.with_outcome("degraded", message, data={"type": self.output.name, "error": result.report})
            raise VerificationFailed(message, state=state.with_outcome(
                "failed", message, data={"type": self.output.name, "error": result.report}), results=[result])

    # Checking an answer runs the schema's patterns over it: in linear time (RE2, which releases the GIL
    # meanwhile), yet in time that grows with the answer's length times the pattern's size. Both checks run in a
    # worker thread, so that a long answer never holds up the event loop and everything else it serves.

    async def _verify(self, state: State) -> Result:
        # A loop of its own in the thread: the verifier's contract is async, though this one never waits.
        return await anyio.to_thread.run_sync(anyio.run, self._verifier.verify, state)

    async def _done(self, state: State) -> State:
        value = await anyio.to_thread.run_sync(self.output.extract, state.answer or "")
        return state.with_outcome(data={"type": self.output.name, "value": value})

    def __repr__(self) -> str:
        return f"WithOutput({self.inner!r}, {self.output.name}, mode={self.mode!r})"


@overload
def answer_value(state: State, output_type: type[T]) -> T: ...
@overload
def answer_value(state: State, output_type: OutputType[T]) -> T: ...
@overload
def answer_value(state: State, output_type: Mapping[str, Any]) -> Any: ...


def answer_value(state: State, output_type: Any) -> Any:
    """The typed value of a conversation's last answer, as a ``WithOutput`` run for ``output_type`` left it:
    read from the answer's outcome (the validated JSON), else from the answer's text. Works on any stored
    conversation. Raises ``UsageError`` when the answer holds no valid value of that type."""
    output: OutputType[Any] = OutputType.of(output_type)
    outcome = state.outcome
    if outcome is not None:
        found = [d["value"] for path, d in outcome.data.items()
                 if path.rsplit("/", 1)[-1] == "WithOutput" and isinstance(d, Mapping)
                 and d.get("type") == output.name and "value" in d]
        if found:
            return output.parse(found[-1])
    if not state.answer:
        raise UsageError("the conversation has no answer to read a value from")
    return output.parse(output.extract(state.answer))
