"""``OpenAICompatible``: the Chat Completions API over httpx with SSE streaming.

One class serves OpenAI and the servers that copy its API (vLLM, llama.cpp server, Ollama, LM Studio) through
``base_url``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from loop import (
    Delta,
    Finish,
    ReasoningDelta,
    Request,
    Role,
    TextDelta,
    ToolCallDelta,
    Turn,
    Usage,
    UsageDelta,
    UsageError,
    UseTool,
)
from loop.errors import StreamError
from provider._http import sse_events, status_error, transport_error

OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
_FINISH = {"tool_calls": "tool_calls", "function_call": "tool_calls"}


class OpenAICompatible:
    """Streams Chat Completions from ``base_url`` (OpenAI itself unless told otherwise).

    ``api_key`` defaults to ``OPENAI_API_KEY``; it is required for OpenAI itself (a missing key is an error
    here, not a 401 later) and optional for local servers. Pass ``client`` to share one ``httpx.AsyncClient``;
    a client the provider made itself is closed by ``aclose``.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = OPENAI_URL,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        strict_output: bool = True,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise UsageError(f"OpenAICompatible needs a model name, got {model!r}")
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise UsageError(f"base_url must be an http(s) URL like http://127.0.0.1:8000/v1, got {base_url!r}")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not key and url.host == "api.openai.com":
            raise UsageError("OpenAI needs an API key: set OPENAI_API_KEY or pass api_key=")
        self.model = model
        self.base_url = str(base_url).rstrip("/")
        self.who = f"OpenAI-compatible server at {url.host}" if url.host != "api.openai.com" else "OpenAI"
        self._headers = {"content-type": "application/json", **(headers or {})}
        if key:
            self._headers["authorization"] = f"Bearer {key}"
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._strict = strict_output

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> OpenAICompatible:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def body(self, request: Request) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        opts = request.options
        body: dict[str, Any] = {
            "model": opts.model or self.model,
            "messages": messages(request.turns),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {"type": "function",
                 "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}}
                for t in request.tools
            ]
            if opts.tool_choice is not None:
                choice = opts.tool_choice
                body["tool_choice"] = (
                    {"type": "function", "function": {"name": choice.name}} if isinstance(choice, UseTool)
                    else choice
                )
        if opts.temperature is not None:
            body["temperature"] = opts.temperature
        if opts.max_tokens is not None:
            body["max_tokens"] = opts.max_tokens
        if opts.stop:
            body["stop"] = list(opts.stop)
        if opts.output_schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "output", "schema": dict(opts.output_schema), "strict": self._strict}}
        return body

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        return self._stream(self.body(request))

    async def _stream(self, body: dict[str, Any]) -> AsyncIterator[Delta]:
        who = self.who
        finish: str | None = None
        try:
            async with self._client.stream("POST", f"{self.base_url}/chat/completions", json=body,
                                           headers=self._headers) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    raise status_error(who, response.status_code, text, response.headers)
                done = False
                async for event in sse_events(response.aiter_lines()):
                    if event.data.strip() == "[DONE]":
                        done = True
                        break
                    chunk = event.json(who)
                    if not isinstance(chunk, dict):
                        raise StreamError(f"{who} sent a chunk that is not a JSON object on line {event.line}")
                    if "error" in chunk:
                        raise _stream_error(who, chunk["error"])
                    for choice in chunk.get("choices") or ():
                        if choice.get("index", 0) != 0:
                            continue
                        delta = choice.get("delta") or {}
                        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                        if reasoning:
                            yield ReasoningDelta(reasoning)
                        content = delta.get("content")
                        if content:
                            yield TextDelta(content)
                        for call in delta.get("tool_calls") or ():
                            fn = call.get("function") or {}
                            yield ToolCallDelta(call.get("index", 0), call.get("id"), fn.get("name"),
                                                fn.get("arguments") or "")
                        if choice.get("finish_reason"):
                            finish = _FINISH.get(choice["finish_reason"], choice["finish_reason"])
                    usage = chunk.get("usage")
                    if usage:
                        yield UsageDelta(_usage(usage))
                if not done:
                    raise StreamError(f"{who} ended the stream without its final 'data: [DONE]' event; "
                                      "the response may be incomplete", retryable=True)
        except httpx.HTTPError as exc:
            raise transport_error(who, exc) from exc
        yield Finish(finish or "stop")

    def __repr__(self) -> str:
        return f"OpenAICompatible({self.model!r}, base_url={self.base_url!r})"


def _usage(data: Mapping[str, Any]) -> Usage:
    details = data.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=int(data.get("prompt_tokens") or 0),
        output_tokens=int(data.get("completion_tokens") or 0),
        cache_read_tokens=int(details.get("cached_tokens") or 0),
    )


_ERROR_TYPES = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                "rate_limit_exceeded": 429, "insufficient_quota": 429, "server_error": 500, "overloaded": 503}


def _stream_error(who: str, error: Any) -> Exception:
    """The typed error for an ``{"error": ...}`` object sent inside a stream that began with HTTP 200."""
    if not isinstance(error, dict):
        error = {"message": str(error)}
    code = error.get("code")
    status = code if isinstance(code, int) else _ERROR_TYPES.get(str(error.get("type")), 500)
    return status_error(who, status, json.dumps({"error": error}), {})


def messages(turns: tuple[Turn, ...]) -> list[dict[str, Any]]:
    """``turns`` as Chat Completions messages. Reasoning and usage parts are not sent back."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        role = turn.role
        if role is Role.TOOL:
            for result in turn.tool_results:
                out.append({"role": "tool", "tool_call_id": result.call_id, "content": result.content})
        elif role is Role.ASSISTANT:
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            calls = turn.tool_calls
            if calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in calls
                ]
            elif message["content"] is None:
                message["content"] = ""
            out.append(message)
        else:
            out.append({"role": role.value, "content": turn.text})
    return out
