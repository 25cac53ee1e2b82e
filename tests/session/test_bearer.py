"""The one bearer-token check every conduit's HTTP server puts in front of its routes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from loop import UsageError
from session._bearer import BearerAuth, Refusal, owner_of, unauthorized

TOKENS = ("alpha-token", "beta-token")

@pytest.fixture
def anyio_backend() -> str:
    """HTTP clients against servers: on asyncio, as the HTTP suites."""
    return "asyncio"



async def echo_owner(scope: dict[str, Any], receive: Any, send: Any) -> None:
    owner = scope.get("state", {}).get("owner", "")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": owner.encode()})


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def get(app: Any, authorization: str | None, path: str = "/things") -> httpx.Response:
    headers = {"authorization": authorization} if authorization is not None else {}
    async with client(app) as http:
        return await http.get(path, headers=headers)


async def test_each_token_is_let_in_as_its_own_owner() -> None:
    app = BearerAuth(echo_owner, tokens=TOKENS)
    for token in TOKENS:
        response = await get(app, f"Bearer {token}")
        assert response.status_code == 200 and response.text == owner_of(token)
    assert owner_of(TOKENS[0]) != owner_of(TOKENS[1]) and TOKENS[0] not in owner_of(TOKENS[0])


@pytest.mark.parametrize(("header", "refusal"), [
    (None, "missing"), ("", "missing"), ("Bearer", "missing"), ("Bearer   ", "missing"),
    ("Basic alpha-token", "missing"), ("Beareralpha-token", "missing"),
    ("Bearer wrong", "invalid"), ("Bearer alpha-token-and-more", "invalid"), ("Bearer alpha", "invalid"),
])
async def test_a_refused_request_gets_401_a_challenge_and_the_error_body(header: str | None, refusal: Refusal) -> None:
    response = await get(BearerAuth(echo_owner, tokens=TOKENS), header)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="session"'
    assert response.headers["content-type"] == "application/json"
    assert response.json() == unauthorized(refusal)
    assert response.json()["error"]["type"] == "unauthorized"


async def test_the_scheme_is_case_insensitive_and_spaces_around_the_token_do_not_count() -> None:
    app = BearerAuth(echo_owner, tokens=TOKENS)
    assert (await get(app, "bEaReR  alpha-token ")).text == owner_of("alpha-token")


async def test_the_error_body_and_realm_are_the_callers() -> None:
    def openai_style(refusal: Refusal) -> dict[str, Any]:
        return {"error": {"message": refusal, "type": "invalid_request_error", "param": None, "code": refusal}}

    app = BearerAuth(echo_owner, tokens=TOKENS, realm=None, error_body=openai_style)
    missing, invalid = await get(app, None), await get(app, "Bearer nope")
    assert missing.json() == openai_style("missing") and invalid.json() == openai_style("invalid")
    assert missing.headers["www-authenticate"] == "Bearer"
    mcp = await get(BearerAuth(echo_owner, tokens=TOKENS, realm="mcp"), None)
    assert mcp.headers["www-authenticate"] == 'Bearer realm="mcp"'


async def test_a_path_prefix_can_have_an_error_body_of_its_own() -> None:
    def api(name: str) -> Any:
        return lambda refusal: {"api": name, "refusal": refusal}

    app = BearerAuth(echo_owner, tokens=TOKENS, error_bodies={"/v1": api("v1"), "/v1/special/": api("special")})
    assert (await get(app, None, "/v1")).json() == {"api": "v1", "refusal": "missing"}
    assert (await get(app, "Bearer nope", "/v1/models")).json() == {"api": "v1", "refusal": "invalid"}
    assert (await get(app, None, "/v1/special/x")).json() == {"api": "special", "refusal": "missing"}  # longest
    assert (await get(app, None, "/v1/specialist")).json()["api"] == "v1"  # prefixes are whole segments
    assert (await get(app, None, "/v1x")).json() == unauthorized("missing")
    assert (await get(app, None, "/things")).json() == unauthorized("missing")


async def test_the_challenge_can_depend_on_the_request() -> None:
    app = BearerAuth(echo_owner, tokens=TOKENS,
                     challenge=lambda scope, refusal: f'Bearer realm="{scope["path"]}", error="{refusal}"')
    assert (await get(app, "Bearer nope", "/here")).headers["www-authenticate"] == 'Bearer realm="/here", error="invalid"'


async def test_open_paths_need_no_token() -> None:
    app = BearerAuth(echo_owner, tokens=TOKENS, open_paths=["/healthz", "/openapi.json"])
    assert (await get(app, None, "/healthz")).status_code == 200
    assert (await get(app, None, "/openapi.json")).status_code == 200
    assert (await get(app, None, "/healthz/more")).status_code == 401


async def test_without_tokens_everyone_is_anonymous() -> None:
    app = BearerAuth(echo_owner, tokens=None)
    assert (await get(app, None)).text == "anonymous"
    assert (await get(app, "Bearer anything")).text == "anonymous"


async def test_an_empty_token_list_lets_nobody_in() -> None:
    assert (await get(BearerAuth(echo_owner, tokens=[]), "Bearer alpha-token")).status_code == 401


async def test_other_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    await BearerAuth(app, tokens=TOKENS)({"type": "lifespan"}, None, None)
    assert seen == ["lifespan"]


def test_one_token_passed_as_a_string_is_refused() -> None:
    with pytest.raises(UsageError, match="not one string"):
        BearerAuth(echo_owner, tokens="alpha-token")


async def test_a_non_ascii_token_is_compared_as_the_bytes_sent() -> None:
    app = BearerAuth(echo_owner, tokens=["clé-secrète"])
    async with client(app) as http:
        response = await http.get("/", headers=[(b"authorization", "Bearer clé-secrète".encode())])
    assert response.status_code == 200 and response.text == owner_of("clé-secrète")
