"""``Remembering``: a pattern wrapper that decides, once a message is answered, what of it to remember; and its
policies, ``remember_messages`` and ``ExtractFacts``."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Union, cast

import anyio
import anyio.lowlevel

from cognitive._pattern import Pattern, check_prompt, check_start, left_open
from cognitive.memory._aside import Aside
from cognitive.memory._protocol import MEMORY, Forgetting, Memory, MemoryItem, Scope
from loop import Role, State, Turn, TurnRunner, UsageError, current_run_context, has, require, scope, tracing
from loop.checks import positive_int
from loop.errors import BudgetExhausted

Policy = Callable[[str, str], Union[Iterable[str], Awaitable[Iterable[str]]]]
"""What to remember of one exchange: ``policy(message, answer)`` returns the texts to keep (sync or async)."""

EXTRACT_PROMPT = (
    "You keep a memory of durable facts about the user of an assistant: their name, where they live, their work, "
    "their preferences, their plans, the people and things in their life. Read the user's message and the "
    "assistant's answer below and write every such fact the user stated or plainly implied, each as one short "
    "sentence about the user that stands on its own (\"The user lives in Oslo.\"), one a line. Leave out "
    "questions, passing requests, what the assistant said, and anything that holds only for this conversation. "
    "At most {max_facts} facts. If there is none, write NONE.")

_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s*")
_NONE = {"none", "none.", "no facts", "no facts."}
_log = tracing.logger("cognitive.memory")

def message_id(message: Turn) -> str:
    """The id a session gave ``message`` (``meta["message_id"]``, stored with the turn), else ``""``."""
    value = message.meta.get("message_id")
    return value if isinstance(value, str) else ""


def remember_messages(message: str, answer: str) -> list[str]:
    """The policy that remembers each user message as it was written (the answer is not kept)."""
    return [message]


class ExtractFacts:
    """The policy that asks a model for the durable facts about the user in a message and its answer, and
    remembers each fact.

    The model is asked through ``step`` (its tool-free, view-free ``derive`` when it has one) inside
    ``loop.branch("ExtractFacts")``: the request is charged to the run's budgets and its events are published
    under its own run path, and it is never taken for the conversation. ``prompt`` is the instruction (it may
    use ``{max_facts}``); the answer is read as a JSON list of strings (or a fenced JSON block holding one), else
    as one fact a line, bullets and numbering removed; ``NONE`` means none. At most ``max_facts`` are kept.

    Raises ``UsageError`` when ``step`` has no ``turn``, ``prompt`` is not a non-empty string whose only field is
    ``{max_facts}``, or ``max_facts`` is not a positive integer.
    """

    __slots__ = ("step", "prompt", "max_facts", "_instruction", "_aside")

    def __init__(self, step: TurnRunner, *, prompt: str = EXTRACT_PROMPT, max_facts: int = 5) -> None:
        require(step, TurnRunner, "ExtractFacts", "a TurnRunner (the step) to ask the model for facts")
        self.max_facts = positive_int("ExtractFacts max_facts", max_facts)
        counted = isinstance(prompt, str) and "{max_facts}" in prompt
        self.prompt = check_prompt("ExtractFacts prompt", prompt, *(("max_facts",) if counted else ()))
        self._instruction = self.prompt.format(max_facts=max_facts) if counted else self.prompt
        self.step = step
        self._aside = Aside("ExtractFacts", step)

    async def __call__(self, message: str, answer: str) -> list[str]:
        """The facts the model finds in ``message`` and its ``answer``."""
        reply = await self._aside(self._instruction,
                                  f"The user's message:\n{message}\n\nThe assistant's answer:\n{answer}")
        return facts_in(reply)[:self.max_facts]

    def __repr__(self) -> str:
        return f"ExtractFacts({self.step!r}, max_facts={self.max_facts})"


def facts_in(text: str) -> list[str]:
    """The facts a model wrote: a JSON list of strings (bare, or in a fenced block), else one a line; ``NONE``
    (or nothing) is none. Blank and repeated facts are dropped."""
    body = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", body, flags=re.S)
    candidate = fenced.group(1).strip() if fenced else body
    facts: list[str] = []
    parsed: Any = None
    if candidate.startswith("["):
        try:
            parsed = json.loads(candidate)
        except ValueError:
            parsed = None
    if isinstance(parsed, list):
        facts = [str(f).strip() for f in parsed if isinstance(f, (str, int, float)) and str(f).strip()]
    else:
        for line in body.splitlines():
            line = _BULLET.sub("", line).strip()
            if line and not line.startswith("```") and line.lower() not in _NONE:
                facts.append(line)
    seen: set[str] = set()
    unique = []
    for fact in facts:
        if fact.lower() not in seen and fact.lower() not in _NONE:
            seen.add(fact.lower())
            unique.append(fact)
    return unique


def _policy_name(policy: Any) -> str:
    return getattr(policy, "__name__", None) or type(policy).__name__


def _message(state: State) -> Turn | None:
    for turn in state.reversed():
        if turn.role is Role.USER:
            return turn
    return None


class Remembering:
    """Runs ``pattern`` on each message, then applies ``policy`` to the message and its answer and remembers what
    it returns in ``memory``, for the run's caller (``Scope.current(space)``).

    Memory is off unless an application wraps its pattern in this (and shows memories with ``RecallMemory``).
    ``policy`` is ``remember_messages`` (the message word for word), ``ExtractFacts(step)`` (the facts a model
    finds in it), or any function ``(message, answer) -> texts``, sync or async. Each item keeps its ``source``
    (the conversation the run answers in, ``loop.RunContext.conversation``: a session's id; ``""`` outside a
    session), the time it was remembered, and ``meta={"policy": name, "message": id}`` (the message id a session
    stores with the message, when it has one). A text already remembered word for word (the closest item has the
    same text, case and spacing aside) is not kept twice. The answer's outcome holds ``{"remembered": [ids]}``
    under this wrapper's run path.

    A run that ends with tool calls left for the caller remembers nothing yet: the run that answers them does,
    so a message is remembered once. When the policy or the memory fails, the answer is returned all the same,
    the failure is logged and the outcome holds ``{"remember_failed": reason}``, and what this message had
    remembered is forgotten again (when ``memory`` can forget), so no message is half remembered. Cancellation
    waits for a ``remember`` in flight, forgets what the message had remembered, and propagates. ``UsageError``
    and ``BudgetExhausted`` are raised, as they are no failure of remembering.

    Raises ``UsageError`` when ``pattern`` is not a pattern, ``memory`` not a ``Memory``,
    ``policy`` not callable or ``space`` not a non-empty string.
    """

    __slots__ = ("inner", "memory", "policy", "space")

    def __init__(self, pattern: Pattern, memory: Memory, *, policy: Policy, space: str = MEMORY) -> None:
        self.inner = require(pattern, Pattern, "Remembering", "a Pattern to wrap (something with run(state))")
        self.memory = require(memory, Memory, "Remembering", "a Memory (something with remember and recall)")
        if not callable(policy):
            raise UsageError("Remembering policy must be a function (message, answer) -> texts to remember, such as "
                             f"remember_messages or ExtractFacts(step); got {policy!r}")
        self.policy = policy
        if not isinstance(space, str) or not space:
            raise UsageError(f"Remembering space must be a non-empty string, got {space!r}")
        self.space = space

    async def run(self, state: State) -> State:
        check_start(state, "Remembering")
        message = _message(state)
        with scope("Remembering"), tracing.span(
                "invoke_agent Remembering",
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Remembering"}) as span:
            state = await self.inner.run(state)
            if message is None or left_open(state) or state.answer is None or not message.text.strip():
                return state
            last = state.last
            if last is None or last.role is not Role.ASSISTANT:
                return state
            scope_ = Scope.current(self.space)
            source = current_run_context().conversation or ""
            meta = {"policy": _policy_name(self.policy), **({"message": mid} if (mid := message_id(message)) else {})}
            kept: list[MemoryItem] = []
            try:
                texts = await self._texts(message.text, state.answer)
                for text in texts:
                    if not await self._known(scope_, text):
                        with anyio.CancelScope(shield=True):  # a remember that ran is always known, to be undone
                            kept.append(await self.memory.remember(scope_, text, source=source, meta=meta))
                # A cancellation that came during the last remember is taken here, while it can be undone.
                await anyio.lowlevel.checkpoint_if_cancelled()
            except (UsageError, BudgetExhausted):
                await self._undo(scope_, kept)
                raise
            except Exception as exc:
                await self._undo(scope_, kept)
                reason = f"{type(exc).__name__}: {exc}"
                _log.warning("remembering failed; the answer is kept", error=repr(exc))
                span.set_attribute("memory.failed", reason)
                return state.with_outcome(data={"remember_failed": reason})
            except BaseException:  # cancelled: nothing of this message stays remembered
                await self._undo(scope_, kept)
                raise
            span.set_attribute("memory.remembered", len(kept))
            return state.with_outcome(data={"remembered": [item.id for item in kept]})

    async def _texts(self, message: str, answer: str) -> list[str]:
        got = self.policy(message, answer)
        if inspect.isawaitable(got):
            got = await got
        if isinstance(got, str) or not isinstance(got, Iterable):
            raise TypeError(f"the policy {_policy_name(self.policy)} returned {got!r}, not a list of texts")
        texts = list(got)
        bad = [t for t in texts if not isinstance(t, str)]
        if bad:
            raise TypeError(f"the policy {_policy_name(self.policy)} returned {bad[0]!r} among its texts")
        return [t.strip() for t in texts if t.strip()]

    async def _known(self, scope_: Scope, text: str) -> bool:
        """Whether ``text`` is remembered already, word for word."""
        closest = await self.memory.recall(scope_, text, k=1)
        return bool(closest) and " ".join(closest[0].item.text.lower().split()) == " ".join(text.lower().split())

    async def _undo(self, scope_: Scope, kept: list[MemoryItem]) -> None:
        if not kept:
            return
        if not has(self.memory, Forgetting):
            _log.warning("remembering stopped part way, and the memory cannot forget",
                         kept=[item.id for item in kept])
            return
        with anyio.CancelScope(shield=True):
            try:
                await cast(Forgetting, self.memory).forget(scope_, *(item.id for item in kept))
            except Exception as exc:
                _log.warning("could not forget what a stopped remembering kept", error=repr(exc),
                             kept=[item.id for item in kept])

    def __repr__(self) -> str:
        return f"Remembering({self.inner!r}, {self.memory!r}, policy={_policy_name(self.policy)}, space={self.space!r})"
