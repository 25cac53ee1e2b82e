"""The run scope: what a pattern run needs beyond its ``State``, carried in a context variable.

Like Go's ``context.Context`` (and OpenTelemetry's context), the scope reaches every nested and concurrent
pattern without extra arguments: anyio task groups copy it into their tasks. It holds

- the run path (``WithVerification/ReAct``, ``SelfConsistency/sample 3/ReAct``, ``tool:search#c2``),
  stamped on events and spans and shown to offline providers;
- the budgets whose spend every model call and tool call is charged to;
- the line being run: the main line (what a session stores and streams) or a branch;
- options laid over every turn (``turn_options``), and tools the caller answers (``external_tools``);
- the main line's recorder: what a step calls with the new state after each main-line turn it completes
  (a session stores the conversation through it), so the executor a pattern is handed is the same ``Step``
  in a script and in a session.

A line is owned by the task that opened it. Turns run in another task that inherits the scope without
declaring a branch (a user's own plain task group) are a branch too, so concurrent work can never be taken
for the conversation. Tools run in a scope of their own, a branch. Work handed to a task that already exists
(a pool, a reader) carries the scope explicitly with ``carry``.
"""

from __future__ import annotations

import asyncio
import functools
import re
import sys
from contextvars import ContextVar, Token
from collections.abc import Iterable
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from loop.errors import UsageError

from loop._protocols import Options, ToolSpec

if TYPE_CHECKING:
    from loop._spend import Spend
    from loop._state import State

Recorder = Callable[["State"], Awaitable[None]]
"""Called by a step with the conversation after each main-line turn it completes (see ``main_line``)."""


_NO_TASK = object()  # what a worker thread is: no task, so it never owns a line


def current_task() -> Any:
    """The running task itself, compared by identity: asyncio's or trio's task object; outside any event loop
    (a sync tool's worker thread) an identity that owns no line."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # not on asyncio
        trio = sys.modules.get("trio")  # running trio means trio is imported: no import here
        if trio is not None:
            try:
                return trio.lowlevel.current_task()
            except RuntimeError:
                pass
        return _NO_TASK


class Line:
    """One line of turns: the main line of a run, or a branch of it. Compared by identity."""

    __slots__ = ("main",)

    def __init__(self, main: bool) -> None:
        self.main = main

    def __repr__(self) -> str:
        return f"Line({'main' if self.main else 'branch'})"


class RunScope(NamedTuple):
    """Where the code running now stands: its run ``path``, the ``budgets`` it is charged to, its ``line``,
    the ``task`` that owns that line here (``None``: any task, as at the root), the ``options`` every turn
    run here takes over its step's own (``None``: none; see ``turn_options``), the ``external`` tools
    main-line turns offer beside their step's own (see ``external_tools``), the main line's ``recorder``
    (see ``main_line``), and the JSON schema its answer is asked in (``answer``, see ``typed_answer``).
    A frozen value: entering a scope makes a new one."""

    path: str
    budgets: tuple[Spend, ...]
    line: Line
    task: Any
    options: Options | None = None
    external: tuple[ToolSpec, ...] = ()
    recorder: Recorder | None = None
    answer: Mapping[str, Any] | None = None

    @property
    def on_main_line(self) -> bool:
        """Whether code running here, in this task, is on the main line (not a branch, tool or side task)."""
        return self.line.main and (self.task is None or self.task is current_task())

    @property
    def main_recorder(self) -> Recorder | None:
        """The recorder a step running here calls after each turn: the main line's, on the main line only."""
        recorder = self.recorder
        if recorder is None or not self.line.main or (self.task is not None and self.task is not current_task()):
            return None
        return recorder

    def child(self, name: str) -> RunScope:
        return _scope_of((_join(self.path, name), *self[1:]))

    def __repr__(self) -> str:
        return f"RunScope(path={self.path!r}, line={self.line!r}, budgets={len(self.budgets)})"


_SAMPLE = re.compile(r"(?:^|/)(?:sample \d+|samples)(?:/|$)")


def in_sample(path: str) -> bool:
    """Whether run path ``path`` lies in a sample: inside the ``samples`` branch ``Step.sample`` opens, or a
    branch named ``sample N`` (its samples, and fan-outs named ``sample``). An answer made there is one of
    several candidates, not the answer: caches keep none of them."""
    return _SAMPLE.search(path) is not None


