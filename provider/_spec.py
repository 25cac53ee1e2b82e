"""``from_spec``: a provider from a short string, as the command line and configuration files name them."""

from __future__ import annotations

import os
import re
from typing import Any

import httpx

from loop import Provider, UsageError
from provider._anthropic import Anthropic
from provider._openai import OpenAICompatible

FORMS = ("openai:MODEL", "anthropic:MODEL", "openai-compatible:MODEL@BASE_URL")
_ACCEPTED = (f"use one of {', '.join(FORMS)} "
             "(e.g. openai:gpt-4o-mini or openai-compatible:llama3@http://127.0.0.1:11434/v1)")
# The model ends at the first '@' that starts an http(s) URL, so model names may hold '@' (org/model@v2) and
# URLs may hold user info (http://user@host).
_AT_URL = re.compile(r"(?P<model>.+?)@(?P<url>https?://.+)", re.IGNORECASE)


def from_spec(spec: str, *, client: httpx.AsyncClient | None = None) -> Provider:
    """The provider ``spec`` names: ``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``, or
    ``openai-compatible:llama3@http://127.0.0.1:11434/v1`` for a local server.

    Keys come from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``; a missing key is a ``UsageError`` now rather
    than an authentication failure on the first request. ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, when
    set, send ``openai:`` / ``anthropic:`` to another server, as the official SDKs do. ``client`` shares one ``httpx.AsyncClient``.
    Every malformed spec raises ``UsageError`` listing the accepted forms.
    """
    if not isinstance(spec, str):
        raise UsageError(f"a provider spec is a string, got {spec!r}; {_ACCEPTED}")
    if client is not None and not isinstance(client, httpx.AsyncClient):
        raise UsageError(f"client must be an httpx.AsyncClient, got {client!r}")
    kind, sep, rest = spec.strip().partition(":")
    model = rest.strip()
    if not sep:
        raise UsageError(f"provider spec {spec!r} has no 'KIND:'; {_ACCEPTED}")
    if not model:
        raise UsageError(f"provider spec {spec!r} has no model; {_ACCEPTED}")
    made: Any
    if kind == "openai":
        made = OpenAICompatible(model, client=client, **_base_url("OPENAI_BASE_URL"))
    elif kind == "anthropic":
        made = Anthropic(model, client=client, **_base_url("ANTHROPIC_BASE_URL"))
    elif kind == "openai-compatible":
        match = _AT_URL.fullmatch(model)
        if match is None or not match["model"].strip():
            raise UsageError(f"provider spec {spec!r} needs MODEL@BASE_URL with an http(s) BASE_URL; {_ACCEPTED}")
        made = OpenAICompatible(match["model"].strip(), base_url=match["url"].strip(), client=client)
    else:
        raise UsageError(f"unknown provider kind {kind!r} in {spec!r}; {_ACCEPTED}")
    return made


def _base_url(variable: str) -> dict[str, str]:
    value = os.environ.get(variable, "").strip()
    if not value:
        return {}
    url = httpx.URL(value) if "://" in value else None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"{variable}={value!r} is not an http(s) URL like http://127.0.0.1:8000/v1; "
                         f"fix it or unset it")
    return {"base_url": value}
