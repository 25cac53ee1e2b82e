"""``loop.tracing``: OpenTelemetry spans with GenAI attributes, free while tracing is off."""

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loop import (Budget, Options, Price, Role, Spend, State, Step, Text, Usage, UsageError, charging, scope, tool,
                  tracing)
from loop.errors import ProviderError
from provider import Scripted, tool_call

START = State().append(Role.USER, Text("go"))


@tool
async def lookup(q: str) -> str:
    """Look it up."""
    return f"found {q}"


@tool
async def broken() -> str:
    """Fails."""
    raise ValueError("nope")


def test_tracing_is_off_without_a_provider() -> None:
    # the global provider is never set in tests; the framework must notice it is a no-op
    assert isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    assert tracing.enabled() is False
    assert tracing.span("turn", {"a": 1}) is tracing.NOOP_SPAN


def test_the_noop_span_does_nothing() -> None:
    with tracing.span("x") as span:
        span.set_attribute("k", "v")
        span.set_attributes({"k": "v"})
        span.add_event("e")
        assert span.is_recording() is False
    assert span is tracing.NOOP_SPAN


def test_configure_none_goes_back_to_the_global_provider(spans: InMemorySpanExporter) -> None:
    assert tracing.enabled()
    tracing.configure(trace.NoOpTracerProvider())
    assert not tracing.enabled()
    tracing.configure(None)
    assert not tracing.enabled()


def test_span_leaves_out_none_attributes(spans: InMemorySpanExporter) -> None:
    with tracing.span("work", {"kept": 1, "dropped": None}) as span:
        assert span is not tracing.NOOP_SPAN and span.is_recording()
    (finished,) = spans.get_finished_spans()
    assert finished.name == "work"
    assert dict(finished.attributes or {}) == {"kept": 1}


