"""``Step``: one inference turn, and the tool calls it asks for."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import attrs

from loop._spend import _TURNS, Spend, charge_usage, exhausted_error, take
from loop._events import EventBus, TurnCompleted, TurnFailed, TurnStarted
from loop._accumulate import Accumulator
from loop._left_open import left_open, offered
from loop._executor import Transform, has, provider_info
from loop._outcome import OK, PENDING
from loop._parts import Part, Role, ToolCall, ToolResult, Usage
from loop._pipeline import CANCELLED, ToolPipeline, error_result
from loop._protocols import Options, Provider, ProviderInfo, Request, ToolSpec
from loop._respond import stream, stream_choices
from loop._sample import sample_states
from loop._scope import Recorder, RunScope, current_scope, current_task
from loop._state import State
from loop._tools import Tool
from loop._turn import Turn, made_turn, trusted_turn
from loop.errors import UsageError

_DEFAULT_OPTIONS = Options()  # immutable, so every step without options can share it
_TOOL = Role.TOOL  # read once per tool turn: a global is read faster than an enum's member
_CACHE = "cache"  # the meta key (and outcome path) marking an answer a response cache replayed
__all__ = ["CANCELLED", "Step", "Transform"]


class Step:
    """Runs one inference turn against ``provider`` and executes the tool calls it makes.

    ``turn`` builds the model's view of ``state`` through ``transforms`` (the history itself is never
    rewritten), streams one response, appends the assistant turn and, if the model called tools, runs them
    concurrently and appends one ``TOOL`` turn with a result for every call, in call order. Unknown tools,
    malformed or schema-breaking arguments, exceptions, timeouts and cancellations all become error results.
    Inside ``external_tools(specs)``, main-line turns also offer the caller's tools and leave their calls
    pending (outcome ``pending``) for the caller to answer.

    Every provider call and every tool call is charged to the budgets of the run scope (``loop.Budget``,
    opened by ``cognitive.WithBudget``): a turn that would pass a turn limit, or that starts after a budget
    ran out, is never sent and raises ``BudgetExhausted``; a tool call that would pass a tool-call limit, or
    any call of a response that passed a token or cost limit, gets an error result instead of running.

    A step holds settings only; the same step can serve any number of conversations at once. Events go to
    ``events`` (a new ``EventBus`` unless one is given).
    """

    __slots__ = ("_provider", "_pipeline", "_specs", "_options", "_transforms", "_async_view", "events")

    def __init__(
        self,
        provider: Provider,
        *,
        tools: Iterable[Tool] = (),
        options: Options | None = None,
        transforms: Sequence[Transform] = (),
        events: EventBus | None = None,
        tool_timeout: float = 60.0,
        max_result_chars: int = 20_000,
    ) -> None:
        _check_provider(provider, "Step")
        if options is not None and not isinstance(options, Options):
            raise UsageError(f"options must be loop.Options, got {options!r}")
        self._transforms, self._async_view = _check_transforms(transforms)
        self.events = events if events is not None else EventBus()
        self._pipeline = ToolPipeline(tools, events=self.events, timeout=tool_timeout,
                                      max_result_chars=max_result_chars)
        self._provider = provider
        self._specs = tuple(t.spec for t in self._pipeline.tools)
        self._options = options or _DEFAULT_OPTIONS

    @property
    def provider(self) -> Provider:
        return self._provider

    @property
    def tools(self) -> tuple[Tool, ...]:
        return self._pipeline.tools

    @property
    def pipeline(self) -> ToolPipeline:
        """The tool pipeline this step's turns run their calls through; call tools without a model turn
        with ``await step.pipeline.run(calls)`` and they get the same checks, events and budget charges."""
        return self._pipeline

    @property
    def options(self) -> Options:
        return self._options

    @property
    def transforms(self) -> tuple[Transform, ...]:
        """The views this step's turns show the model, in order."""
        return self._transforms

    def derive(
        self,
        *,
        provider: Provider | None = None,
        options: Options | None = None,
        tools: Iterable[str] | None = None,
        transforms: Sequence[Transform] | None = None,
    ) -> Step:
        """A step like this one for one stage of a pattern: another ``provider`` (a cheap model for routing and
        judging), ``options`` laid over this step's (``Options(model="small")``), a subset of the ``tools`` by
        name (``()`` for none), or other ``transforms``. It shares this step's event bus, and its transforms
        and tool pipeline unless told otherwise: nothing is copied, and events of every stage reach the same
        subscribers. A tool name this step does not have raises ``UsageError`` naming the ones it has."""
        if options is not None and not isinstance(options, Options):
            raise UsageError(f"options must be loop.Options, got {options!r}")
        new = object.__new__(Step)
        new.events = self.events
        new._provider = self._provider
        new._options = self._options.merge(options)
        new._transforms = self._transforms
        new._async_view = self._async_view
        new._pipeline = self._pipeline
        new._specs = self._specs
        if provider is not None:
            new._provider = _check_provider(provider, "derive(provider=)")
        if transforms is not None:
            new._transforms, new._async_view = _check_transforms(transforms)
        if tools is not None:
            if isinstance(tools, str):
                raise UsageError(f"tools= takes tool names, got the string {tools!r}; write tools=[{tools!r}]")
            if not isinstance(tools, Iterable):
                raise UsageError(f"tools= takes a list of tool names, got {tools!r}")
            names = list(tools)
            if not all(isinstance(n, str) for n in names):
                raise UsageError(f"tools= takes tool names (strings), got {names!r}")
            unknown = [n for n in names if self._pipeline.find(n) is None]
            if unknown:
                have = ", ".join(t.spec.name for t in self._pipeline.tools) or "none"
                raise UsageError(f"derive(tools=): this step has no tool {', '.join(map(repr, unknown))}; it has {have}")
            pipeline = self._pipeline
            chosen = [t for t in pipeline.tools if t.spec.name in set(names)]
            new._pipeline = ToolPipeline(chosen, events=self.events, timeout=pipeline.timeout,
                                         max_result_chars=pipeline.max_result_chars)
            new._specs = tuple(t.spec for t in chosen)
        return new

    async def view(self, state: State) -> State:
        """What the model sees of ``state``: the state passed through every transform (sync or async)."""
        for transform in self._transforms:
            viewed = transform(state)
            if inspect.isawaitable(viewed):
                viewed = await viewed
            if not isinstance(viewed, State):
                raise UsageError(f"transform {transform!r} returned {viewed!r}, not a State")
            state = viewed
        return state

    async def submit(
        self, state: State, role: Role | str, *parts: Part, meta: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> State:
        """Append a turn that did not come from the model (spoken by ``name`` when given), and publish it; on
        the main line it is recorded (see ``loop.main_line``)."""
        turn = made_turn(role, parts, meta, name)
        bus = self.events
        if bus._subscribers:
            bus.publish(TurnCompleted(turn))
        state = state.append_turn(turn)
        scope = current_scope()
        if scope.budgets:
            self._follow(scope, state)
        recorder = scope.main_recorder if scope.recorder is not None else None
        if recorder is not None:
            await recorder(state)
        return state

    async def turn(self, state: State, options: Options | None = None) -> State:
        """One turn on ``state``: the model's answer and, if it called tools, their results.

        On the main line, the line's recorder (``loop.main_line(recorder=...)``, a session's store) is awaited
        with the state after each turn completes: the model's turn that called tools before they run, the
        results once they ran, or "cancelled" results (shielded) if the turn is cancelled while they run.
        """
        if type(state) is not State and not isinstance(state, State):
            raise UsageError(f"a turn runs on a loop.State, got {state!r}")
        scope = current_scope()
        opts = self._options if scope.options is None else self._options.merge(scope.options)
        if options is not None:
            opts = opts.merge(options)
        n = opts.n
        if n is not None and n > 1:
            raise UsageError(f"a turn writes one answer, but its options ask for n={n}; ask Step.sample for "
                             "several")
        budgets = scope.budgets
        external = scope.external if scope.external and scope.on_main_line else ()
        turn, passed = await self._respond(state, opts, scope,
                                           offered(self._specs, self._pipeline, external) if external else self._specs)
        state = state.append_turn(turn)
        if _CACHE in turn.meta:  # replayed by a ResponseCache: the answer's outcome says so too
            state = state.with_outcome(OK, data={"hit": True}, path=_CACHE)
        recorder = scope.main_recorder if scope.recorder is not None else None
        calls = turn.tool_calls
        if not calls or opts.run_tools is False:
            if budgets:
                self._follow(scope, state)
            if calls:
                # The calls stay open for someone else to decide on (an approval, a planner).
                state = state.with_outcome(PENDING, f"{len(calls)} tool call{'s' if len(calls) > 1 else ''} "
                                                    "left pending: the turn was asked not to run tools")
            if recorder is not None:
                await recorder(state)
            return state
        if (external or self._pipeline.gated) and opts.tool_choice != "none":
            left = left_open(self._pipeline, calls, external, scope)
            if left is not None:
                own = tuple(c for c in calls if c not in left.calls)
                if own:
                    state = await self._answer_calls(state, own, opts, scope, recorder, passed, left.calls)
                elif budgets:
                    self._follow(scope, state)
                state = left.mark(state)
                if recorder is not None:
                    await recorder(state)
                return state
        return await self._answer_calls(state, calls, opts, scope, recorder, passed)

    async def _answer_calls(self, state: State, calls: tuple[ToolCall, ...], opts: Options, scope: RunScope,
                            recorder: Recorder | None, passed: Spend | None,
                            left: tuple[ToolCall, ...] = ()) -> State:
        """``state`` (ending in the model's turn) with one ``TOOL`` turn answering ``calls``, every call of that
        turn but those ``left`` for the caller (answered "cancelled" too if the turn is cancelled meanwhile)."""
        budgets = scope.budgets
        if passed is not None:
            # A token or cost limit was passed by this response: its calls are answered, not run. (A budget this
            # turn ran out of stops the run at its next model call, which it refuses.)
            results = tuple(error_result(c, f"not run: {exhausted_error(passed, None)}") for c in calls)
        else:
            if recorder is not None:
                if budgets:
                    self._follow(scope, state)  # the recorder may be where the run is stopped
                await recorder(state)
            results = await self._pipeline.run(
                calls, disabled=opts.tool_choice == "none",
                on_cancel=functools.partial(self._cancelled, state, recorder, scope, left))
        tool_turn = trusted_turn(_TOOL, results)  # the pipeline answers with a tuple of ToolResult
        state = state.append_turn(tool_turn)
        bus = self.events
        if bus._subscribers:
            bus.publish(TurnCompleted(tool_turn))
        if budgets:
            self._follow(scope, state)
        if recorder is not None and not left:
            await recorder(state)  # with calls left for the caller, the turn records once it marks them pending
        return state

    @property
    def info(self) -> ProviderInfo:
        """What this step's provider says of itself (``loop.provider_info``)."""
        return provider_info(self._provider)

    @property
    def samples_in_one_request(self) -> bool:
        """Whether ``sample`` asks for every sample in one request (the provider returns several choices)."""
        return provider_info(self._provider).choices

    async def sample(self, state: State, n: int, options: Options | None = None) -> tuple[State, ...]:
        """``n`` answers to ``state``, one state per answer: the branches a sampling pattern votes over.

        Each sample is a branch (``sample 1`` ... on the run path): never stored or streamed as the main line.
        A provider that returns several choices for one request (``supports_choices``) is asked once with
        ``Options(n=n)``: the prompt is paid and charged once, as one turn, and the response's usage is kept on
        the first sample's turn. Any other provider gets ``n`` concurrent turns, each with seed ``seed + i``
        when ``options`` set a seed. Tool calls of every sample are run, each sample's concurrently.
        Raises the first sample's error if any failed.
        """
        return await sample_states(self, state, n, options)

    def _view(self, state: State) -> State:
        """``view`` when every transform is sync (checked at construction): no awaits on the hot path."""
        for transform in self._transforms:
            state = cast(State, transform(state))  # sync transforms return a State
        return state

    async def _respond(self, state: State, opts: Options, scope: RunScope,
                       specs: tuple[ToolSpec, ...]) -> tuple[Turn, Spend | None]:
        """The model's turn on ``state``, not yet appended, and the budget it passed if any: the turn is reserved
        in the scope's budgets, the model shown the view, the response streamed and published, and its usage
        charged. The path of every model call of a step (``turn``, and ``sample``'s one by one); one request
        for several choices goes the same way in ``_respond_choices``."""
        budgets = scope.budgets
        bus = self.events
        if budgets:  # ``_start``, inline
            self._reserve_turn(budgets, scope, state, opts)
        if bus._subscribers:
            bus.publish(TurnStarted(len(state)))
        if self._async_view:
            view = await self.view(state)
        else:
            view = self._view(state) if self._transforms else state
        acc = Accumulator()
        await stream(self._provider, Request(view.turns, specs, opts, scope.path), bus, acc.add, acc)
        turn = acc.turn(opts.model)
        if bus._subscribers:
            bus.publish(TurnCompleted(turn))
        passed: Spend | None = None
        if budgets:
            usage = acc.usage  # the turn's usage: the one Usage part the accumulator gave it
            if usage is not None:
                passed = charge_usage(budgets, usage, turn.meta.get("model") or self._model(opts), scope.path)
        return turn, passed

    async def _respond_choices(self, state: State, opts: Options, scope: RunScope, n: int) -> list[Turn | None]:
        """``n`` choices of the model's turn on ``state`` from one request (``None`` for a choice the provider
        never sent), reserved as one turn, published, and their usage charged once: the prompt is paid once."""
        opts = attrs.evolve(opts, n=n)
        self._start(state, opts, scope)
        view = await self.view(state) if self._async_view else self._view(state)
        got = await stream_choices(self._provider, Request(view.turns, self._specs, opts, scope.path), self.events, n)
        if scope.budgets:
            usage = sum((t.usage for t in got if t is not None and t.usage is not None), Usage())
            model = next((t.meta.get("model") for t in got if t is not None and t.meta.get("model")), None)
            charge_usage(scope.budgets, usage, model or self._model(opts), scope.path)
        return got

    def _start(self, state: State, opts: Options, scope: RunScope) -> None:
        """Before a model call on ``state``: reserve it in the scope's budgets (which raises when one has no turn
        left), then publish ``TurnStarted``; the model is shown the view after."""
        budgets = scope.budgets
        if budgets:
            self._reserve_turn(budgets, scope, state, opts)
        bus = self.events
        if bus._subscribers:
            bus.publish(TurnStarted(len(state)))

    def _model(self, opts: Options) -> str | None:
        return opts.model or provider_info(self._provider).model

    def _reserve_turn(self, budgets: tuple[Spend, ...], scope: RunScope, state: State, opts: Options) -> None:
        for spend in budgets:
            if spend._runner is None:
                spend._runner = self  # a step that can write the final answer, even if only branches ran
            if spend._costed:
                spend._check_priced(self._model(opts))  # a cost limit needs the turn's price known
        refused = take(budgets, _TURNS, scope.path)
        if refused is not None:  # ``reserve``, inline: a refusal exhausts that budget
            spend, reason = refused
            spend.exhaust(reason)
            error = exhausted_error(spend, state)
            self.events.publish(TurnFailed(error))
            raise error

    def _follow(self, scope: RunScope, state: State) -> None:
        """Tell the budgets whose run this line is about its newest state (their final answer starts there)."""
        task = None
        for spend in scope.budgets:
            if spend._line is scope.line:
                if spend._task is not None:
                    task = task or current_task()
                    if spend._task is not task:
                        continue
                spend._tip = state
                spend._runner = self

    async def _cancelled(self, state: State, recorder: Recorder | None, scope: RunScope,
                         left: tuple[ToolCall, ...], answered: tuple[ToolResult, ...], exc: BaseException) -> None:
        # Cancelled mid-call: every open call is answered (those left for the caller too: the caller will never
        # be handed them) so that the published history stays valid to send back to a model; then the
        # cancellation goes on.
        tool_turn = Turn(Role.TOOL, answered + tuple(error_result(c, CANCELLED) for c in left))
        self.events.publish(TurnCompleted(tool_turn))
        self.events.publish(TurnFailed(exc))
        done = state.append_turn(tool_turn)
        if scope.budgets:
            self._follow(scope, done)
        if recorder is not None:
            await recorder(done)


def _check_provider(provider: Any, who: str) -> Provider:
    if not has(provider, Provider):
        raise UsageError(f"{who} needs a provider with a stream(request) method, got {provider!r}")
    return cast(Provider, provider)


def _check_transforms(transforms: Any) -> tuple[tuple[Transform, ...], bool]:
    """The transforms as a tuple, and whether any is async (recognised once, here; one that returns an
    awaitable anyway is awaited too)."""
    if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Iterable):
        raise UsageError(f"transforms must be a list of functions State -> State, got {transforms!r}")
    transforms = tuple(transforms)
    for transform in transforms:
        if not callable(transform):
            raise UsageError(f"a transform must be a function State -> State, got {transform!r}")
    return transforms, any(inspect.iscoroutinefunction(t) or inspect.iscoroutinefunction(type(t).__call__)
                           for t in transforms)
