"""``ResponseCache``: an identical request is answered from the stored response, replayed as the same deltas,
charged nothing, marked as a hit; sampled turns, failed and cut-short streams are never answered from it."""

import stat
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cognitive import ReAct, WithBudget
from loop import (Budget, Caller, Delta, DeltaStream, Finish, Options, Price, ProviderInfo, Request, Role, State,
                  Step, Text, TextDelta, Tool, ToolCallDelta, ToolSpec, Turn, TurnCompleted, Usage, UsageDelta,
                  UsageError, provider_info, run_context, tool)
from loop._accumulate import REPLAYED
from loop._cache import CACHE_HIT, CacheStore, MemoryCache, ResponseCache, replayed
from loop._cache_sqlite import SQLiteCache
from loop._scope import branch, charging
from loop._spend import Spend
from loop.errors import ServerError
from loop.testing import check_executor
from provider import Scripted, tool_call
from provider.testing import check_provider

HELLO = State().append(Role.USER, Text("hello"))
RESPONSE = (TextDelta("Hel"), TextDelta("lo "), TextDelta("there"),
            ToolCallDelta(0, id="c1", name="look", arguments_fragment='{"q":'),
            ToolCallDelta(0, arguments_fragment=' "x"}'),
            UsageDelta(Usage(120, 30), model="m-1"), Finish("tool_calls"))


class Counting:
    """Streams ``deltas`` for every request, counting the requests; ``fail_after`` raises after that many
    deltas instead of finishing."""

    def __init__(self, deltas: Sequence[Delta] = RESPONSE, *, fail_after: int | None = None,
                 model: str | None = None) -> None:
        self.deltas = tuple(deltas)
        self.fail_after = fail_after
        self.requests: list[Request] = []
        self.info = ProviderInfo(model=model)

    def stream(self, request: Request) -> DeltaStream:
        self.requests.append(request)
        return self._stream()

    async def _stream(self) -> AsyncGenerator[Delta, None]:
        for number, delta in enumerate(self.deltas):
            if number == self.fail_after:
                raise ServerError("the server went away", status=503)
            await anyio.lowlevel.checkpoint()
            yield delta


async def collect(provider: Any, request: Request) -> list[Delta]:
    stream = provider.stream(request)
    try:
        return [delta async for delta in stream]
    finally:
        await stream.aclose()


def request(text: str = "hello", **options: Any) -> Request:
    return Request((Turn(Role.USER, (Text(text),)),), (), Options(**options))


# -- hits replay the same deltas --------------------------------------------------------------------------


async def test_a_hit_replays_the_same_deltas_without_asking_the_provider() -> None:
    inner = Counting()
    cache = ResponseCache(inner)
    first = await collect(cache, request())
    second = await collect(cache, request())
    assert first == list(RESPONSE)
    assert len(inner.requests) == 1
    # Everything as streamed, the usage with zero tokens and the model that answered.
    assert second == [*RESPONSE[:5], UsageDelta(Usage(), model="m-1"), Finish("tool_calls")]
    assert second[5].usage is REPLAYED  # type: ignore[union-attr]
    assert cache.stats.hits == 1 and cache.stats.misses == 1 and cache.stats.stores == 1
    assert cache.stats.saved == Usage(120, 30) and cache.stats.hit_rate == 0.5


def test_replay_puts_one_zero_usage_where_the_first_was_or_before_finish() -> None:
    split = (UsageDelta(Usage(5, 0)), TextDelta("a"), UsageDelta(Usage(0, 2), model="m"), Finish("stop"))
    assert replayed(split) == [UsageDelta(Usage(), "m"), TextDelta("a"), Finish("stop")]
    assert replayed((TextDelta("a"), Finish("stop"))) == [TextDelta("a"), UsageDelta(Usage()), Finish("stop")]
    assert replayed((TextDelta("a"),)) == [TextDelta("a"), UsageDelta(Usage())]


