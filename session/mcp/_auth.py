"""The bearer token in front of the MCP conduit over HTTP (and of the HTTP conduit's ``/mcp``), as the MCP
authorization spec has a server describe it: RFC 9728 protected resource metadata, and RFC 6750 challenges
pointing at it.

The token is fixed (the one the server was started with): there is no authorization server, so the metadata
names none and a client has nothing to do but send the right token. A refused request's body is a JSON-RPC
error saying so, which MCP clients show as the error of the call that was refused (the Python ``mcp`` client
raises it as an ``MCPError``; without it, that client reports a bare -32603 "Server returned an error response").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from session._bearer import BearerAuth, Refusal, Scope

WELL_KNOWN = "/.well-known/oauth-protected-resource"
"""Where protected resource metadata is served (RFC 9728), alone or followed by the resource's path."""

UNAUTHORIZED = -32010
"""The JSON-RPC error code of a refused request: one of the server errors JSON-RPC leaves to implementations
(MCP leaves them -32000..-32019), as no specification names one for it."""

_REFUSED: Mapping[Refusal, str] = {
    "missing": "Unauthorized (HTTP 401): this MCP server needs an 'Authorization: Bearer <token>' header. It takes "
               "the fixed token it was started with, not OAuth.",
    "invalid": "Unauthorized (HTTP 401): the bearer token is not valid. This MCP server takes the fixed token it "
               "was started with, not OAuth: send that one as 'Authorization: Bearer <token>'.",
}
# A Host header fit to be put in a URL and a quoted header value: a name or address, and maybe a port.
_HOST = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def refused(refusal: Refusal) -> dict[str, Any]:
    """A refused request's body: a JSON-RPC error without an id (the request is not read before it is refused),
    as the streamable HTTP transport allows beside an HTTP error."""
    return {"jsonrpc": "2.0", "id": None, "error": {"code": UNAUTHORIZED, "message": _REFUSED[refusal]}}


def base_url(scope: Scope) -> str:
    """``scheme://host[:port]`` as the client reached the server: its ``Host`` header, or the server's own
    address when there is none (or one not fit for a URL)."""
    scheme = "https" if scope.get("scheme") == "https" else "http"
    host = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"host"), "")
    if not _HOST.fullmatch(host):
        name, port = scope.get("server") or ("127.0.0.1", 80)
        host = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
    return f"{scheme}://{host}"


class ResourceMetadata:
    """How the MCP endpoint at ``path`` describes its bearer token: the RFC 9728 metadata, served to anyone at
    ``paths`` (``GET /.well-known/oauth-protected-resource`` and the same followed by ``path``), and the
    challenge a refused request gets.

    The metadata names the endpoint (``resource``), the server (``resource_name``: ``name``) and that the token
    goes in a header, and no authorization server. A refused request gets 401 with ``WWW-Authenticate: Bearer
    realm="mcp", resource_metadata="<the metadata's URL>"`` (and ``error="invalid_token"`` when the token sent
    is not valid), and the JSON-RPC error ``refused(refusal)``.
    """

    def __init__(self, *, path: str, name: str) -> None:
        self.path = path
        self.name = name
        self.paths = frozenset({WELL_KNOWN, WELL_KNOWN + path})

    def metadata(self, scope: Scope) -> dict[str, Any]:
        """The RFC 9728 metadata document, with URLs as the request in ``scope`` reached the server."""
        return {"resource": base_url(scope) + self.path, "resource_name": self.name,
                "bearer_methods_supported": ["header"]}

    def challenge(self, scope: Scope, refusal: Refusal) -> str:
        """The ``WWW-Authenticate`` value for a request refused because its token is ``refusal``."""
        params = ['realm="mcp"']
        if refusal == "invalid":  # RFC 6750: no error code when no token was sent
            params += ['error="invalid_token"', 'error_description="The bearer token is not valid"']
        params.append(f'resource_metadata="{base_url(scope)}{WELL_KNOWN}{self.path}"')
        return "Bearer " + ", ".join(params)

    async def serve(self, scope: Scope, receive: Any, send: Any) -> None:
        """Answer a request for one of ``paths``: the metadata to a GET, a CORS preflight, 405 otherwise."""
        # Public metadata, readable from any web page (browser-based clients fetch it, after a CORS preflight).
        headers = [(b"access-control-allow-origin", b"*")]
        body = b""
        if scope["method"] == "GET":
            status, body = 200, json.dumps(self.metadata(scope)).encode()
            headers.append((b"content-type", b"application/json"))
        elif scope["method"] == "OPTIONS":
            status = 204
            headers += [(b"access-control-allow-methods", b"GET, OPTIONS"), (b"access-control-allow-headers", b"*")]
        else:
            status = 405
            headers.append((b"allow", b"GET, OPTIONS"))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class ProtectedResource(ResourceMetadata):
    """``app`` (the MCP endpoint at ``path``) behind the bearer ``token``, with its protected resource metadata
    (``ResourceMetadata``) served beside it to anyone."""

    def __init__(self, app: Callable[..., Any], *, token: str, path: str, name: str) -> None:
        super().__init__(path=path, name=name)
        self.app = BearerAuth(app, tokens=[token], error_body=refused, challenge=self.challenge)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in self.paths:
            await self.serve(scope, receive, send)
        else:
            await self.app(scope, receive, send)
