"""``Summarize``: an LLM summary of the older conversation, stored as a compaction boundary; ``FromLastCompaction``:
the view that starts at the newest boundary."""

from __future__ import annotations

from collections.abc import Sequence

from cognitive._kinds import PatternKind
from cognitive.context._exchanges import (EXCHANGE, STRAY, canonical_arguments, check_counter, count, excerpt,
                                  split_units)
from loop import (Executor, Options, Role, State, Text, TokenCounter, ToolCall, Transform, Turn, TurnMiddleware,
                  TurnRunner, UsageError, approx_tokens, branch, require, run_path, tracing)
from loop.checks import positive_int
from loop.errors import BudgetExhausted, LoopError

SUMMARY_PROMPT = (
    "You compact a conversation between a user, an assistant and the assistant's tools, so that the assistant can "
    "carry on from your summary alone. Summarize the transcript you are given: the task and any change to it, "
    "what was decided, every fact learned from a tool (with exact names, numbers and identifiers), what was tried "
    "and did not work, and what is left to do. Write only the summary, as plain text."
)
_NO_TOOLS = Options(tool_choice="none")
_RESULT_CHARS = 4_000  # a tool result longer than this reaches the summarizer as an excerpt
_log = tracing.logger("cognitive.summarize")


def _is_boundary(turn: Turn) -> bool:
    return turn.role is Role.SYSTEM and turn.meta.get("kind") == PatternKind.COMPACTION


def _newest_boundary(state: State) -> int | None:
    index = len(state)
    for turn in state.reversed():
        index -= 1
        if _is_boundary(turn):
            return index
    return None


def _kept_start(turns: Sequence[Turn], boundary: int) -> int:
    """Where the turns a boundary keeps in view begin (``meta["kept"]`` turns before it), never reaching past an
    earlier boundary nor starting between a call and its results."""
    kept = turns[boundary].meta.get("kept", 0)
    if not isinstance(kept, int) or isinstance(kept, bool) or kept < 0:
        kept = 0
    start = max(0, boundary - kept)
    for index in range(boundary - 1, start - 1, -1):
        if _is_boundary(turns[index]):
            start = index + 1
            break
    while 0 < start < boundary and turns[start].role is Role.TOOL:
        start -= 1
    return start


def _pinned(turns: Sequence[Turn], before: int) -> list[int]:
    """The turns always in view that come before ``before``: the leading system turns (the instructions) and the
    first user message."""
    pinned: list[int] = []
    index = 0
    while index < before and turns[index].role is Role.SYSTEM:
        if not _is_boundary(turns[index]):
            pinned.append(index)
        index += 1
    first_user = next((i for i, t in enumerate(turns) if t.role is Role.USER), None)
    if first_user is not None and first_user < before:
        pinned.append(first_user)
    return pinned


class FromLastCompaction:
    """Shows the conversation from its newest compaction boundary on (a ``SYSTEM`` turn of kind
    ``PatternKind.COMPACTION``, which ``Summarize`` writes): the leading system turns and the first user message,
    the ``meta["kept"]`` turns stored just before the boundary (the newest messages when it was made, kept
    word for word), the boundary's summary, and every turn after it. The turns the summary replaces stay stored
    and are only hidden, so a stored conversation read back shows the model the same thing. Turns are shown in
    stored order; a conversation with no boundary is returned as it is; showing a view again changes nothing."""

    __slots__ = ()

    def __call__(self, state: State) -> State:
        boundary = _newest_boundary(state)
        if boundary is None:
            return state
        turns = state.turns
        start = _kept_start(turns, boundary)
        visible = _pinned(turns, start)
        if len(visible) == start:
            return state
        return State([turns[i] for i in visible] + list(turns[start:]), state.meta)

    def __repr__(self) -> str:
        return "FromLastCompaction()"