async def test_a_step_over_the_cache_builds_the_same_turn_marked_a_hit_and_publishes_it() -> None:
    cache = ResponseCache(Counting([TextDelta("Hi "), TextDelta("you"), UsageDelta(Usage(9, 2)), Finish("stop")]))
    step = Step(cache)
    missed = await step.turn(HELLO)
    with step.events.subscribe(buffer=None) as events:
        hit = await step.turn(HELLO)
        seen = events.drain()
    assert hit.answer == missed.answer == "Hi you"
    assert "cache" not in missed.last.meta  # type: ignore[union-attr]
    assert {k: v for k, v in hit.last.meta.items() if k != "outcome"} == {  # type: ignore[union-attr]
        "finish_reason": "stop", "cache": "hit"}
    assert hit.outcome is not None and hit.outcome.ok and hit.outcome.data["cache"] == {"hit": True}
    assert missed.outcome is None, "a miss is a plain answer"
    completed = [e.turn for e in seen if isinstance(e, TurnCompleted)]
    assert [t.parts for t in completed] == [hit.last.parts] and completed[0].meta["cache"] == "hit"
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["Hi ", "you"]  # the same chunks, published


async def test_a_hit_is_marked_on_the_chat_span(spans: InMemorySpanExporter) -> None:
    step = Step(ResponseCache(Counting([TextDelta("Hi"), UsageDelta(Usage(9, 2)), Finish("stop")])))
    await step.turn(HELLO)
    await step.turn(HELLO)
    chats = [s for s in spans.get_finished_spans() if s.name == "chat"]
    assert [s.attributes[CACHE_HIT] for s in chats if s.attributes] == [False, True]
    assert chats[1].attributes["gen_ai.usage.input_tokens"] == 0  # type: ignore[index]


# -- a hit charges nothing --------------------------------------------------------------------------------


async def test_a_hit_charges_no_tokens_or_cost_to_a_budget() -> None:
    cache = ResponseCache(Counting([TextDelta("Hi"), UsageDelta(Usage(1000, 500), model="m"), Finish("stop")],
                                   model="m"))
    step = Step(cache)
    prices = {"m": Price(1.0, 2.0)}
    paid, free = Spend(Budget(prices=prices)), Spend(Budget(max_input_tokens=10, max_cost=0.0001, prices=prices))
    with charging(paid):
        await step.turn(HELLO)
    with charging(free):
        answered = await step.turn(HELLO)
    assert paid.spent.input_tokens == 1000 and paid.spent.cost == pytest.approx(0.002)
    assert (free.spent.input_tokens, free.spent.output_tokens, free.spent.cost) == (0, 0, 0.0)
    assert free.exhausted is None and answered.answer == "Hi"
    assert free.spent.turns == 1  # a hit is still a turn of the run: max_turns bounds loops that repeat


