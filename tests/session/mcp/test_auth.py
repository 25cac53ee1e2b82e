"""The MCP conduit's bearer token over HTTP, as the MCP authorization spec has a server describe it: protected
resource metadata served without the token, 401 challenges pointing at it, and an error MCP clients show as
unauthorized."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from session.mcp import MCPConduit
from session.mcp._auth import UNAUTHORIZED, base_url
from tests.session.mcp.agent_fixture import make_manager

TOKEN = "t0ken"
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"  # installed by .ci/run


@pytest.fixture(scope="module")
async def url() -> AsyncIterator[str]:
    """The endpoint of the fixture agent, served over HTTP in this process behind ``TOKEN``."""
    async with make_manager() as manager, anyio.create_task_group() as group:
        yield await group.start(MCPConduit(transport="http", port=0, token=TOKEN, name="fixture-agent").serve,
                                manager)
        group.cancel_scope.cancel()


def origin(url: str) -> str:
    return url.removesuffix("/mcp")


async def test_the_protected_resource_metadata_is_served_without_a_token(url: str) -> None:
    async with httpx2.AsyncClient() as http:
        answers = [await http.get(origin(url) + path) for path in ("/.well-known/oauth-protected-resource",
                                                                   "/.well-known/oauth-protected-resource/mcp")]
        posted = await http.post(origin(url) + "/.well-known/oauth-protected-resource")
        preflight = await http.options(origin(url) + "/.well-known/oauth-protected-resource/mcp")
    for response in answers:
        assert response.status_code == 200 and response.headers["content-type"] == "application/json"
        # RFC 9728: no authorization server to name, since the token is fixed rather than issued by OAuth.
        assert response.json() == {"resource": url, "resource_name": "fixture-agent",
                                   "bearer_methods_supported": ["header"]}
        assert response.headers["access-control-allow-origin"] == "*"
    assert posted.status_code == 405 and posted.headers["allow"] == "GET, OPTIONS"
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == "*"


async def test_the_metadata_urls_follow_the_host_the_client_reached() -> None:
    async with make_manager() as manager, anyio.create_task_group() as group:
        url = await group.start(MCPConduit(transport="http", host="127.0.0.1", port=0, token=TOKEN).serve, manager)
        port = url.split(":")[-1].removesuffix("/mcp")
        async with httpx2.AsyncClient(headers={"host": f"localhost:{port}"}) as http:  # as if it had named it so
            named = await http.get(f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource")
            refused = await http.post(f"http://127.0.0.1:{port}/mcp", json={})
        group.cancel_scope.cancel()
    assert named.json()["resource"] == f"http://localhost:{port}/mcp"
    assert f'resource_metadata="http://localhost:{port}/.well-known/oauth-protected-resource/mcp"' in \
        refused.headers["www-authenticate"]


def test_a_host_header_unfit_for_a_url_gives_way_to_the_servers_address() -> None:
    def scope(host: bytes, server: tuple[str, int] = ("127.0.0.1", 8000), scheme: str = "http") -> Any:
        return {"scheme": scheme, "headers": [(b"host", host)], "server": server}

    assert base_url(scope(b"example.org:8443", scheme="https")) == "https://example.org:8443"
    assert base_url(scope(b"[::1]:9000")) == "http://[::1]:9000"
    assert base_url(scope(b'evil"x, error="forged"')) == "http://127.0.0.1:8000"
    assert base_url(scope(b"", server=("::1", 8000))) == "http://[::1]:8000"


@pytest.mark.parametrize(("headers", "challenge", "message"), [
    ({}, "", "this MCP server needs an 'Authorization: Bearer <token>' header"),
    ({"Authorization": "Bearer wrong"}, 'error="invalid_token", error_description="The bearer token is not valid", ',
     "the bearer token is not valid"),
])
async def test_a_refused_request_gets_a_challenge_pointing_at_the_metadata(
        url: str, headers: dict[str, str], challenge: str, message: str) -> None:
    async with httpx2.AsyncClient(headers=headers) as http:
        response = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer realm="mcp", {challenge}resource_metadata="{origin(url)}/.well-known/oauth-protected-resource/mcp"')
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == UNAUTHORIZED
    assert body["error"]["message"].startswith(f"Unauthorized (HTTP 401): {message}")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize(("headers", "message"), [
    ({"Authorization": "Bearer wrong"}, r"Unauthorized \(HTTP 401\): the bearer token is not valid"),
    ({}, r"Unauthorized \(HTTP 401\): this MCP server needs an 'Authorization: Bearer <token>' header"),
])
async def test_the_python_mcp_client_reports_unauthorized(url: str, mode: Any, headers: dict[str, str],
                                                          message: str) -> None:
    # The client raises the error from inside its task groups, so it comes wrapped in exception groups.
    unauthorized = pytest.RaisesExc(MCPError, match=message, check=lambda e: e.error.code == UNAUTHORIZED)
    with pytest.RaisesGroup(unauthorized, flatten_subgroups=True), anyio.fail_after(10):
        async with httpx2.AsyncClient(headers=headers) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                await client.list_tools()


async def test_the_right_token_still_gets_in(url: str) -> None:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["ask"]


async def _inspect(url: str, home: Path, *options: str) -> tuple[int, str, str]:
    """The MCP Inspector's CLI listing the tools at ``url``: its exit code, stdout and stderr."""
    command = shutil.which("mcp-inspector")
    if command is None:  # as the Docker tests do; CI installs it, and fails on any skip
        pytest.skip(f"needs the MCP Inspector's CLI: npm install -g {INSPECTOR} (as .ci/run does)")
    env = {**os.environ, "HOME": str(home), "MCP_INSPECTOR_SECRET_STORE": "memory"}  # its files stay in home
    with anyio.fail_after(60):
        done = await anyio.run_process([command, "--cli", url, "--transport", "http", "--method", "tools/list",
                                        *options], stdin=subprocess.DEVNULL, env=env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _error(stderr: str) -> dict[str, Any]:
    last = stderr.strip().splitlines()[-1]
    error: dict[str, Any] = json.loads(last)["error"]
    return error


@pytest.mark.slow
async def test_the_mcp_inspector_cli_reports_unauthorized(url: str, tmp_path: Path) -> None:
    code, out, err = await _inspect(url, tmp_path, "--header", f"Authorization: Bearer {TOKEN}")
    assert code == 0, err
    assert [t["name"] for t in json.loads(out)["tools"]] == ["ask"]
    # Told to use no OAuth, it shows the server's error as it came.
    code, out, err = await _inspect(url, tmp_path, "--header", "Authorization: Bearer wrong", "--stored-auth-only")
    assert code == 3 and _error(err)["code"] == "auth_required"
    assert "Unauthorized (HTTP 401): the bearer token is not valid" in _error(err)["message"]
    # Otherwise any 401 sends it into OAuth, which wants a terminal: that is the Inspector's choice, made before
    # it reads anything but the status.
    code, out, err = await _inspect(url, tmp_path, "--header", "Authorization: Bearer wrong")
    assert code == 3 and _error(err)["code"] == "auth_required"
    assert "Interactive OAuth requires a TTY" in _error(err)["message"]
