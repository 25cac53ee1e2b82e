"""Memory over HTTP: two bearer tokens are two callers in two namespaces. What one caller's conversation remembers
is shown in that caller's later conversations and never reaches the other's model requests; once the caller is
erased, their later conversations recall nothing. A semantic cache answers a caller from their own earlier answers
only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from cognitive import ReAct, SemanticCache, new_turn_processor
from cognitive.memory._protocol import Scope
from cognitive.memory._recall import MEMORY_KIND, RecallMemory
from cognitive.memory._remember import Remembering, remember_messages
from cognitive.memory._sqlite import SQLiteMemory
from loop import Executor, Request, Role
from provider import Function
from provider import HashingEmbedder, SymmetricEmbedder
from session._bearer import owner_of
from tests.session.http.helpers import OTHER, TOKEN, on_socket

FACT = "My favourite colour is green and my cat is called Miso."
QUESTION = "What is my favourite colour, and what is my cat called?"


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[SQLiteMemory]:
    async with SQLiteMemory(tmp_path / "memory.db", HashingEmbedder()) as store:
        yield store


class Model:
    """Answers "Noted."; keeps every request, by the text of its newest user message."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> str:
        self.requests.append(request)
        return "Noted."

    def asked(self, text: str) -> list[Request]:
        return [r for r in self.requests if [t for t in r.turns if t.role is Role.USER][-1].text == text]


async def converse(client: httpx.AsyncClient, text: str, wrapper: str = "Remembering") -> dict[str, Any]:
    """Open a conversation, send ``text``, and return its answer turn once the run has finished (its outcome
    holds what ``wrapper`` did: what was remembered), with the conversation's ``session_id``."""
    session_id = (await client.post("/sessions")).json()["id"]
    sent = await client.post(f"/sessions/{session_id}/messages", json={"text": text})
    assert sent.status_code == 202, sent.text
    with anyio.fail_after(10):
        while True:
            turns = (await client.get(f"/sessions/{session_id}/turns")).json()["turns"]
            outcome = turns[-1]["meta"].get("outcome", {}) if len(turns) >= 2 else {}
            if wrapper in outcome.get("data", {}):
                return {**turns[-1], "session_id": session_id}
            await anyio.sleep(0.01)


async def test_a_callers_memories_stay_theirs_and_are_gone_once_erased(memory: SQLiteMemory) -> None:
    def make_agent(step: Executor) -> Remembering:
        shown = step.derive(transforms=(*step.transforms, RecallMemory(memory)))
        return Remembering(ReAct(shown), memory, policy=remember_messages)

    model = Model()
    ann, bob = owner_of(TOKEN), owner_of(OTHER)
    async with on_socket(Function(model), processor=new_turn_processor(make_agent)) as served:
        assert isinstance(served.transport_or_url, str) and served.transport_or_url.startswith("http://127.0.0.1:")
        a, b = served.client(TOKEN), served.client(OTHER)

        told = await converse(a, FACT)
        assert told["meta"]["outcome"]["data"]["Remembering"]["remembered"]
        (kept,) = await memory.items(Scope(ann, ann))
        assert kept.text == FACT and kept.source.endswith(told["session_id"]) and kept.meta["message"].startswith("msg_")

        await converse(a, QUESTION)
        (later,) = model.asked(QUESTION)
        shown = [t for t in later.turns if t.kind == MEMORY_KIND]
        assert len(shown) == 1 and FACT in shown[0].text
        assert later.turns[-2] is shown[0] or later.turns[-2].text == shown[0].text

        before = len(model.requests)
        await converse(b, QUESTION)
        for request in model.requests[before:]:
            assert not any(t.kind == MEMORY_KIND for t in request.turns)
            assert not any("green" in t.text or "Miso" in t.text for t in request.turns)
        assert [i.text for i in await memory.items(Scope(bob, bob))] == [QUESTION]

        assert await memory.erase(ann, ann) == 2  # the fact and the question
        assert await memory.count(Scope(ann, ann)) == 0
        before = len(model.requests)
        await converse(a, QUESTION)
        for request in model.requests[before:]:
            assert not any(t.kind == MEMORY_KIND for t in request.turns)
        assert [i.text for i in await memory.items(Scope(bob, bob))] == [QUESTION]  # the other caller's stays


async def test_a_semantic_cache_answers_each_caller_from_their_own_answers_over_http(tmp_path: Path) -> None:
    model = Model()
    async with SQLiteMemory(tmp_path / "cache.db", SymmetricEmbedder(HashingEmbedder())) as answers:
        def make_agent(step: Executor) -> SemanticCache:
            return SemanticCache(ReAct(step), step, answers, agent="desk", threshold=0.8)

        async with on_socket(Function(model), processor=new_turn_processor(make_agent)) as served:
            a, b = served.client(TOKEN), served.client(OTHER)
            first = await converse(a, "how do I reset my password on the website", "SemanticCache")
            assert first["meta"]["outcome"]["data"]["SemanticCache"] == {"hit": False}
            again = await converse(a, "How do I reset my password on the web site?", "SemanticCache")
            assert again["meta"]["cache"] == "semantic" and again["parts"] == first["parts"]
            assert again["meta"]["outcome"]["data"]["SemanticCache"]["hit"] is True
            other = await converse(b, "how do I reset my password on the website", "SemanticCache")
            assert other["meta"]["outcome"]["data"]["SemanticCache"] == {"hit": False}, "never another caller's"
    assert len(model.requests) == 2, "the model answered each caller once"


async def test_a_judged_semantic_cache_asks_the_sessions_own_step_and_keeps_the_judge_out_of_the_conversation(
        tmp_path: Path) -> None:
    asked: list[Request] = []

    def model(request: Request) -> str:
        asked.append(request)
        if request.path.endswith("SameQuestion"):
            return "Yes" if "web site" in request.turns[-1].text else "No"
        return f"answer {len(asked)}"

    async with SQLiteMemory(tmp_path / "cache.db", SymmetricEmbedder(HashingEmbedder())) as answers:
        def make_agent(step: Executor) -> SemanticCache:
            return SemanticCache(ReAct(step), step, answers, agent="desk", threshold=0.6, judge=step)

        async with on_socket(Function(model), processor=new_turn_processor(make_agent)) as served:
            a = served.client(TOKEN)
            first = await converse(a, "how do I reset my password on the website", "SemanticCache")
            again = await converse(a, "How do I reset my password on the web site?", "SemanticCache")
            assert again["meta"]["cache"] == "semantic" and again["parts"] == first["parts"]
            assert again["meta"]["outcome"]["data"]["SemanticCache"]["judged"] is True
            other = await converse(a, "how do I reset my router on the website", "SemanticCache")
            assert other["meta"]["outcome"]["data"]["SemanticCache"]["hit"] is False
            assert other["meta"]["outcome"]["data"]["SemanticCache"]["judged"] is False
            turns = (await a.get(f"/sessions/{again['session_id']}/turns")).json()["turns"]
            assert [t["role"] for t in turns] == ["user", "assistant"], "the judge is not part of the conversation"
    judged = [r for r in asked if r.path.endswith("SameQuestion")]
    assert len(judged) == 2 and all(r.tools == () for r in judged)
    assert len(asked) == 4, "answer, judge (yes), judge (no), answer"
