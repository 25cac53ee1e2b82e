"""The OpenAI-compatible API: any OpenAI client can talk to the pattern a ``Manager`` runs.

    openai_routes  ``POST /v1/chat/completions``, ``POST /v1/responses`` and ``GET /v1/models``, to mount in any
                   Starlette app
    openai_app     those routes served alone, behind a bearer token

``HTTPConduit`` serves them beside the session routes.
"""

from session.openai._app import openai_app, openai_routes

__all__ = ["openai_app", "openai_routes"]
