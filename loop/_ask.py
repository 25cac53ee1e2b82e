"""``ask``: one tool-free exchange whose answer is a value of a type, for the stages that decide (judges,
routers, critics, planners) and must hand their decision to code rather than to a person."""

from __future__ import annotations

import json
from typing import Any, Generic, TypeVar

import attrs

from loop.checks import non_negative_int
from loop._output import OutputType
from loop._parts import Role, Text
from loop._protocols import Options, TurnRunner
from loop._state import State
from loop._turn import TurnKind
from loop.errors import UsageError, VerificationFailed
from loop._executor import add_turn, provider_info, require

T = TypeVar("T")
_MAX_PROBLEMS = 10
ASK_PROMPT = """\
Answer with one JSON value that follows this schema, with nothing before or after it. Do not call tools.

```json
{schema}
```"""
# For a provider that honours the schema natively: the model is shown the schema by the provider (and the
# request is billed for it there), so the prompt only says what to do with it.
ASK_NATIVE_PROMPT = ("Answer with one JSON value of the required structure, with nothing before or after it. "
                     "Do not call tools.")


@attrs.frozen
class Asked(Generic[T]):
    """What ``ask`` got: the ``value`` (of the type asked for), the ``state`` the exchange ended in (the
    question, the answer, and any correction turns), and how many ``attempts`` it took."""

    value: T
    state: State
    attempts: int = 1


async def ask(
    runner: TurnRunner,
    state: State,
    output_type: Any,
    *,
    options: Options | None = None,
    max_retries: int = 2,
    native: bool = True,
) -> Asked[Any]:
    """Ask the model on ``state`` for a value of ``output_type`` (an attrs class, a dataclass, a TypedDict, a
    pydantic model, a JSON-schema dict: anything ``OutputType.of`` takes).

    A ``SYSTEM`` turn asks for the value, then one turn is run through ``runner`` with tools off and, when
    ``native``, the schema as ``Options.output_schema`` (structured output where the provider has it);
    ``options`` are laid over the runner's own, but cannot turn tools back on or change the schema. The schema
    is shown once: a provider that honours it natively (``loop.provider_info(runner).json_schema``) shows it to
    the model itself, so the turn only asks for one JSON value of the required structure
    (``ASK_NATIVE_PROMPT``); with ``native=False``, or a provider that does not say it honours the schema, the
    turn carries it as compact JSON (``ASK_PROMPT``). An answer that does not validate gets a ``SYSTEM`` turn
    naming what is wrong (with the schema again when the text is its only copy) and is asked again, at most
    ``max_retries`` times; after that ``VerificationFailed`` carries the exchange's state. Turns are added
    with the runner's ``submit`` when it has one (so they are published like any other). Run it inside
    ``loop.branch(...)`` when the exchange must not be taken for the conversation.
    """
    require(runner, TurnRunner, "ask", "a TurnRunner (something with turn(state))")
    if not isinstance(state, State):
        raise UsageError(f"ask runs on a loop.State, got {state!r}")
    if options is not None and not isinstance(options, Options):
        raise UsageError(f"options must be loop.Options, got {options!r}")
    non_negative_int("max_retries", max_retries)
    if not isinstance(native, bool):
        raise UsageError(f"native must be True or False, got {native!r}")
    output: OutputType[Any] = OutputType.of(output_type)
    wanted = output.schema  # a copy of its own, once: the options keep it
    if native and provider_info(runner).json_schema:
        prompt, again = ASK_NATIVE_PROMPT, "Reply again with one JSON value of the required structure."
    else:
        schema = json.dumps(wanted, separators=(",", ":"), ensure_ascii=False)  # compact: every ask pays for it
        prompt = ASK_PROMPT.format(schema=schema)
        again = f"Reply again with one JSON value that follows this schema:\n\n```json\n{schema}\n```"
    state = await _add(runner, state, prompt, {"kind": TurnKind.OUTPUT_FORMAT})
    # Tools off and the schema asked for are what the exchange is: options given cannot turn them back.
    asked = attrs.evolve(Options().merge(options), tool_choice="none",
                         output_schema=wanted if native else None)
    report = ""
    for attempt in range(1, max_retries + 2):
        if report:
            state = await _add(runner, state, report, {"kind": TurnKind.VERIFICATION, "attempt": attempt - 1})
        state = await runner.turn(state, asked)
        problem = _problem(output, state.answer)
        if isinstance(problem, _Value):
            return Asked(problem.value, state, attempt)
        report = f"{problem}\n\n{again}"
    raise VerificationFailed(f"the model's answer never matched {output.name} in {max_retries + 1} "
                             f"attempt{'s' if max_retries else ''}: {problem}", state=state, results=())


@attrs.frozen
class _Value:
    value: Any


def _problem(output: OutputType[Any], answer: str | None) -> _Value | str:
    """The parsed value, or what is wrong with the answer, in words the model can act on."""
    if not answer:
        return "There was no answer with text."
    try:
        data = output.extract(answer)
    except UsageError as exc:
        return f"The answer cannot be read as `{output.name}`: {exc}."
    problems = output.errors(data)
    if problems:
        lines = "\n".join(f"- {p}" for p in problems[:_MAX_PROBLEMS])
        more = f"\n- … and {len(problems) - _MAX_PROBLEMS} more" if len(problems) > _MAX_PROBLEMS else ""
        return f"The answer does not match the `{output.name}` schema:\n\n{lines}{more}"
    try:
        return _Value(output._build(data))  # checked just above: building it is what is left
    except UsageError as exc:
        return f"The answer matches the schema but is refused: {exc}."


async def _add(runner: Any, state: State, text: str, meta: dict[str, Any]) -> State:
    return await add_turn(runner, state, Role.SYSTEM, Text(text), meta=meta)
