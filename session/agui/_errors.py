"""The AG-UI route's errors before its stream starts: each a ``Problem``, answered with an HTTP status and the HTTP
conduit's JSON error format, ``{"error": {"type", "message"}}``.

Once the event stream has started, an error is a ``RUN_ERROR`` event instead (see ``session.agui._translate``)."""

from __future__ import annotations

from session._problem import Problem


def invalid(message: str) -> Problem:
    """A request body that is JSON but not a valid ``RunAgentInput`` (or asks what this server cannot do): 422."""
    return Problem(422, "invalid_request", message)


def client_closed() -> Problem:
    """The error of a request whose client left before its body arrived: 499, nginx's "client closed request",
    which only the request log sees."""
    return Problem(499, "client_closed_request", "the client closed the connection before its request body arrived")