def _join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


# A scope from the tuple of its eight fields, without the generated constructor's frame: scopes are entered for
# every tool call and every stage.
_scope_of = functools.partial(tuple.__new__, RunScope)
_new = object.__new__
ROOT = RunScope("", (), Line(main=True), None)
_current: ContextVar[RunScope] = ContextVar("loop_run_scope", default=ROOT)


def current_scope() -> RunScope:
    """The run scope of the code running now."""
    return _current.get()


def run_path() -> str:
    """The run path of the code running now (``""`` outside any pattern)."""
    return _current.get().path


class _Enter:
    """Makes ``scope`` current for a ``with`` block (a class: cheaper than a generator-based manager)."""

    __slots__ = ("_scope", "_token")
    _token: Token[RunScope]  # set by __enter__

    def __init__(self, scope: RunScope) -> None:
        self._scope = scope

    def __enter__(self) -> RunScope:
        self._token = _current.set(self._scope)
        return self._scope

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._token)


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or "/" in name:
        raise UsageError(f"a run path segment is a non-empty string without '/', got {name!r}")
    return name


def scope(name: str) -> _Enter:
    """``with scope("ReAct"):`` — run the block one level down the run path, on the same line."""
    # Entered by every pattern run and stage: made as ``branch`` makes its scope.
    if type(name) is not str or not name or "/" in name:
        _check_name(name)
    parent = _current.get()
    path = parent.path
    enter = _new(_Enter)
    enter._scope = _scope_of((f"{path}/{name}" if path else name, *parent[1:]))
    return enter


def branch(name: str) -> _Enter:
    """``with branch("sample 3"):`` — run the block as a branch owned by the current task: its turns are
    charged to the enclosing budgets but never stored or streamed as the main line, and it offers no
    ``external_tools`` (their calls could only be answered on the main line)."""
    # Every tool call runs in a branch: the checks and objects below are made without a Python call each.
    if type(name) is not str or not name or "/" in name:
        _check_name(name)
    parent = _current.get()
    path = parent.path
    line = _new(Line)
    line.main = False
    enter = _new(_Enter)
    enter._scope = _scope_of((f"{path}/{name}" if path else name, parent.budgets, line, current_task(),
                              parent.options, (), None, None))
    return enter


def main_line(name: str | None = None, *, recorder: Recorder | None = None) -> _Enter:
    """``with main_line():`` — start a main line owned by the current task (a session's worker does this for the
    messages it serves). Turns in other tasks that inherit it without declaring a branch are branches.

    ``recorder`` is awaited by every step with the conversation after each turn it completes on this line: an
    assistant turn that called tools before they run, their results once they ran (answered "cancelled",
    shielded, when the turn is cancelled meanwhile), an answer, and a turn it ``submit``s. What the steps run
    (tools, branches, the agents a tool runs) never reports to it. A recorder that raises fails the turn. A
    recorder may be handed states that are not the line's conversation (a pattern's helper conversation run
    on the main line): it decides what to keep."""
    if recorder is not None and not callable(recorder):
        raise UsageError(f"recorder must be an async function taking a State, got {recorder!r}")
    parent = _current.get()
    path = parent.path if name is None else _join(parent.path, _check_name(name))
    return _Enter(RunScope(path, parent.budgets, Line(main=True), current_task(), parent.options, parent.external,
                           recorder, parent.answer))


def recording(recorder: Recorder | None) -> _Enter:
    """``with recording(None):`` — the main line's turns in the block report to ``recorder`` instead of the
    line's own (``None``: to nothing). For turn middleware that records the turns it completes itself, once
    they are what the conversation keeps (``cognitive.ReuseResults`` records the model's calls without the
    "pending" mark the inner turn leaves on them)."""
    if recorder is not None and not callable(recorder):
        raise UsageError(f"recorder must be an async function taking a State, or None; got {recorder!r}")
    parent = _current.get()
    return _Enter(RunScope(parent.path, parent.budgets, parent.line, parent.task, parent.options, parent.external,
                           recorder, parent.answer))


