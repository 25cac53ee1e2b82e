"""One provider call streamed into turns: the deltas published as they come, the stream always closed, one span."""

from __future__ import annotations

from collections.abc import Callable
from types import AsyncGeneratorType
from typing import Any, cast

import anyio

from loop import tracing
from loop._accumulate import Accumulator
from loop._budget import PRICES, price_of
from loop._events import EventBus, TurnCompleted, TurnFailed
from loop._executor import has
from loop._parts import Usage
from loop._protocols import Delta, DeltaStream, Options, Provider, Request
from loop._scope import current_scope
from loop._turn import Turn
from loop.errors import StreamError, UsageError


async def stream(provider: Provider, request: Request, bus: EventBus, take: Callable[[Delta], None],
                 first: Accumulator) -> None:
    """Stream ``request``, handing every delta to ``take`` (one choice: ``Accumulator.add``) and publishing it;
    ``TurnFailed`` if it fails. The stream is closed however it ends; the span records ``first``'s usage."""
    tracer = tracing.current_tracer()
    try:
        with tracing.NOOP_SPAN if tracer is None else _chat_span(tracer, request.options) as span:
            deltas = provider.stream(request)
            native = isinstance(deltas, AsyncGeneratorType)  # the usual stream, a DeltaStream by definition
            if not native and not has(deltas, DeltaStream):  # the one place the DeltaStream contract is checked
                raise UsageError(f"{provider!r}.stream() returned {deltas!r}, which cannot be closed (no "
                                 "aclose()); a provider's stream is a loop.DeltaStream: write it as an "
                                 "async generator")
            try:
                async for delta in deltas:
                    take(delta)
                    if bus._subscribers:  # asked per delta: a subscriber may join mid-stream
                        bus.publish(delta)
            except BaseException:
                # Release the provider's connection even when the turn is being cancelled.
                with anyio.CancelScope(shield=True):
                    await deltas.aclose()
                raise
            # An async generator that ran to its end holds nothing: closing it would do nothing.
            if not native or cast("AsyncGeneratorType[Delta, None]", deltas).ag_frame is not None:
                await deltas.aclose()
            if tracer is not None:
                _record_usage(span, first, request.options.model)
    except BaseException as exc:
        bus.publish(TurnFailed(exc))
        raise


async def stream_choices(provider: Provider, request: Request, bus: EventBus, n: int) -> list[Turn | None]:
    """The turns of the ``n`` choices one response streams (``None`` for a choice it never sent); every turn is
    published complete at the end."""
    accs = [Accumulator() for _ in range(n)]
    seen: set[int] = set()

    def take(delta: Delta) -> None:
        try:
            choice = delta.choice
        except AttributeError:
            choice = 0  # not a delta: the accumulator refuses it, naming it
        if not 0 <= choice < n:
            raise StreamError(f"the provider streamed choice {choice} of a request for {n} choices")
        accs[choice].add(delta)
        seen.add(choice)

    await stream(provider, request, bus, take, accs[0])
    model = request.options.model
    turns: list[Turn | None] = [acc.turn(model) if index in seen else None for index, acc in enumerate(accs)]
    for turn in turns:
        if turn is not None:
            bus.publish(TurnCompleted(turn))
    return turns


def _chat_span(tracer: Any, opts: Options) -> Any:
    return tracing.start(tracer, f"chat {opts.model}" if opts.model else "chat", {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": opts.model,
        "gen_ai.request.temperature": opts.temperature,
        "gen_ai.request.max_tokens": opts.max_tokens,
    })


def _cost(usage: Usage, model: str | None) -> float | None:
    """What ``usage`` cost in US dollars at the price of ``model``: the innermost enclosing budget's prices first
    (``Budget(prices=...)``), then ``loop.PRICES``; ``None`` when the model has no known price."""
    for spend in reversed(current_scope().budgets):
        if spend.budget is not None:
            price = spend.budget.price(model)
            if price is not None:
                return price.cost(usage)
    price = price_of(model, PRICES)
    return None if price is None else price.cost(usage)


def _record_usage(span: Any, acc: Accumulator, asked: str | None) -> None:
    found: dict[str, Any] = {}
    usage = acc.usage
    if usage is not None:
        found.update(tracing.usage_attributes(usage, _cost(usage, acc.model or asked)))
    if acc.finish is not None:
        found["gen_ai.response.finish_reasons"] = (acc.finish,)
    if found:
        span.set_attributes(found)  # one call: the SDK takes a lock per call
