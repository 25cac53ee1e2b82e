"""``Anthropic``: the Messages API over httpx with SSE streaming."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from loop import (
    Delta,
    Finish,
    Reasoning,
    ReasoningDelta,
    Request,
    Role,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Turn,
    Usage,
    UsageDelta,
    UsageError,
    UseTool,
)
from loop.errors import StreamError
from provider._http import sse_events, status_error, transport_error

ANTHROPIC_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
OUTPUT_TOOL = "structured_output"
DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
           "refusal": "content_filter", "pause_turn": "pause"}
_ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                 "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
                 "overloaded_error": 529}


class Anthropic:
    """Streams Messages API responses.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY`` and is required. ``max_tokens`` is the default output cap
    (the API requires one). ``thinking_budget`` turns on extended thinking with that many tokens; thinking
    blocks come back as ``Reasoning`` parts whose signatures are sent back on the next request. Structured
    output (``Options.output_schema``) is asked for as a forced call to a tool whose input is the output; its
    JSON arrives as text.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = ANTHROPIC_URL,
        client: httpx.AsyncClient | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        max_tokens: int = 4096,
        thinking_budget: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise UsageError(f"Anthropic needs a model name, got {model!r}")
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise UsageError(f"base_url must be an http(s) URL, got {base_url!r}")
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise UsageError("Anthropic needs an API key: set ANTHROPIC_API_KEY or pass api_key=")
        if not (isinstance(max_tokens, int) and max_tokens > 0):
            raise UsageError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if thinking_budget is not None and not (isinstance(thinking_budget, int) and thinking_budget >= 1024):
            raise UsageError(f"thinking_budget must be an integer of at least 1024 tokens, got {thinking_budget!r}")
        self.model = model
        self.base_url = str(base_url).rstrip("/")
        self.who = "Anthropic" if url.host == "api.anthropic.com" else f"Anthropic-compatible server at {url.host}"
        self.max_tokens = max_tokens
        self.thinking_budget = thinking_budget
        self._headers = {"x-api-key": key, "anthropic-version": API_VERSION, "content-type": "application/json",
                         **(headers or {})}
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Anthropic:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def body(self, request: Request) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        opts = request.options
        system, msgs = messages(request.turns)
        max_tokens = opts.max_tokens or self.max_tokens
        body: dict[str, Any] = {"model": opts.model or self.model, "max_tokens": max_tokens, "messages": msgs,
                                "stream": True}
        if system:
            body["system"] = system
        tools = [{"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                 for t in request.tools]
        choice = opts.tool_choice
        if opts.output_schema is not None:
            tools = [{"name": OUTPUT_TOOL, "description": "Give the final answer in the required structure.",
                      "input_schema": dict(opts.output_schema)}]
            choice = UseTool(OUTPUT_TOOL)
        if tools:
            body["tools"] = tools
            if choice is not None:
                body["tool_choice"] = (
                    {"type": "tool", "name": choice.name} if isinstance(choice, UseTool)
                    else {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
                )
        if opts.temperature is not None:
            body["temperature"] = min(opts.temperature, 1.0)
        if opts.stop:
            body["stop_sequences"] = list(opts.stop)
        if self.thinking_budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
            body["max_tokens"] = max(max_tokens, self.thinking_budget + 1)
        return body

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        return self._stream(self.body(request), structured=request.options.output_schema is not None)

    async def _stream(self, body: dict[str, Any], *, structured: bool) -> AsyncIterator[Delta]:
        who = self.who
        input_usage = Usage()
        output_tokens = 0
        finish = "stop"
        output_blocks: set[int] = set()  # blocks carrying structured output, streamed as text
        try:
            async with self._client.stream("POST", f"{self.base_url}/v1/messages", json=body,
                                           headers=self._headers) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    raise status_error(who, response.status_code, text, response.headers)
                done = False
                async for event in sse_events(response.aiter_lines()):
                    data = event.json(who)
                    kind = data.get("type") if isinstance(data, dict) else None
                    if kind == "content_block_delta":
                        index = data.get("index", 0)
                        delta = data.get("delta") or {}
                        dtype = delta.get("type")
                        if dtype == "text_delta":
                            yield TextDelta(delta.get("text", ""))
                        elif dtype == "input_json_delta":
                            fragment = delta.get("partial_json", "")
                            if index in output_blocks:
                                if fragment:
                                    yield TextDelta(fragment)
                            elif fragment:
                                yield ToolCallDelta(index, arguments_fragment=fragment)
                        elif dtype == "thinking_delta":
                            yield ReasoningDelta(delta.get("thinking", ""))
                        elif dtype == "signature_delta":
                            yield ReasoningDelta("", delta.get("signature"))
                    elif kind == "content_block_start":
                        index = data.get("index", 0)
                        block = data.get("content_block") or {}
                        btype = block.get("type")
                        if btype == "text" and block.get("text"):
                            yield TextDelta(block["text"])
                        elif btype == "tool_use":
                            if structured and block.get("name") == OUTPUT_TOOL:
                                output_blocks.add(index)
                            else:
                                yield ToolCallDelta(index, block.get("id"), block.get("name"), "")
                        elif btype == "thinking" and block.get("thinking"):
                            yield ReasoningDelta(block["thinking"])
                    elif kind == "message_start":
                        usage = (data.get("message") or {}).get("usage") or {}
                        input_usage = _input_usage(usage)
                        output_tokens = int(usage.get("output_tokens") or 0)
                    elif kind == "message_delta":
                        stop = (data.get("delta") or {}).get("stop_reason")
                        if stop:
                            finish = _FINISH.get(stop, stop)
                        usage = data.get("usage") or {}
                        if usage.get("output_tokens") is not None:
                            output_tokens = int(usage["output_tokens"])  # cumulative, not an increment
                    elif kind == "message_stop":
                        done = True
                        break
                    elif kind == "error":
                        error = data.get("error") or {}
                        status = _ERROR_STATUS.get(error.get("type"), 500)
                        raise status_error(who, status, json.dumps({"error": error}), {})
                    # ping, content_block_stop and event types added later are ignored
                if not done:
                    raise StreamError(f"{who} ended the stream without its final message_stop event; "
                                      "the response may be incomplete", retryable=True)
        except httpx.HTTPError as exc:
            raise transport_error(who, exc) from exc
        if structured and finish == "tool_calls":
            finish = "stop"
        yield UsageDelta(Usage(input_usage.input_tokens, output_tokens, input_usage.cache_read_tokens,
                               input_usage.cache_write_tokens))
        yield Finish(finish)

    def __repr__(self) -> str:
        return f"Anthropic({self.model!r})"


def _input_usage(usage: Mapping[str, Any]) -> Usage:
    read = int(usage.get("cache_read_input_tokens") or 0)
    write = int(usage.get("cache_creation_input_tokens") or 0)
    # Anthropic counts cached input apart; Usage.input_tokens counts every input token, as OpenAI does.
    return Usage(int(usage.get("input_tokens") or 0) + read + write, 0, read, write)


def _blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in turn.parts:
        kind = type(part)
        if kind is Text and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif kind is Reasoning and part.signature:
            # Only signed thinking can go back; reasoning from another provider cannot be verified.
            blocks.append({"type": "thinking", "thinking": part.text, "signature": part.signature})
        elif kind is ToolCall:
            try:
                arguments = json.loads(part.arguments or "{}")
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                arguments = {}  # the call was answered with an error result; the API needs an object here
            blocks.append({"type": "tool_use", "id": part.id, "name": part.name, "input": arguments})
        elif kind is ToolResult:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.call_id, "content": part.content}
            if part.is_error:
                block["is_error"] = True
            blocks.append(block)
    return blocks


def messages(turns: tuple[Turn, ...]) -> tuple[str, list[dict[str, Any]]]:
    """``turns`` as the Messages API's ``system`` text and ``messages`` list.

    Leading system turns become ``system``; later ones (a verification report, say) become user text, since
    the API has no system role inside the conversation. Tool results go in a user message; consecutive turns
    that land on the same role are merged, with tool results first as the API requires.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role is Role.SYSTEM and not out:
            if turn.text:
                system.append(turn.text)
            continue
        role = "assistant" if turn.role is Role.ASSISTANT else "user"
        blocks = _blocks(turn)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            merged = out[-1]["content"] + blocks
            merged.sort(key=lambda b: b["type"] != "tool_result")  # stable: tool results first
            out[-1]["content"] = merged
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(system), out