def typed_answer(schema: Mapping[str, Any] | None) -> _Enter:
    """``with typed_answer(schema):`` — the run's answer is wanted in the shape of the JSON ``schema``
    (``None``: in no particular shape). Patterns whose answer is a plain assistant turn (``ReAct``,
    ``SingleShot``) then ask their main-line turns for it (``Options.output_schema``), so that a model that
    complies answers in the right shape at once; ``cognitive.WithOutput`` uses it where the provider takes a
    schema beside tools. Patterns with an answer format of their own do not read it, and branches never
    answer for the run."""
    if schema is not None and not isinstance(schema, Mapping):
        raise UsageError(f"typed_answer takes a JSON schema (a mapping) or None, got {schema!r}")
    parent = _current.get()
    return _Enter(RunScope(parent.path, parent.budgets, parent.line, parent.task, parent.options, parent.external,
                           parent.recorder, schema))


def charging(spend: Spend) -> _Enter:
    """``with charging(spend):`` — everything run in the block is charged to ``spend`` too (and to every
    budget already charged here)."""
    parent = _current.get()
    return _Enter(RunScope(parent.path, (*parent.budgets, spend), parent.line, parent.task, parent.options,
                           parent.external, parent.recorder, parent.answer))


def turn_options(options: Options) -> _Enter:
    """``with turn_options(Options(temperature=0.7)):`` — every turn run in the block (by any step, at any
    depth) takes these options over its step's own; what a turn is called with still wins. A wrapper uses it
    to change how the pattern it wraps is sampled (``SelfConsistency``) without knowing its steps. Nested
    blocks combine, the inner one winning field by field."""
    if not isinstance(options, Options):
        raise UsageError(f"turn_options takes loop.Options, got {options!r}")
    parent = _current.get()
    merged = options if parent.options is None else parent.options.merge(options)
    return _Enter(RunScope(parent.path, parent.budgets, parent.line, parent.task, merged, parent.external,
                           parent.recorder, parent.answer))


def external_tools(specs: ToolSpec | Iterable[ToolSpec]) -> _Enter:
    """``with external_tools(specs):`` — every main-line turn run in the block offers the model these tools
    beside its step's own, and leaves their calls to the caller: a turn whose model calls one runs the step's
    own calls of that turn, then ends with the external ones pending (the answer's outcome ``pending``), and
    the pattern returns. Whoever holds the conversation answers them (the OpenAI-compatible endpoint hands
    them to its client) and runs the pattern again from the results. Branches never offer them. A name that
    is also one of a step's own tools makes that step's turns raise ``UsageError``."""
    if isinstance(specs, ToolSpec):
        specs = (specs,)
    if isinstance(specs, (str, bytes)) or not isinstance(specs, Iterable):
        raise UsageError(f"external_tools takes loop.ToolSpec values, got {specs!r}")
    offered = tuple(specs)
    if not all(isinstance(s, ToolSpec) for s in offered):
        raise UsageError(f"external_tools takes loop.ToolSpec values, got {offered!r}")
    names = [s.name for s in offered]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"external_tools: each tool needs its own name; {', '.join(map(repr, twice))} is given twice")
    parent = _current.get()
    return _Enter(RunScope(parent.path, parent.budgets, parent.line, parent.task, parent.options, offered,
                           parent.recorder, parent.answer))


class Carried:
    """A scope captured in one task to be entered in another (``with carried:``), for work handed to a task
    that already exists. The receiving task acts for the captured line: its turns count as that line's. One
    captured scope may be entered by several tasks at once (say, every worker of a pool)."""

    __slots__ = ("scope", "_tokens")

    def __init__(self, scope: RunScope) -> None:
        self.scope = scope
        self._tokens: dict[Any, list[Token[RunScope]]] = {}

    def __enter__(self) -> RunScope:
        task = current_task()
        scope = self.scope
        entered = RunScope(scope.path, scope.budgets, scope.line, None if scope.task is None else task,
                           scope.options, scope.external, scope.recorder, scope.answer)
        self._tokens.setdefault(task, []).append(_current.set(entered))
        return entered

    def __exit__(self, *exc_info: object) -> None:
        task = current_task()
        tokens = self._tokens[task]
        _current.reset(tokens.pop())
        if not tokens:
            del self._tokens[task]


def carry() -> Carried:
    """Capture the current run scope for work handed to another, already running, task."""
    return Carried(_current.get())
