"""A client's ``response_format`` schema cannot stall the server: its regular expressions (``pattern``,
``patternProperties``) are matched in linear time (RE2), so a pattern built to backtrack (``^(a+)+$``) against an
answer built to make it (27 ``a`` then ``!``) is answered while ``/healthz`` keeps answering within 100 ms; and a
pattern RE2 cannot compile (a lookaround, a backreference) is refused with 400, naming it, before anything runs."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx
import pytest

from loop import Request
from provider import Function
from tests.session.http.helpers import in_process, on_socket
from tests.session.models import echo

EVIL = "a" * 27 + "!"  # ^(a+)+$ takes Python's backtracking `re` some 2**27 steps to refuse it: about 17 s
SCHEMAS = {
    "pattern": ({"type": "string", "pattern": "^(a+)+$"}, EVIL),
    "patternProperties": ({"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}},
                           "additionalProperties": False}, {EVIL: 1}),
    "unevaluatedProperties": ({"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}},
                               "unevaluatedProperties": False}, {EVIL: 1}),
}


def chat(schema: dict[str, Any], text: str = "hi") -> dict[str, Any]:
    return {"model": "agent", "messages": [{"role": "user", "content": text}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


@pytest.mark.parametrize("case", list(SCHEMAS))
async def test_a_backtracking_pattern_neither_stalls_the_server_nor_the_request(case: str) -> None:
    schema, answer = SCHEMAS[case]

    def model(request: Request) -> str:  # told to echo the evil value, it does, every turn
        return json.dumps(answer)

    waits: list[float] = []
    async with on_socket(Function(model)) as served:
        client, probe = served.client(), served.client(None)  # /healthz is open
        assert (await probe.get("/healthz")).status_code == 200  # the probe's connection is open before

        async def probing(done: anyio.Event) -> None:
            while not done.is_set():
                started = time.perf_counter()
                healthy = await probe.get("/healthz")
                waits.append(time.perf_counter() - started)
                assert healthy.status_code == 200
                await anyio.sleep(0.01)

        done = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(probing, done)
            started = time.perf_counter()
            response = await client.post("/v1/chat/completions", json=chat(schema, json.dumps(answer)),
                                         timeout=httpx.Timeout(300))
            took = time.perf_counter() - started
            done.set()
    # A backtracking match would hold the loop for minutes; a loaded machine may delay a probe by a fraction.
    assert waits and max(waits) < 1.0, f"/healthz waited up to {max(waits):.3f} s; the request took {took:.3f} s"
    # The answer never matches, through every formatting turn: a well-formed error, in OpenAI's format.
    assert response.status_code == 500, response.text
    error = response.json()["error"]
    assert error["code"] == "verification_failed" and error["type"] == "server_error"
    assert "never matched x" in error["message"]


async def test_an_answer_that_matches_a_pattern_is_the_content() -> None:
    def model(request: Request) -> str:
        return json.dumps({"code": "ab-12"})

    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": r"^[a-z]+-\d+$"}},
              "patternProperties": {"^c": {"type": "string"}}, "required": ["code"], "additionalProperties": False}
    async with in_process(Function(model)) as served:
        response = await served.client().post("/v1/chat/completions", json=chat(schema))
    assert response.status_code == 200, response.text
    assert json.loads(response.json()["choices"][0]["message"]["content"]) == {"code": "ab-12"}


@pytest.mark.parametrize(("schema", "pattern"), [
    ({"type": "string", "pattern": "^(?=a)a+$"}, "^(?=a)a+$"),  # a lookahead
    ({"type": "string", "pattern": "(?<!b)a"}, "(?<!b)a"),  # a lookbehind
    ({"type": "object", "patternProperties": {r"^(a)\1$": {}}}, r"^(a)\1$"),  # a backreference
    ({"type": "object", "properties": {"x": {"$ref": "#/$defs/word"}},
      "$defs": {"word": {"type": "string", "pattern": r"^(\w)\1*$"}}}, r"^(\w)\1*$"),  # deep in a definition
    ({"type": "array", "items": {"type": "object", "properties": {"k": {
        "type": "object", "patternProperties": {"(?!x)": {"type": "string"}}}}}}, "(?!x)"),
])
async def test_a_pattern_re2_cannot_compile_is_refused_naming_it(schema: dict[str, Any], pattern: str) -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client().post("/v1/chat/completions", json=chat(schema))
        assert served.manager.open_sessions == 0  # refused before a session opened
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_schema" and error["param"] == "response_format.json_schema.schema"
    assert error["type"] == "invalid_request_error"
    assert repr(pattern) in error["message"] and "RE2" in error["message"]