async def test_a_run_under_with_budget_reports_zero_spend_for_hits() -> None:
    @tool
    def look(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    cache = ResponseCache(Scripted([[tool_call("look", {"q": "x"}, id="c1"), Usage(50, 5)],
                                    [Text("done"), Usage(40, 4)]]))
    step = Step(cache, tools=[look])
    first = await WithBudget(ReAct(step), Budget(max_input_tokens=10_000), step=step).run(HELLO)
    again = await WithBudget(ReAct(step), Budget(max_input_tokens=10_000), step=step).run(HELLO)
    assert first.answer == again.answer == "done"
    assert first.outcome.data["WithBudget"]["spent"]["input_tokens"] == 90  # type: ignore[union-attr]
    assert "input_tokens" not in again.outcome.data["WithBudget"]["spent"]  # type: ignore[union-attr]
    assert again.last.meta["cache"] == "hit"  # type: ignore[union-attr]
    assert cache.stats.hits == 2 and cache.stats.misses == 2


# -- keys -------------------------------------------------------------------------------------------------


def _keys(cache: ResponseCache, *requests: Request) -> set[str]:
    return {cache.key(r) for r in requests}


def test_keys_differ_by_turns_tools_options_and_model() -> None:
    cache = ResponseCache(Counting(model="base"))
    spec = ToolSpec("look", "Look it up.", {"type": "object"})
    other_spec = ToolSpec("look", "Look it up.", {"type": "object", "properties": {}})
    variants = [
        request(), request("hello!"), Request(request().turns, (spec,)), Request(request().turns, (other_spec,)),
        request(temperature=0.5), request(temperature=0.7), request(max_tokens=10), request(seed=1),
        request(tool_choice="none"), request(stop="x"), request(output_schema={"type": "object"}),
        request(extra={"a": 1}), request(reasoning_effort="low"), request(model="other"),
        Request((Turn(Role.SYSTEM, (Text("hello"),)),)), Request((Turn(Role.USER, (Text("hello"),), name="ada"),)),
    ]
    assert len(_keys(cache, *variants)) == len(variants)
    assert len(cache.key(request())) == 64 and cache.key(request()) == cache.key(request())
    # The provider's own model is the model when the options name none.
    assert cache.key(request()) == cache.key(request(model="base"))
    assert cache.key(request()) != ResponseCache(Counting(model="other")).key(request())
    assert cache.key(request()) != ResponseCache(Counting(model="base"), partition="b").key(request())


def test_keys_ignore_what_the_model_never_sees() -> None:
    cache = ResponseCache(Counting())
    answer = Turn(Role.ASSISTANT, (Text("hi"), Usage(10, 2)), meta={"finish_reason": "stop"})
    replayed_answer = Turn(Role.ASSISTANT, (Text("hi"), Usage()), meta={"cache": "hit"})
    follow = Turn(Role.USER, (Text("more"),))
    assert cache.key(Request((answer, follow))) == cache.key(Request((replayed_answer, follow)))
    assert cache.key(request()) == cache.key(request(run_tools=False))
    assert cache.key(request()) == cache.key(Request(request().turns, path="ReAct"))


def test_keys_differ_by_caller_unless_shared() -> None:
    cache, shared = ResponseCache(Counting()), ResponseCache(Counting(), per_caller=False)
    keys, shared_keys = [], []
    for caller in (None, Caller("ada"), Caller("bob"), Caller("ada", namespace="team")):
        with run_context(caller=caller):
            keys.append(cache.key(request()))
            shared_keys.append(shared.key(request()))
    assert len(set(keys)) == 4 and len(set(shared_keys)) == 1
    with run_context(caller=Caller("ada", claims={"role": "admin"})):
        assert cache.key(request()) == keys[1]  # claims are what the conduit vouches for, not who asks


async def test_two_callers_never_share_an_answer() -> None:
    inner = Counting()
    cache = ResponseCache(inner)
    for caller in (Caller("ada"), Caller("bob"), Caller("ada")):
        with run_context(caller=caller):
            await collect(cache, request())
    assert len(inner.requests) == 2 and cache.stats.hits == 1


async def test_a_request_with_no_json_form_passes_through_uncached() -> None:
    inner = Counting()
    cache = ResponseCache(inner)
    odd = Request(request().turns, (ToolSpec("t", "d", {"default": object()}),))
    with pytest.raises(UsageError, match="cannot be keyed"):
        cache.key(odd)
    await collect(cache, odd)
    await collect(cache, odd)
    assert len(inner.requests) == 2 and cache.stats.bypassed == 2 and cache.stats.stores == 0


# -- sampled turns ----------------------------------------------------------------------------------------


async def test_sample_branches_and_several_choices_pass_through_unless_asked() -> None:
    inner = Counting()
    cache = ResponseCache(inner)
    for _ in range(2):
        with branch("sample 1"):
            await collect(cache, request())
        await collect(cache, Request(request().turns, path="SelfConsistency/sample 2/ReAct"))
        await collect(cache, request(n=3))
    assert len(inner.requests) == 6 and cache.stats.bypassed == 6 and cache.stats.hits == 0
    sampling = ResponseCache(inner, sampled=True)
    for _ in range(2):
        with branch("sample 1"):
            await collect(sampling, request())
    assert sampling.stats.hits == 1
    with branch("sampler"):  # a name that only starts like one is no sample
        await collect(cache, request())
    assert cache.stats.misses == 1


async def test_step_sample_gets_distinct_answers_through_the_cache() -> None:
    answers = iter(["one", "two", "three", "four"])
    calls = []

    class Distinct:
        async def stream(self, request: Request) -> AsyncGenerator[Delta, None]:
            calls.append(request)
            yield TextDelta(next(answers))
            yield Finish("stop")

    step = Step(ResponseCache(Distinct()))
    samples = await step.sample(HELLO, 3)
    assert sorted(s.answer or "" for s in samples) == ["one", "three", "two"]


# -- only complete responses are stored -------------------------------------------------------------------


async def test_a_failed_stream_is_never_stored() -> None:
    inner = Counting(fail_after=3)
    cache = ResponseCache(inner)
    for _ in range(2):
        with pytest.raises(ServerError):
            await collect(cache, request())
    assert len(inner.requests) == 2 and cache.stats.stores == 0 and cache.stats.hits == 0


async def test_a_stream_closed_early_or_cancelled_is_never_stored() -> None:
    inner = Counting()
    cache = ResponseCache(inner)
    stream = cache.stream(request())
    await stream.__anext__()
    await stream.aclose()
    with anyio.CancelScope() as scope:
        async for _ in cache.stream(request()):
            scope.cancel()
    assert scope.cancelled_caught
    assert cache.stats.stores == 0 and len(inner.requests) == 2
    await collect(cache, request())
    await collect(cache, request())
    assert cache.stats.stores == 1 and cache.stats.hits == 1 and len(inner.requests) == 3


async def test_a_cancelled_step_turn_stores_nothing() -> None:
    started = anyio.Event()

    class Slow:
        async def stream(self, request: Request) -> AsyncGenerator[Delta, None]:
            yield TextDelta("part")
            started.set()
            await anyio.sleep_forever()
            yield Finish("stop")

    store = MemoryCache()
    async with anyio.create_task_group() as group:
        group.start_soon(Step(ResponseCache(Slow(), store=store)).turn, HELLO)
        await started.wait()
        group.cancel_scope.cancel()
    assert len(store) == 0


async def test_a_store_that_fails_leaves_the_answer_standing() -> None:
    class Broken(MemoryCache):
        async def get(self, key: str) -> tuple[Delta, ...] | None:
            raise OSError("database is locked")

        async def put(self, key: str, deltas: tuple[Delta, ...]) -> None:
            raise OSError("disk full")

    inner = Counting()
    cache = ResponseCache(inner, store=Broken())
    assert await collect(cache, request()) == list(RESPONSE)
    assert await collect(cache, request()) == list(RESPONSE)
    assert cache.stats.stores == 0 and cache.stats.misses == 2 and len(inner.requests) == 2


# -- stores -----------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


DELTAS = (TextDelta("a"), Finish("stop"))


async def test_memory_store_evicts_the_least_recently_used_and_the_old() -> None:
    clock = Clock()
    store = MemoryCache(max_entries=2, max_age=60, clock=clock)
    await store.put("a", DELTAS)
    await store.put("b", DELTAS)
    assert await store.get("a") == DELTAS  # a is now the most recently used
    await store.put("c", DELTAS)
    assert await store.get("b") is None and await store.get("a") == DELTAS and len(store) == 2
    clock.now += 61
    assert await store.get("a") is None and await store.get("c") is None and len(store) == 0


async def test_sqlite_store_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "responses.db"
    inner = Counting()
    async with SQLiteCache(path) as store:
        await collect(ResponseCache(inner, store=store), request())
    async with SQLiteCache(path) as reopened:
        cache = ResponseCache(inner, store=reopened)
        assert await collect(cache, request()) == replayed(RESPONSE)
        assert await reopened.count() == 1
    assert len(inner.requests) == 1 and cache.stats.hits == 1


async def test_a_new_sqlite_store_is_readable_by_its_owner_only_and_memory_makes_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "new" / "responses.db"
    async with SQLiteCache(path) as store:
        await collect(ResponseCache(Counting(), store=store), request())
        files = sorted(p.name for p in path.parent.iterdir())
        assert files == ["responses.db", "responses.db-shm", "responses.db-wal"]
        assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.iterdir()} == dict.fromkeys(files, 0o600)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    monkeypatch.chdir(tmp_path)
    async with SQLiteCache(":memory:") as in_memory:
        await collect(ResponseCache(Counting(), store=in_memory), request())
        assert await in_memory.count() == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"], "no file named ':memory:'"


