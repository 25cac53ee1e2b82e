"""OpenAI's error format: ``OpenAIError`` and the messages OpenAI gives for a missing, mistyped or unsupported
parameter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from loop import LoopError
from session._bearer import Refusal
from session._serving import json_text


class OpenAIError(LoopError):
    """Raised to answer a request with an error in OpenAI's format: HTTP ``status``, ``type``, ``param``, ``code``."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> Response:
        """The error as a JSON response with its status and headers."""
        return Response(json_text(self.body(), separators=(",", ":")), self.status, self.headers,
                        media_type="application/json")


def missing(param: str) -> OpenAIError:
    return OpenAIError(400, f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


def wrong_type(param: str, expected: str, value: Any) -> OpenAIError:
    got = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
           float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
    return OpenAIError(400, f"Invalid type for '{param}': expected {expected}, but got {got} instead.",
                       param=param, code="invalid_type")


def unsupported(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, param=param, code="unsupported_value")


def client_closed() -> OpenAIError:
    """The error of a request whose client closed the connection before it was answered: 499, nginx's "client
    closed request". The client never reads it; the request log does, and so tells it from a server error."""
    return OpenAIError(499, "The client closed the connection before the request was answered.",
                       code="client_closed_request")


async def answer_client_closed(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI answer to a client that has gone: ``client_closed()``, which the server drops (nothing can be sent
    on a closed connection) after the request log has read its status."""
    try:
        await client_closed().response()(scope, receive, send)
    except OSError:  # servers on ASGI spec 2.4 report a gone client this way
        pass


def unauthorized(refusal: Refusal) -> dict[str, Any]:
    """A refused request's body in OpenAI's error format, with the codes OpenAI's own API uses."""
    if refusal == "missing":
        return OpenAIError(401, "You didn't provide an API key. Send it in an 'Authorization: Bearer <token>' "
                                "header.", code="missing_api_key").body()
    return OpenAIError(401, "Incorrect API key provided.", code="invalid_api_key").body()
