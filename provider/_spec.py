"""``from_spec``: a provider from a short string, as the command line and configuration files name them; and
``from_environment``: the model the environment names, else a default."""

from __future__ import annotations

import os
import re

import httpx

from loop import Provider, UsageError, has
from provider._anthropic import ANTHROPIC_URL, Anthropic
from provider._openai import OPENAI_URL, OpenAICompatible
from provider._responses import OpenAIResponses
from provider._retry import Retry

FORMS = ("openai:MODEL", "anthropic:MODEL", "openai-compatible:MODEL@BASE_URL", "openai-responses:MODEL[@BASE_URL]")
_ACCEPTED = (f"use one of {', '.join(FORMS)} "
             "(e.g. openai:gpt-4o-mini or openai-compatible:llama3@http://127.0.0.1:11434/v1)")
# The model ends at the first '@' that starts an http(s) URL, so model names may hold '@' (org/model@v2) and
# URLs may hold user info (http://user@host).
_AT_URL = re.compile(r"(?P<model>.+?)@(?P<url>https?://.+)", re.IGNORECASE)


def from_environment(default: Provider) -> Provider:
    """A real model when the environment names one, else ``default`` (say, an offline demo model), so that one
    program runs both ways.

    ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set: ``from_spec("openai:" + OPENAI_MODEL)`` (``gpt-4o-mini`` when
    ``OPENAI_MODEL`` is unset); else ``ANTHROPIC_API_KEY`` set: ``from_spec("anthropic:" + ANTHROPIC_MODEL)``
    (``claude-sonnet-4-5``). A real model comes wrapped in ``Retry``. Empty variables count as unset; the
    result is ``default`` itself when no variable is set.
    """
    if not has(default, Provider):
        raise UsageError(f"from_environment needs a default provider (something with stream(request)), got {default!r}")
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return Retry(from_spec(f"openai:{os.environ.get('OPENAI_MODEL') or 'gpt-4o-mini'}"))
    if os.environ.get("ANTHROPIC_API_KEY"):
        return Retry(from_spec(f"anthropic:{os.environ.get('ANTHROPIC_MODEL') or 'claude-sonnet-4-5'}"))
    return default


def from_spec(spec: str, *, client: httpx.AsyncClient | None = None) -> Provider:
    """The provider ``spec`` names: ``openai:gpt-4o-mini``, ``anthropic:claude-sonnet-4-5``, or
    ``openai-compatible:llama3@http://127.0.0.1:11434/v1`` for a local server.

    Where requests go: a URL written in the spec wins, then the environment, then the vendor's own API.

    - ``openai:MODEL`` goes to ``OPENAI_BASE_URL`` when it is set, as the official SDKs do, else to OpenAI.
    - ``anthropic:MODEL`` goes to ``ANTHROPIC_BASE_URL`` when it is set, else to Anthropic.
    - ``openai-compatible:MODEL@BASE_URL`` goes to ``BASE_URL`` whatever ``OPENAI_BASE_URL`` says; when that
      variable is set, ``openai-compatible:MODEL`` (no ``@``) goes to it.
    - ``openai-responses:MODEL`` speaks OpenAI's Responses API (``OpenAIResponses``) to ``OPENAI_BASE_URL`` when it
      is set, else to OpenAI; ``openai-responses:MODEL@BASE_URL`` to another server that speaks it.

    A URL after the model of ``openai:`` or ``anthropic:`` is refused, not sent as part of the model's name. A
    variable is read only where it is used: set to anything but an http(s) URL it is a ``UsageError`` there,
    and empty counts as unset.

    Keys come from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``. A key that OpenAI or Anthropic needs is a
    ``UsageError`` now rather than an authentication failure on the first request; ``anthropic:`` always needs
    one, while an OpenAI-compatible server elsewhere (named by the spec or by ``OPENAI_BASE_URL``) gets
    ``OPENAI_API_KEY`` if it is set and no key otherwise. ``client`` shares one ``httpx.AsyncClient``. Every
    malformed spec raises ``UsageError`` listing the accepted forms.
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
    match = _AT_URL.fullmatch(model)
    if kind == "openai":
        _refuse_url(spec, match, kind, "OPENAI_BASE_URL")
        return OpenAICompatible(model, base_url=_base_url("OPENAI_BASE_URL") or OPENAI_URL, client=client)
    if kind == "anthropic":
        _refuse_url(spec, match, kind, "ANTHROPIC_BASE_URL")
        return Anthropic(model, base_url=_base_url("ANTHROPIC_BASE_URL") or ANTHROPIC_URL, client=client)
    if kind == "openai-responses":
        if match is not None and match["model"].strip():
            return OpenAIResponses(match["model"].strip(), base_url=match["url"].strip(), client=client)
        if "@" in model:
            raise UsageError(f"provider spec {spec!r} needs MODEL or MODEL@BASE_URL with an http(s) BASE_URL; "
                             f"{_ACCEPTED}")
        return OpenAIResponses(model, base_url=_base_url("OPENAI_BASE_URL") or OPENAI_URL, client=client)
    if kind != "openai-compatible":
        raise UsageError(f"unknown provider kind {kind!r} in {spec!r}; {_ACCEPTED}")
    if match is not None and match["model"].strip():
        return OpenAICompatible(match["model"].strip(), base_url=match["url"].strip(), client=client)
    if match is None and "@" not in model and (environment := _base_url("OPENAI_BASE_URL")):
        return OpenAICompatible(model, base_url=environment, client=client)
    raise UsageError(f"provider spec {spec!r} needs MODEL@BASE_URL with an http(s) BASE_URL (or OPENAI_BASE_URL "
                     f"set and MODEL alone); {_ACCEPTED}")


def _refuse_url(spec: str, match: re.Match[str] | None, kind: str, variable: str) -> None:
    """A URL after a vendor form's model would otherwise be sent as part of the model's name."""
    if match is not None:
        raise UsageError(f"provider spec {spec!r} names a URL, which {kind}: does not take; set {variable} "
                         f"or use openai-compatible:MODEL@BASE_URL; {_ACCEPTED}")


def _base_url(variable: str) -> str | None:
    """The URL ``variable`` holds, or ``None`` when it is unset or empty."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return None
    try:
        url = httpx.URL(value) if "://" in value else None
    except httpx.InvalidURL:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise UsageError(f"{variable}={value!r} is not an http(s) URL like http://127.0.0.1:8000/v1; "
                         f"fix it or unset it")
    return value