async def test_sqlite_store_evicts_by_size_and_age(tmp_path: Path) -> None:
    clock = Clock()
    async with SQLiteCache(tmp_path / "r.db", max_entries=2, max_age=60, clock=clock) as store:
        await store.put("a", DELTAS)
        clock.now += 1
        await store.put("b", DELTAS)
        clock.now += 1
        assert await store.get("a") == DELTAS  # used last: kept
        clock.now += 1
        await store.put("c", DELTAS)
        assert await store.get("b") is None and await store.count() == 2
        clock.now += 59
        assert await store.get("a") is None  # stored 62 seconds ago
        assert await store.get("c") == DELTAS  # stored 59 seconds ago
        clock.now += 30
        await store.put("d", DELTAS)  # writing prunes what aged out
        assert await store.count() == 1


async def test_sqlite_store_reads_a_broken_row_as_a_miss(tmp_path: Path) -> None:
    async with SQLiteCache(tmp_path / "r.db") as store:
        await store.put("a", DELTAS)
        store._open().execute("UPDATE responses SET deltas = '[{\"type\": \"nope\"}]'")
        assert await store.get("a") is None


async def test_a_store_of_ones_own_is_a_cache_store() -> None:
    class Plain:
        def __init__(self) -> None:
            self.rows: dict[str, tuple[Delta, ...]] = {}

        async def get(self, key: str) -> tuple[Delta, ...] | None:
            return self.rows.get(key)

        async def put(self, key: str, deltas: tuple[Delta, ...]) -> None:
            self.rows[key] = deltas

    store = Plain()
    assert isinstance(store, CacheStore)
    cache = ResponseCache(Counting(), store=store)
    await collect(cache, request())
    await collect(cache, request())
    assert cache.stats.hits == 1 and len(store.rows) == 1


