"""The HTTP conduit against its own OpenAPI document, by schema-driven fuzzing.

Schemathesis generates requests from the document (``/openapi.json`` serves the same: see ``test_limits``),
valid and invalid ones, and sends them to a real server on 127.0.0.1. Every response must have a documented
status and content type, conform to its schema (an event stream, event by event), and never be a 5xx; valid
requests must be accepted and invalid ones refused (except on ``/v1/chat/completions`` and ``/v1/responses``,
whose messages follow rules a JSON Schema cannot state, such as the last one being the user's). A first pass
fuzzes every operation, with made-up session ids (so mostly 404); a second fuzzes the routes of one real session,
its event stream included. The examples are bounded and seeded, so every run sends the same requests.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import httpx
import hypothesis.configuration
import jsonschema
import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import ignored_auth

from cognitive import new_turn_processor, react_factory
from provider import Function
from session import Manager, step_factory
from session.http import HTTPConduit
from session.http._openapi import OPENAPI
from tests.session.http.helpers import OTHER, TOKEN
from tests.session.models import echo

pytestmark = pytest.mark.slow

# Hypothesis keeps caches in ./.hypothesis, which the next pytest run would try to collect (the project's
# norecursedirs replaces pytest's defaults): keep them out of the work tree.
hypothesis.configuration.set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "cognitive-loop-hypothesis")

EXAMPLES = 100  # per operation and phase; the whole module takes about 20 s


@asynccontextmanager
async def _serving() -> AsyncIterator[str]:
    conduit = HTTPConduit(host="127.0.0.1", port=0, token=[TOKEN, OTHER], rate_limit=None)
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), make_step=step_factory()) as manager:
        async with anyio.create_task_group() as group:
            url = await group.start(conduit.serve, manager)
            yield url
            group.cancel_scope.cancel()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The conduit served on 127.0.0.1 from a thread of its own, for Schemathesis's blocking client."""
    with anyio.from_thread.start_blocking_portal() as portal, portal.wrap_async_context_manager(_serving()) as url:
        yield url


def _config(token: str, **settings: Any) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict({
        "seed": 13,
        "auth": {"openapi": {"bearer": {"bearer": token}}},
        # No made-up query parameters: the server ignores those, as HTTP APIs do, which the check would take
        # for accepting invalid data.
        "generation": {"mode": "all", "max-examples": EXAMPLES, "database": "none", "allow-extra-parameters": False},
        "request-timeout": 10,
        # These bodies follow another's schema (OpenAI's messages and input items, AG-UI's RunAgentInput), which
        # the document only outlines: a body the outline allows may still be refused, named (the servers' own
        # tests check those).
        "operations": [{"include-path": "/v1/chat/completions",
                        "checks": {"positive_data_acceptance": {"enabled": False}}},
                       {"include-path": "/v1/responses", "checks": {"positive_data_acceptance": {"enabled": False}}},
                       {"include-path": "/agui", "checks": {"positive_data_acceptance": {"enabled": False}}}],
        **settings,
    })


DOCUMENT = json.loads(json.dumps(OPENAPI))  # as /openapi.json serves it
SESSION = "fuzzed"  # OTHER's session the second pass aims at (opened through /v1, which lets a client name it)

every_operation = schemathesis.openapi.from_dict(DOCUMENT, config=_config(TOKEN))
# Without the coverage phase: with the id fixed, its cases are misjudged (a body it made invalid is taken for a
# valid request).
one_session = schemathesis.openapi.from_dict(DOCUMENT, config=_config(
    OTHER, parameters={"id": SESSION}, phases={"coverage": {"enabled": False}},
    # The event stream never ends: three events are enough, and a stream asked for events yet to come is left
    # after 2 s.
    **{"max-stream-events": 3, "request-timeout": 2},
    operations=[{"exclude-path-regex": r"^/sessions/\{id\}/(messages|interrupt|turns|events)$", "enabled": False}]))


@pytest.fixture(scope="module")
def real_session(server: str) -> str:
    """``server``, with OTHER's session ``SESSION`` open and holding a conversation (another token than the
    first pass's, which may use up its own quota of sessions)."""
    with httpx.Client(base_url=server, headers={"authorization": f"Bearer {OTHER}", "x-session-id": SESSION}) as client:
        answer = client.post("/v1/chat/completions", json={"model": "agent", "messages": [{"role": "user",
                                                                                            "content": "hi"}]})
        assert answer.status_code == 200, answer.text
        # A message through the session API too, so that its event log holds events to stream at once.
        assert client.post(f"/sessions/{SESSION}/messages", json={"text": "hello"}).status_code == 202
        deadline = time.monotonic() + 10
        while len(client.get(f"/sessions/{SESSION}/turns").json()["turns"]) < 4:
            assert time.monotonic() < deadline, "the session did not answer"
            time.sleep(0.01)
    return server


@every_operation.parametrize()
def test_every_operation_answers_as_documented(case: schemathesis.Case, server: str) -> None:
    case.call_and_validate(base_url=server)


@one_session.parametrize()
def test_a_real_session_answers_as_documented(case: schemathesis.Case, real_session: str) -> None:
    case.call_and_validate(base_url=real_session)



CHAT_REQUEST = every_operation["/v1/chat/completions"]["POST"]
CHAT_SCHEMA = jsonschema.Draft202012Validator({**DOCUMENT, "$ref": "#/components/schemas/ChatRequest"})


@pytest.mark.parametrize(("response_format", "status", "documented"), [
    ({}, 400, False),  # the document allowed any object here, which the server refused
    ({"type": "text"}, 200, True),
    ({"type": "json_schema", "json_schema": {"name": "two words"}}, 400, False),
    # What JSON Schema cannot say: a pattern RE2 cannot compile (see the document's JSONSchemaFormat.schema).
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(?=a)"}}}, 400,
     True),
], ids=["empty", "text", "bad-name", "lookahead"])
def test_a_response_format_is_answered_as_documented(response_format: Any, status: int, documented: bool,
                                                     server: str) -> None:
    """Cases of ``response_format`` run through Schemathesis's checks, as the generated ones are, and valid
    against the document when the server takes them (Schemathesis checks that only for requests it generates)."""
    body = {"model": "agent", "messages": [{"role": "user", "content": "hi"}], "response_format": response_format}
    case = CHAT_REQUEST.Case(body=body, media_type="application/json", headers={"authorization": f"Bearer {TOKEN}"})
    # Less the check that auth is enforced, which takes a hand-made case's token for one it made up.
    response = case.call_and_validate(base_url=server, excluded_checks=[ignored_auth])
    assert response.status_code == status, response.text
    assert CHAT_SCHEMA.is_valid(body) is documented