class Summarize(TurnMiddleware):
    """Runs ``step``'s turns on the conversation from its newest compaction boundary, and makes a new boundary
    when that view grows past ``max_tokens`` tokens (as ``counter`` counts them).

    A boundary is made before the turn: the conversation shown since the last boundary, except its leading
    system turns, its first user message and its newest ``keep_last`` messages (a tool exchange, call and
    results, counts as one message), is sent as a plain-text transcript to ``summarizer`` (a ``TurnRunner``,
    such as a cheaper ``step.derive(...)``), asked with tools off inside ``loop.branch("summarize")`` so the
    request is never taken for the conversation. Its answer is appended as a ``SYSTEM`` turn with
    ``meta={"kind": PatternKind.COMPACTION, "kept": ..., "summarized": ...}``, through ``step.submit`` when the
    step has one (so it is published and recorded like any turn). Nothing is deleted: the
    turns it summarizes stay in the state and are hidden by ``FromLastCompaction``, which this wrapper puts
    in front of the step's own transforms. No boundary is made while tool calls wait for their results, nor
    when there is nothing new to summarize.

    When the summarizer fails (it raises, or writes no text), nothing is lost: the turn runs on the view it
    would have had without this compaction, a warning is logged, and the returned state's answer outcome holds
    ``{"compaction_failed": reason}`` under the run path ``.../Summarize``; the next turn tries again.
    ``UsageError`` and ``BudgetExhausted`` from the summarizer are raised, since they are not a summary's
    failure. ``prompt`` is the summarizer's instruction.

    A ``loop.TurnMiddleware``: it keeps every ability of ``step`` and composes with other middleware in any
    order; samples (``sample``) are taken on the same view, after a boundary is made if one is due. Raises
    ``UsageError`` when ``step`` is not a ``loop.Executor``, when ``summarizer`` has no ``turn``, or when a
    setting is not valid.
    """

    __slots__ = ("summarizer", "max_tokens", "keep_last", "counter", "prompt", "_viewing")

    def __init__(
        self,
        step: Executor,
        summarizer: TurnRunner,
        *,
        max_tokens: int = 32_000,
        keep_last: int = 4,
        counter: TokenCounter = approx_tokens,
        prompt: str = SUMMARY_PROMPT,
    ) -> None:
        super().__init__(step)
        require(summarizer, TurnRunner, "Summarize's summarizer")
        if not isinstance(prompt, str) or not prompt.strip():
            raise UsageError(f"prompt must be the summarizer's instruction (a non-empty string), got {prompt!r}")
        self.max_tokens = positive_int("max_tokens", max_tokens)
        self.keep_last = positive_int("keep_last", keep_last)
        self.counter = check_counter(counter)
        self.summarizer = summarizer
        self.prompt = prompt
        self._viewing = boundary_view(self.inner)

    @property
    def step(self) -> Executor:
        """The executor whose turns this runs."""
        return self.inner

    def rewrap(self, inner: Executor) -> Executor:
        return Summarize(inner, self.summarizer, max_tokens=self.max_tokens, keep_last=self.keep_last,
                         counter=self.counter, prompt=self.prompt)

    async def turn(self, state: State, options: Options | None = None) -> State:
        """One turn of ``step`` on the view from the newest boundary, after making a boundary if the view is too
        long. Returns the state with the boundary (if one was made) and the turn appended."""
        state, failure = await self._compacted(state)
        done = await self._viewing.turn(state, options)
        return done if failure is None else self._note(done, failure)

    async def sample(self, state: State, n: int, options: Options | None = None) -> tuple[State, ...]:
        """``n`` samples of ``step`` on the same view a turn would have, after making a boundary if one is due."""
        state, failure = await self._compacted(state)
        samples = await self._viewing.sample(state, n, options)
        return samples if failure is None else tuple(self._note(s, failure) for s in samples)

    async def view(self, state: State) -> State:
        return await self._viewing.view(state)

    @property
    def transforms(self) -> tuple[Transform, ...]:
        return self._viewing.transforms

    async def _compacted(self, state: State) -> tuple[State, str | None]:
        if not isinstance(state, State):
            raise UsageError(f"a turn runs on a loop.State, got {state!r}")
        if not self._due(state):
            return state, None
        try:
            return await self.compact(state), None
        except (UsageError, BudgetExhausted):
            raise
        except Exception as exc:
            _log.warning("compaction failed; running the turn without it", error=repr(exc))
            return state, (f"the summary could not be made ({type(exc).__name__}: {exc}); the turn ran on the "
                           "history since the last compaction")

    @staticmethod
    def _note(done: State, failure: str) -> State:
        path = run_path()
        return done.with_outcome(data={"compaction_failed": failure}, path=f"{path}/Summarize" if path else "Summarize")

    def _due(self, state: State) -> bool:
        if state.pending_calls:
            return False  # a boundary between calls and their results would split an exchange
        view = FromLastCompaction()(state)
        return count(self.counter, view.turns, "Summarize") > self.max_tokens

    async def compact(self, state: State) -> State:
        """``state`` with a new compaction boundary summarizing what is shown before its newest ``keep_last``
        messages; ``state`` itself when there is nothing to summarize. Raises what the summarizer raises,
        ``LoopError`` when it writes no text, and ``UsageError`` while tool calls wait for their results."""
        if state.pending_calls:
            raise UsageError("cannot compact a conversation while tool calls wait for their results; compact "
                             "after the tool turn")
        turns = state.turns
        boundary = _newest_boundary(state)
        after = 0 if boundary is None else boundary + 1
        shown_from = 0 if boundary is None else _kept_start(turns, boundary)
        always = set(_pinned(turns, len(turns)))
        units = split_units(turns[after:])
        kept = [u for u in units if after + u.indices[0] not in always][-self.keep_last:]
        kept_start = after + kept[0].indices[0] if kept else len(turns)
        for unit in units:  # an exchange open across a system turn is kept whole
            if unit.kind in (EXCHANGE, STRAY) and after + unit.indices[-1] >= kept_start:
                kept_start = min(kept_start, after + unit.indices[0])
        pinned = set(_pinned(turns, kept_start))
        summarized = [i for i in range(shown_from, kept_start) if i not in pinned]
        if not any(not _is_boundary(turns[i]) for i in summarized):
            return state
        first_user = next((turns[i] for i in sorted(pinned) if turns[i].role is Role.USER), None)
        request = State([
            Turn(Role.SYSTEM, (Text(self.prompt),)),
            Turn(Role.USER, (Text(_request_text(first_user, [turns[i] for i in summarized])),)),
        ])
        with branch("summarize"):
            answered = await self.summarizer.turn(request, _NO_TOOLS)
        summary = (answered.answer or "").strip()
        if not summary:
            raise LoopError("the summarizer answered with no text")
        text = (f"Summary of {len(summarized)} earlier turns of this conversation, which are no longer shown:"
                f"\n\n{summary}")
        meta = {"kind": PatternKind.COMPACTION, "kept": len(turns) - kept_start, "summarized": len(summarized)}
        return await self.inner.submit(state, Role.SYSTEM, Text(text), meta=meta)

    def __repr__(self) -> str:
        return (f"Summarize({self.step!r}, {self.summarizer!r}, max_tokens={self.max_tokens}, "
                f"keep_last={self.keep_last})")


