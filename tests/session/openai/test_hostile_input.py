"""Bodies built to break the OpenAI-compatible endpoint: lone surrogates anywhere and deeply nested JSON are
refused with 400 in OpenAI's error format, and an answer holding a lone surrogate still goes out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from cognitive import new_turn_processor, react_factory
from loop import Request
from provider import Function
from session import Manager, SQLiteStore
from session.openai import openai_app
from session.openai._request import OpenAIError, parse_chat_request
from tests.session.models import echo
from tests.session.openai.test_api import serving


def body(messages: str, **fields: Any) -> bytes:
    """A request body with ``messages`` as raw JSON text (so it can hold escapes json.dumps would not write)."""
    extra = "".join(f', "{k}": {json.dumps(v)}' for k, v in fields.items())
    return f'{{"model": "agent", "messages": {messages}{extra}}}'.encode()


@pytest.mark.parametrize(("messages", "where"), [
    ('[{"role": "user", "content": "bad \\ud800"}]', "messages[0].content"),
    ('[{"role": "system", "content": "\\udfff"}, {"role": "user", "content": "hi"}]', "messages[0].content"),
    ('[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "\\ud800b"}]}]',
     "messages[0].content[1].text"),
    ('[{"role": "user", "content": "hi", "name": "\\udc00"}]', "messages[0].name"),
])
async def test_a_lone_surrogate_anywhere_is_refused_at_the_door(messages: str, where: str, tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:  # the durable store, which cannot write such text
        manager = Manager(new_turn_processor(react_factory), provider=Function(echo), store=store)
        app = openai_app(manager, enter_manager=False)
        async with manager, httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as http:
            refused = await http.post("/v1/chat/completions", content=body(messages))
            named = await http.post("/v1/chat/completions", content=body(messages), headers={"x-session-id": "kept"})
    for response in (refused, named):
        assert response.status_code == 400, response.text
        assert response.json()["error"] == {
            "message": f"Invalid '{where}': it holds a lone UTF-16 surrogate (an escape such as \\ud800 without its "
                       "pair), which is not valid Unicode text.",
            "type": "invalid_request_error", "param": where, "code": "invalid_unicode"}


def test_the_parser_refuses_a_surrogate_in_any_field_and_takes_a_pair() -> None:
    with pytest.raises(OpenAIError) as refused:
        parse_chat_request(body('[{"role": "user", "content": "x"}]', user="\udc00"), model_name="agent")
    assert refused.value.param == "user"
    paired = parse_chat_request(body('[{"role": "user", "content": "\\ud83d\\ude00"}]'), model_name="agent")
    assert paired.message == "\N{GRINNING FACE}"


@pytest.mark.parametrize("depth", [65, 200_000])
async def test_deeply_nested_json_is_refused_with_400(depth: int) -> None:
    deep = b'{"model": "agent", "messages": [{"role": "user", "content": "hi"}], "x": ' + b"[" * depth + b"]" * depth
    async with serving(Function(echo)) as served:
        response = await served.http.post("/v1/chat/completions", content=deep + b"}")
    assert response.status_code == 400
    assert response.json()["error"] == {"message": "The JSON body of your request nests arrays and objects more "
                                                   "than 64 levels deep.",
                                        "type": "invalid_request_error", "param": None, "code": "json_too_deep"}


def test_nesting_up_to_the_limit_is_read() -> None:
    deep = b'{"model": "agent", "messages": [{"role": "user", "content": "hi"}], "x": ' + b"[" * 63 + b"]" * 63
    assert parse_chat_request(deep + b"}", model_name="agent").message == "hi"


async def test_an_answer_holding_a_lone_surrogate_still_goes_out() -> None:
    def model(request: Request) -> str:
        return "odd \ud800 answer"

    async with serving(Function(model)) as served:
        whole = await served.http.post("/v1/chat/completions", content=body('[{"role": "user", "content": "hi"}]'))
        streamed = await served.http.post("/v1/chat/completions",
                                          content=body('[{"role": "user", "content": "hi"}]', stream=True))
    assert whole.status_code == 200, whole.text
    assert json.loads(whole.content)["choices"][0]["message"]["content"] == "odd \ud800 answer"
    assert streamed.status_code == 200
    events = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "odd \ud800 answer"