# -- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "message"), [
    (lambda: ResponseCache("model"), "ResponseCache needs a provider"),  # type: ignore[arg-type]
    (lambda: ResponseCache(Counting(), store={}), "takes a loop.CacheStore"),  # type: ignore[arg-type]
    (lambda: ResponseCache(Counting(), per_caller="yes"), "per_caller must be True or False"),  # type: ignore[arg-type]
    (lambda: ResponseCache(Counting(), partition=3), "partition must be a string"),  # type: ignore[arg-type]
    (lambda: MemoryCache(max_entries=-1), "max_entries must be a positive integer or None"),
    (lambda: MemoryCache(max_entries=0), "max_entries must be a positive integer or None"),
    (lambda: MemoryCache(max_age=-5), "max_age must be a positive number of seconds or None"),
    (lambda: MemoryCache(clock=3), "clock must be a function"),  # type: ignore[arg-type]
    (lambda: SQLiteCache("x.db", max_entries=-1), "SQLiteCache max_entries must be a positive integer"),
    (lambda: SQLiteCache("x.db", max_age=0), "SQLiteCache max_age must be a positive number"),
    (lambda: SQLiteCache(""), "needs the path of its database file"),
])
def test_bad_settings_are_refused_by_name(make: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        make()


# -- conformance ------------------------------------------------------------------------------------------


async def test_the_cache_passes_the_provider_conformance_check() -> None:
    shared = MemoryCache()
    await check_provider(lambda: ResponseCache(Scripted(["Hello, world."] * 10)))  # misses, fresh stores
    await check_provider(lambda: ResponseCache(Scripted(["Hello, world."] * 10), store=shared))  # hits, mostly


async def test_the_cache_over_sqlite_passes_the_provider_conformance_check(tmp_path: Path) -> None:
    async with SQLiteCache(tmp_path / "c.db") as store:
        await check_provider(lambda: ResponseCache(Scripted(["Hello, world."] * 10), store=store))


async def test_a_step_over_the_cache_passes_the_executor_conformance_check() -> None:
    def fresh(provider: Any, tools: Sequence[Tool]) -> Step:
        return Step(ResponseCache(provider), tools=tools)

    shared = MemoryCache()

    def sharing(provider: Any, tools: Sequence[Tool]) -> Step:
        return Step(ResponseCache(provider, store=shared), tools=tools)

    await check_executor(fresh)
    await check_executor(sharing)


def test_the_cache_says_what_its_provider_says() -> None:
    inner = Scripted(["x"])
    cache = ResponseCache(inner)
    assert provider_info(cache) == provider_info(inner) and Step(cache).samples_in_one_request
    assert "Scripted" in repr(cache)


async def test_closing_the_cache_closes_its_provider() -> None:
    closed = []

    class Closing(Counting):
        async def aclose(self) -> None:
            closed.append(True)

    await ResponseCache(Closing()).aclose()
    await ResponseCache(Counting()).aclose()  # nothing to close: fine
    assert closed == [True]