def by_name(spans: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    finished = spans.get_finished_spans()
    named = {s.name: s for s in finished}
    assert len(named) == len(finished), [s.name for s in finished]
    return named


async def test_a_turn_with_a_tool_call_makes_genai_spans_under_the_callers_span(
    spans: InMemorySpanExporter,
) -> None:
    reply = [Text("Looking."), tool_call("lookup", {"q": "x"}, id="c1"), Usage(11, 7)]
    step = Step(Scripted([reply]), tools=[lookup], options=Options(temperature=0.5))
    with tracing.span("agent"):
        await step.turn(START)
    named = by_name(spans)
    assert set(named) == {"agent", "chat", "execute_tool lookup"}
    agent, chat, tool_span = named["agent"], named["chat"], named["execute_tool lookup"]
    assert agent.parent is None
    # The model call and the tool call are siblings, as in the GenAI conventions.
    assert chat.parent is not None and chat.parent.span_id == agent.context.span_id
    assert tool_span.parent is not None and tool_span.parent.span_id == agent.context.span_id
    assert chat.context.trace_id == tool_span.context.trace_id == agent.context.trace_id
    assert chat.end_time is not None and tool_span.start_time is not None
    assert chat.end_time <= tool_span.start_time
    assert dict(chat.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.temperature": 0.5,
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert dict(tool_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "c1",
    }


async def test_chat_span_names_the_model_and_omits_usage_when_none_is_streamed(spans: InMemorySpanExporter) -> None:
    await Step(Scripted(["hi"]), options=Options(model="m-1", max_tokens=64)).turn(START)
    chat = by_name(spans)["chat m-1"]
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.request.model"] == "m-1" and attributes["gen_ai.request.max_tokens"] == 64
    assert "gen_ai.usage.input_tokens" not in attributes


async def test_chat_span_carries_the_cache_counts_and_the_cost_at_the_budgets_price(
    spans: InMemorySpanExporter,
) -> None:
    usage = Usage(1_000_000, 100_000, cache_read_tokens=600_000, cache_write_tokens=200_000)
    step = Step(Scripted([["hi", usage]]), options=Options(model="house-model"))
    await step.turn(START)  # no known price: no cost on the span
    assert "cognitive_loop.usage.cost" not in dict(by_name(spans)["chat house-model"].attributes or {})
    spans.clear()
    price = Price(input=1.0, output=2.0, cached_input=0.1, cache_write=1.25)
    with charging(Spend(Budget(prices={"house-model": price}))):
        await Step(Scripted([["hi", usage]]), options=Options(model="house-model")).turn(START)
    attributes = dict(by_name(spans)["chat house-model"].attributes or {})
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 600_000
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 200_000
    # 200k plain input at $1, 600k read at $0.1, 200k written at $1.25, 100k output at $2 (per million)
    assert attributes["cognitive_loop.usage.cost"] == pytest.approx(0.2 + 0.06 + 0.25 + 0.2)


async def test_parallel_tools_each_get_a_span_under_the_callers_span(spans: InMemorySpanExporter) -> None:
    reply = [tool_call("lookup", {"q": "a"}), tool_call("broken")]
    with tracing.span("agent"):
        await Step(Scripted([reply]), tools=[lookup, broken]).turn(START)
    named = by_name(spans)
    turn_id = named["agent"].context.span_id
    for name in ("execute_tool lookup", "execute_tool broken"):
        parent = named[name].parent
        assert parent is not None and parent.span_id == turn_id
    assert (named["execute_tool broken"].attributes or {}).get("error.type") == "tool_error"
    assert "error.type" not in (named["execute_tool lookup"].attributes or {})


async def test_a_failed_turn_records_the_error(spans: InMemorySpanExporter) -> None:
    with pytest.raises(ProviderError):
        await Step(Scripted([ProviderError("down", status=503)])).turn(START)
    named = by_name(spans)
    assert set(named) == {"chat"}
    assert not named["chat"].status.is_ok
    assert any(e.name == "exception" for e in named["chat"].events)


async def test_spans_name_the_run_path_they_were_made_on(spans: InMemorySpanExporter) -> None:
    step = Step(Scripted([[tool_call("lookup", {"q": "x"}, id="c1")], "done"]), tools=[lookup])
    with scope("Outer"), scope("Mine"):
        state = await step.turn(START)
    await step.turn(state)  # outside any pattern: no path to name
    chats = [dict(s.attributes or {}) for s in spans.get_finished_spans() if s.name == "chat"]
    assert [c.get("cognitive_loop.run.path") for c in chats] == ["Outer/Mine", None]
    (tool_span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool lookup"]
    assert (tool_span.attributes or {})["cognitive_loop.run.path"] == "Outer/Mine"


def test_configure_logging_names_a_bad_level_and_writes_json_lines() -> None:
    import io
    import json

    import structlog

    with pytest.raises(UsageError, match="unknown log level 'loud'"):
        tracing.configure_logging(level="loud")
    out = io.StringIO()
    saved = structlog.get_config()
    try:
        tracing.configure_logging(level="info", json=True, stream=out)
        tracing.logger("test").info("hello", n=1)
        tracing.logger("test").debug("hidden")
    finally:
        structlog.configure(**saved)
    (line,) = out.getvalue().splitlines()
    assert json.loads(line)["event"] == "hello" and json.loads(line)["n"] == 1


async def test_a_cancelled_span_ends_without_an_error_and_is_current_inside(spans: InMemorySpanExporter) -> None:
    with anyio.move_on_after(0.01):
        with tracing.span("outer") as outer:
            assert trace.get_current_span() is outer
            with tracing.span("inner"):
                await anyio.sleep(5)
    assert trace.get_current_span() is trace.INVALID_SPAN, "the context is restored after the blocks"
    named = by_name(spans)
    assert set(named) == {"outer", "inner"}
    assert named["inner"].parent is not None and named["inner"].parent.span_id == named["outer"].context.span_id
    assert all(span.status.is_unset and not span.events for span in named.values())
