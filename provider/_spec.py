"""``from_spec``: a provider from a short string, as the command line and configuration files name them."""

from __future__ import annotations

import httpx

from loop import Provider, UsageError
from provider._anthropic import Anthropic
from provider._openai import OpenAICompatible

FORMS = ("openai:MODEL", "anthropic:MODEL", "openai-compatible:MODEL@BASE_URL")


def from_spec(spec: str, *, client: httpx.AsyncClient | None = None) -> Provider:
    """The provider ``spec`` names: ``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``, or
    ``openai-compatible:llama3@http://127.0.0.1:11434/v1`` for a local server.

    Keys come from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``; a missing key is a ``UsageError`` now rather
    than an authentication failure on the first request. ``client`` shares one ``httpx.AsyncClient``.
    """
    if not isinstance(spec, str):
        raise UsageError(f"a provider spec is a string like 'openai:gpt-4o-mini', got {spec!r}")
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise UsageError(f"provider spec {spec!r} has no model; use one of {', '.join(FORMS)}")
    if kind == "openai":
        return OpenAICompatible(rest, client=client)
    if kind == "anthropic":
        return Anthropic(rest, client=client)
    if kind == "openai-compatible":
        model, at, base_url = rest.partition("@")
        if not at or not model or not base_url:
            raise UsageError(f"provider spec {spec!r} needs MODEL@BASE_URL, e.g. "
                             "openai-compatible:llama3@http://127.0.0.1:11434/v1")
        return OpenAICompatible(model, base_url=base_url, client=client)
    raise UsageError(f"unknown provider kind {kind!r} in {spec!r}; use one of {', '.join(FORMS)}")
