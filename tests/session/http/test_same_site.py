"""What a web page in a browser can send to a served agent: nothing, unless the server allows its origin.

A token-less server on loopback (``allow_no_token``) ran the agent and its tool for a no-preflight cross-site
POST (``content-type: text/plain``, ``Origin: http://evil.example``), and a page that rebound its DNS name to
127.0.0.1 (``Host: evil.example:PORT``) created sessions and posted messages. Each is refused on every route,
over a real socket; an origin allowed with ``cors_origins`` gets CORS, its preflight included.
"""

from __future__ import annotations

import httpx
import pytest

from loop import UsageError
from provider import Function
from session.http import HTTPConduit
from tests.session.http.helpers import Served, on_socket

EVIL = "http://evil.example"
ROUTES = [("POST", "/sessions"), ("GET", "/sessions"), ("POST", "/sessions/s1/messages"),
          ("GET", "/sessions/s1/events"), ("GET", "/sessions/s1/turns"), ("DELETE", "/sessions/s1"),
          ("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/openapi.json"), ("GET", "/healthz")]
BODY = b'{"text": "run the tool", "model": "agent", "messages": [{"role": "user", "content": "hi"}]}'


def answered(request: object) -> str:
    raise AssertionError("the agent must not run for a refused request")


async def _send(served: Served, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=served.transport_or_url, timeout=10) as http:
        content = BODY if method == "POST" else None
        return await http.request(method, path, content=content, headers=headers)


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_a_cross_site_request_is_refused_on_every_route_of_a_token_less_server(method: str, path: str) -> None:
    async with on_socket(Function(answered), token=None, allow_no_token=True) as served:
        found = await _send(served, method, path, {"origin": EVIL, "content-type": "text/plain"})
    assert found.status_code == 403, found.text
    assert found.json()["error"]["type" if not path.startswith("/v1") else "code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in found.headers


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_a_rebound_host_name_is_refused_on_every_route(method: str, path: str) -> None:
    async with on_socket(Function(answered), token=None, allow_no_token=True) as served:
        port = httpx.URL(served.transport_or_url).port
        found = await _send(served, method, path, {"host": f"evil.example:{port}", "content-type": "application/json"})
    assert found.status_code == 421, found.text
    assert "evil.example" in found.text


async def test_a_no_preflight_body_type_is_refused_even_without_an_origin() -> None:
    async with on_socket(Function(answered), token=None, allow_no_token=True) as served:
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            found = await _send(served, "POST", "/sessions", {"content-type": kind})
            assert found.status_code == 415, (kind, found.text)


async def test_the_servers_own_origin_and_plain_clients_are_served() -> None:
    async with on_socket(Function(lambda request: "hello"), token=None, allow_no_token=True) as served:
        own = served.transport_or_url
        for headers in ({"origin": own, "content-type": "application/json"}, {}, {"host": "localhost"}):
            async with httpx.AsyncClient(base_url=own, timeout=10) as http:
                created = await http.post("/sessions", headers=headers)
            assert created.status_code == 201, (headers, created.text)


async def test_an_allowed_origin_gets_cors_and_its_preflight_is_answered() -> None:
    front = "https://chat.example.com"
    async with on_socket(Function(lambda request: "hello"), cors_origins=[front]) as served:
        async with httpx.AsyncClient(base_url=served.transport_or_url, timeout=10) as http:
            preflight = await http.options("/sessions", headers={
                "origin": front, "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type"})
            created = await http.post("/sessions", headers={"origin": front, "authorization": "Bearer token-alpha"})
            other = await http.post("/sessions", headers={"origin": EVIL, "authorization": "Bearer token-alpha"})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == front
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"]
    assert created.status_code == 201 and created.headers["access-control-allow-origin"] == front
    assert created.headers["vary"] == "Origin"
    assert other.status_code == 403


async def test_a_deployment_names_the_hosts_it_answers_for() -> None:
    async with on_socket(Function(lambda request: "hello"), allowed_hosts=["agent.internal"]) as served:
        async with httpx.AsyncClient(base_url=served.transport_or_url, timeout=10) as http:
            named = await http.get("/healthz", headers={"host": "agent.internal:8443"})
            loopback = await http.get("/healthz")
    assert named.status_code == 200 and loopback.status_code == 421


@pytest.mark.parametrize(("options", "message"), [
    ({"cors_origins": "https://a.example"}, "list of origins"),
    ({"cors_origins": ["https://a.example/path"]}, "scheme://host"),
    ({"cors_origins": ["ftp://a.example"]}, "scheme://host"),
    ({"allowed_hosts": "a.example"}, "list of host names"),
    ({"allowed_hosts": ["a.example:80"]}, "without a port"),
])
def test_bad_settings_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        HTTPConduit(token="t", **options)  # type: ignore[arg-type]
