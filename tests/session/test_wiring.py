"""What a ``Manager`` refuses at construction, and the errors its block lets out: the cause, not a group around it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import pytest

from cognitive import new_turn_processor, react_factory
from loop import Role, State, Text, ToolCall, Turn, UsageError
from provider import Function
from session import Manager, MemoryStore, MessageFailed, StoreError
from session._groups import unwrap
from tests.session.models import echo


PROCESSOR = new_turn_processor(react_factory)
MODEL = Function(echo)


class RefusingStore(MemoryStore):
    """Holds a conversation left with an open tool call, and refuses every write (repairing it fails)."""

    async def load(self, session_id: str) -> State | None:
        return State((Turn(Role.USER, (Text("hi"),)), Turn(Role.ASSISTANT, (ToolCall("c1", "wait"),))))

    async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None:
        raise StoreError("the disk is full")


async def test_a_bad_message_raises_usage_error_itself_out_of_the_manager_block() -> None:
    with pytest.raises(UsageError,
                       match="a message is a string, Text, Image and File parts, or ToolResult parts .*, got 42") as caught:
        async with Manager(PROCESSOR, provider=MODEL) as manager:
            session = await manager.open()
            await session.ask(42)  # type: ignore[arg-type]
    assert type(caught.value) is UsageError


async def test_a_worker_that_fails_raises_its_error_not_a_group() -> None:
    with pytest.raises(StoreError, match="the disk is full") as caught:
        async with Manager(PROCESSOR, provider=MODEL, store=RefusingStore()) as manager:
            await manager.open("broken")
            await anyio.sleep_forever()
    assert type(caught.value) is StoreError
    assert caught.value.__suppress_context__  # no "during handling of the group" chain in its traceback


async def test_an_answered_block_still_leaves_quietly() -> None:
    async with Manager(PROCESSOR, provider=MODEL) as manager:
        assert (await (await manager.open()).ask("hi")).answer == "HI"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # only asyncio's cancellation can be made by hand
async def test_unwrap_keeps_groups_of_several_errors_and_opens_nested_singles() -> None:
    one = ValueError("one")
    assert unwrap(ExceptionGroup("outer", [ExceptionGroup("inner", [one])])) is one
    several = ExceptionGroup("two", [ValueError("a"), KeyError("b")])
    assert unwrap(several) is several
    cancelled = anyio.get_cancelled_exc_class()()
    assert unwrap(BaseExceptionGroup("with a cancellation", [one, cancelled])) is one
    only_cancelled = BaseExceptionGroup("cancelled", [cancelled])
    assert unwrap(only_cancelled) is only_cancelled


def test_a_pattern_factory_is_refused_with_the_fix() -> None:
    with pytest.raises(UsageError, match=r"pass new_turn_processor\(react_factory\)"):
        Manager(react_factory, provider=MODEL)  # type: ignore[arg-type]

    def make_agent(executor: Any) -> Any:
        return None

    with pytest.raises(UsageError, match=r"new_turn_processor\(make_agent\)"):
        Manager(make_agent, provider=MODEL)


def test_a_store_url_is_refused_with_the_fix() -> None:
    with pytest.raises(UsageError, match=r"open_store\('sqlite:///x.db'\)"):
        Manager(PROCESSOR, provider=MODEL, store="sqlite:///x.db")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="a Store"):
        Manager(PROCESSOR, provider=MODEL, store=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("queue_size", [0, -1, 1.5, "8", True, None])
def test_queue_size_must_be_a_positive_integer(queue_size: Any) -> None:
    with pytest.raises(UsageError, match=f"queue_size must be a positive integer, got {queue_size!r}"):
        Manager(PROCESSOR, provider=MODEL, queue_size=queue_size)


def test_make_step_must_be_callable() -> None:
    with pytest.raises(UsageError, match="make_step"):
        Manager(PROCESSOR, provider=MODEL, make_step="step")  # type: ignore[arg-type]


def test_right_wiring_is_accepted() -> None:
    async def processor(executor: Any, state: State, *extra: Any) -> State:
        return state

    Manager(processor, provider=MODEL, store=MemoryStore(), queue_size=1)
    Manager(PROCESSOR, provider=MODEL)


def test_unwrap_works_outside_an_event_loop() -> None:
    one = ValueError("one")
    assert unwrap(ExceptionGroup("outer", [one])) is one


async def test_a_processor_whose_task_group_failed_reports_the_one_error_that_caused_it() -> None:
    async def grouped(executor: Any, state: State) -> State:
        async def broken() -> None:
            raise LookupError("no such record")

        async with anyio.create_task_group() as group:
            group.start_soon(broken)
            await anyio.sleep(1)
        return state

    async with Manager(grouped, provider=Function(lambda r: "x")) as manager:
        session = await manager.open("s")
        with session.events.subscribe(buffer=None) as events:
            with pytest.raises(LookupError, match="no such record"):
                await session.ask("go")
            (failed,) = [e for e in events.drain() if isinstance(e, MessageFailed)]
    assert (failed.kind, failed.error) == ("LookupError", "no such record")
