"""What the AG-UI route refuses and how it lets go: bad input named, tokens and their threads, a client that
disconnects, a quiet stream kept alive."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from loop import Request, Role, tool
from provider import Function, tool_call
from tests.session.agui.helpers import OTHER, in_process, on_socket, parse_stream, run, run_input, user
from tests.session.models import echo


@pytest.mark.parametrize(("body", "status", "named"), [
    ({"runId": "r", "messages": []}, 422, "threadId"),
    ({"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "user"}]}, 422, "messages[0].content"),
    ({"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "robot", "content": "x"}]}, 422, "messages[0]"),
    ({"threadId": "t", "runId": "r", "messages": []}, 422, "last message"),
    ({"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "user", "content": [
        {"type": "image", "source": {"type": "file", "value": "file-1"}}]}]}, 422, "messages[0].content[0]"),
    ({"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "user", "content": "hi"}],
      "tools": [{"name": "bad name", "description": "x"}]}, 422, "tools[0].name"),
    ({"threadId": "", "runId": "r", "messages": [{"id": "1", "role": "user", "content": "hi"}]}, 422, "threadId"),
])
async def test_bad_input_is_refused_naming_the_field(body: dict[str, Any], status: int, named: str) -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client().post("/agui", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and named in error["message"]


async def test_a_body_that_is_not_json_is_400() -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client().post("/agui", content=b"{nope", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "bad_json"


async def test_a_token_is_needed_and_another_token_cannot_reach_the_thread() -> None:
    seen: list[list[str]] = []

    def model(request: Request) -> str:
        seen.append([t.text for t in request.turns])
        return "ok"

    async with in_process(Function(model)) as served:
        refused = await served.client(token=None).post("/agui", json=run_input("mine", [user("secret")]))
        await run(served.client(), run_input("mine", [user("secret")]))
        theirs = await run(served.client(OTHER), run_input("mine", [user("hello")]))
        turns = await served.client(OTHER).get("/sessions/mine/turns")
    assert refused.status_code == 401
    assert seen[1] == ["hello"], "the other token's thread of the same name is a conversation of its own"
    assert [m.content for m in theirs[-2].messages] == ["hello", "ok"]
    assert [t["parts"][0]["text"] for t in turns.json()["turns"]] == ["hello", "ok"]


class Slow:
    """A tool that waits until cancelled, noting it."""

    def __init__(self) -> None:
        self.running = anyio.Event()
        self.cancelled = anyio.Event()

    async def __call__(self) -> str:
        self.running.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled.set()
        return "never"


async def test_a_client_that_disconnects_stops_its_run_and_quiet_streams_are_kept_alive() -> None:
    slow = Slow()

    @tool
    async def wait() -> str:
        """Wait."""
        return await slow()

    def model(request: Request) -> Any:
        if request.turns[-1].role is Role.TOOL:
            return "finished"
        return tool_call("wait", {}, id="w1")

    async with on_socket(Function(model), tools=[wait], keepalive=0.05) as served:
        client = served.client()
        text = ""
        async with client.stream("POST", "/agui", json=run_input("slow", [user("wait")])) as response:
            assert response.status_code == 200
            with anyio.fail_after(10):
                async for chunk in response.aiter_text():
                    text += chunk
                    if slow.running.is_set() and ": keep-alive" in text:
                        break
        with anyio.fail_after(10):
            await slow.cancelled.wait()
            while served.session("slow") is None or served.session("slow").busy:
                await anyio.sleep(0.01)
        turns = (await client.get("/sessions/slow/turns")).json()["turns"]
    assert [e.type.value for e in parse_stream(text)][:2] == ["RUN_STARTED", "STEP_STARTED"]
    assert turns[-1]["role"] == "tool" and "cancel" in turns[-1]["parts"][0]["content"]
