"""The AG-UI route's errors before its stream starts: ``Problem`` answers a request with an HTTP status and the HTTP
conduit's JSON error format, ``{"error": {"type", "message"}}``.

Once the event stream has started, an error is a ``RUN_ERROR`` event instead (see ``session.agui._translate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from loop import LoopError
from session._serving import json_text


class Problem(LoopError):
    """Raised to answer a request with an HTTP error: ``status``, a snake_case ``kind`` and a ``message``."""

    def __init__(self, status: int, kind: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.kind, "message": self.message}}

    def response(self) -> Response:
        """The error as a JSON response with its status and headers."""
        return Response(json_text(self.body()) + "\n", self.status, self.headers, media_type="application/json")


def invalid(message: str) -> Problem:
    """A request body that is JSON but not a valid ``RunAgentInput`` (or asks what this server cannot do): 422."""
    return Problem(422, "invalid_request", message)


def client_closed() -> Problem:
    """The error of a request whose client left before its body arrived: 499, nginx's "client closed request",
    which only the request log sees."""
    return Problem(499, "client_closed_request", "the client closed the connection before its request body arrived")

