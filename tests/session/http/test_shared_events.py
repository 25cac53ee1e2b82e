"""Two servers sharing one store that carries events (a ``FeedStore``): a reader connected to one sees the runs of
the other, and an event id means the same on both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import pytest

from provider import Function
from tests.session.http.helpers import SSE, Served, on_socket
from tests.session.leasing import Shared, Worker
from tests.session.models import echo

pytestmark = pytest.mark.anyio
LEASES = {"lease_ttl": 1.0, "lease_idle": 0.1, "lease_wait": 5.0}


@asynccontextmanager
async def two_servers() -> AsyncIterator[tuple[Served, Served]]:
    shared = Shared()
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(on_socket(Function(echo), store=Worker(shared), manager_options=LEASES))
        b = await stack.enter_async_context(on_socket(Function(echo), store=Worker(shared), manager_options=LEASES))
        yield a, b


async def answered(sse: SSE) -> str:
    """The answer of the next message the stream says finished."""
    frames = await sse.until("message_finished")
    return str(frames[-1].data["answer"])


async def test_a_reader_on_one_server_sees_the_runs_of_another_and_resumes_anywhere() -> None:
    async with two_servers() as (a, b):
        on_a, on_b = a.client(), b.client()
        with anyio.fail_after(20):
            session_id = (await on_a.post("/sessions")).json()["id"]
            assert (await on_a.post(f"/sessions/{session_id}/messages", json={"text": "first"})).status_code == 202
            async with on_b.stream("GET", f"/sessions/{session_id}/events") as response:
                sse = SSE(response)
                assert await answered(sse) == "FIRST"  # a ran it; the reader, on b, came after
                assert (await on_a.post(f"/sessions/{session_id}/messages", json={"text": "second"})).status_code == 202
                frames = await sse.until("message_finished")
                assert frames[-1].data["answer"] == "SECOND"  # a runs it while the reader watches from b
                second_id = frames[-1].id
                assert (await on_b.post(f"/sessions/{session_id}/messages", json={"text": "third"})).status_code == 202
                assert await answered(sse) == "THIRD"  # the conversation moved to b, which runs it
            async with on_a.stream("GET", f"/sessions/{session_id}/events",
                                   headers={"last-event-id": str(second_id)}) as response:
                assert await answered(SSE(response)) == "THIRD"  # b's events, read from a after an id b never gave


async def test_the_reader_gets_every_event_once_in_order_of_its_id() -> None:
    async with two_servers() as (a, b):
        on_a, on_b = a.client(), b.client()
        with anyio.fail_after(20):
            session_id = (await on_a.post("/sessions")).json()["id"]
            for n, client in enumerate((on_a, on_b, on_a, on_b)):
                response = await client.post(f"/sessions/{session_id}/messages", json={"text": f"m{n}"})
                assert response.status_code == 202, response.text
            async with on_b.stream("GET", f"/sessions/{session_id}/events") as response:
                frames = await SSE(response).until("message_finished", 4)
    ids = [f.id for f in frames if f.id is not None]
    assert len(ids) == len(frames)
    assert ids == sorted(set(ids))
    assert [f.data["answer"] for f in frames if f.event == "message_finished"] == ["M0", "M1", "M2", "M3"]