def boundary_view(step: Executor) -> Executor:
    """``step`` showing its model the conversation from the newest compaction boundary
    (``FromLastCompaction`` before its own transforms), made with ``step.derive(transforms=...)``."""
    own = step.transforms
    if any(isinstance(t, FromLastCompaction) for t in own):
        return step
    return step.derive(transforms=(FromLastCompaction(), *own))


def _request_text(first_user: Turn | None, turns: Sequence[Turn]) -> str:
    task = f"The conversation began with this message, which stays shown:\n{first_user.text}\n\n" if first_user else ""
    return f"{task}The transcript to summarize:\n\n{_transcript(turns)}"


def _transcript(turns: Sequence[Turn]) -> str:
    """``turns`` as plain text, so any model can read them whatever tools it has."""
    calls: dict[str, ToolCall] = {}
    lines: list[str] = []
    for turn in turns:
        role = turn.role
        if role is Role.TOOL:
            for result in turn.tool_results:
                call = calls.get(result.call_id)
                args = canonical_arguments(call.arguments) if call is not None else "?"
                status = " (failed)" if result.is_error else ""
                lines.append(f"[result of {result.name}({args}){status}]\n{excerpt(result.content, _RESULT_CHARS)}")
            continue
        label = "summary of earlier turns" if _is_boundary(turn) else role.value
        if turn.text:
            lines.append(f"[{label}]\n{turn.text}")
        for call in turn.tool_calls:
            calls[call.id] = call
            lines.append(f"[{label} calls] {call.name}({canonical_arguments(call.arguments)})")
    return "\n\n".join(lines)
