"""``Problem``: an HTTP request answered with an error, in the format every HTTP route of the server shares,
``{"error": {"type", "message"}}`` (the OpenAI-compatible API renders it in OpenAI's own, see
``session.http._guards``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from loop import LoopError
from session._serving import json_text

__all__ = ["Problem"]


class Problem(LoopError):
    """Raised to answer a request with an HTTP error: ``status``, a snake_case ``kind``, a ``message`` and any
    ``headers`` (``Retry-After``, ``Connection: close``)."""

    def __init__(self, status: int, kind: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.headers = dict(headers or {})

    def error(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"type": kind, "message": message}}``."""
        return {"error": {"type": self.kind, "message": self.message}}

    def response(self) -> Response:
        """The error as a JSON response with its status and headers."""
        return Response(json_text(self.error()) + "\n", self.status, self.headers, media_type="application/json")
