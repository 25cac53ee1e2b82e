"""One ``python -m session serve`` process answers every protocol on one port and one token: Chat Completions and
the Responses API (the official openai client), MCP at ``/mcp`` (the mcp SDK's streamable HTTP client) and A2A at
``/a2a`` (a2a-sdk's client, from the agent card it discovers). Each asks the quickstart agent the same question
and gets its answer; a wrong token is refused by each."""

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import httpx2
import openai
import pytest
from a2a.client.errors import A2AClientError
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.session.a2a.helpers import sdk_client, send, state_of, task_of
from tests.session.test_cli import ENV, ROOT, read_until

TOKEN = "one-port-token"
QUESTION = "What is 2 + 3?"
ANSWER = "2 + 3 = 5"


@pytest.fixture
def anyio_backend() -> str:
    """The server is a child process; a2a-sdk's client and the openai client run here on asyncio."""
    return "asyncio"


@asynccontextmanager
async def served() -> AsyncIterator[str]:
    """``python -m session serve examples.quickstart:make_agent`` on a free port; yields its URL."""
    child = subprocess.Popen([sys.executable, "-m", "session", "serve", "examples.quickstart:make_agent", "--port", "0",
                              "--store", "memory://", "--token", TOKEN], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
    try:
        said = await read_until(child.stderr, "OpenAPI at /openapi.json")
        assert "A2A at /a2a" in said and "MCP at /mcp" in said, said
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+):", said)
        assert found, said
        yield found.group(1)
    finally:
        child.terminate()
        child.wait(timeout=20)
        child.stderr.close()  # type: ignore[union-attr]


async def test_one_served_process_speaks_chat_completions_responses_mcp_and_a2a() -> None:
    async with served() as url:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0) as api:
            chat = await api.chat.completions.create(model="agent", messages=[{"role": "user", "content": QUESTION}])
            response = await api.responses.create(model="agent", input=QUESTION)
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=20) as http:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp:
                called = await mcp.call_tool("ask", {"message": QUESTION})
        async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=20) as http:
            a2a = await sdk_client(http, streaming=False)
            task = task_of([r async for r in a2a.send_message(send(QUESTION))])
    assert chat.choices[0].message.content == ANSWER
    assert response.output_text == ANSWER
    assert [c.text for c in called.content] == [ANSWER]
    assert state_of(task) == "TASK_STATE_COMPLETED"
    assert [p.text for a in task.artifacts for p in a.parts] == [ANSWER]


async def test_every_protocol_refuses_a_wrong_token() -> None:
    async with served() as url:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0) as api:
            with pytest.raises(openai.AuthenticationError):
                await api.responses.create(model="agent", input=QUESTION)
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            for path in ("/v1/chat/completions", "/v1/responses", "/mcp", "/a2a"):
                answer = await http.post(path, json={}, headers={"authorization": "Bearer wrong"})
                assert answer.status_code == 401, (path, answer.text)
            card = await http.get("/.well-known/agent-card.json")  # public: it says how to authenticate
        assert card.status_code == 200 and card.json()["securitySchemes"], card.text
        async with httpx.AsyncClient(base_url=url, headers={"authorization": "Bearer wrong"}, timeout=20) as http:
            a2a = await sdk_client(http, streaming=False)
            with anyio.fail_after(20), pytest.raises(A2AClientError):
                [r async for r in a2a.send_message(send(QUESTION))]
