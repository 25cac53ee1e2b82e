"""``Anthropic``: the Messages API over httpx with SSE streaming."""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx

from loop import (Delta, DeltaStream, File, Image, ProviderInfo, Reasoning, Request, Role, Text, ToolCall, ToolResult,
                  Turn, UsageError, UseTool)
from loop.checks import int_at_least, positive_int
from loop.errors import StreamError
from provider._responses_items import REASONING_SIGNATURE
from provider._anthropic_events import REDACTED, MessageEvents
from provider._http import drain, http_url, json_data, sse_stream, status_error, transport_error
from provider._prompt_cache import MAX_BREAKPOINTS, marks, minimum_tokens, place_breakpoints

ANTHROPIC_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
OUTPUT_TOOL = "structured_output"
DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
_THINKING = ("thinking", "redacted_thinking")
_ORDER = {"thinking": 0, "redacted_thinking": 0, "tool_result": 0, "text": 1, "tool_use": 2}
# Options.reasoning_effort as an extended-thinking budget; None turns thinking off.
_EFFORT_BUDGET: dict[str, int | None] = {"minimal": None, "low": 1024, "medium": 4096, "high": 16384}


class Anthropic:
    """Streams Messages API responses.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY`` and is required. ``max_tokens`` is the default output cap
    (the API requires one). ``thinking_budget`` turns on extended thinking with that many tokens; thinking
    blocks come back as ``Reasoning`` parts whose signatures are sent back on the next request (a
    ``redacted_thinking`` block travels as a ``Reasoning`` with empty text whose signature starts with
    ``REDACTED``). Requests the API refuses with thinking on go without it (see ``body``). Structured output
    (``Options.output_schema``) is asked for as a forced call to a tool whose input is the output; its JSON
    arrives as text.

    Sampling options: ``top_p`` is sent as is and ``Options.extra`` is merged into the body last. ``seed`` is
    not part of the Messages API and is ignored. The API returns one choice per request, so ``n`` above 1 is a
    ``UsageError`` (``Step.sample`` makes concurrent calls instead). ``reasoning_effort`` maps to extended
    thinking: ``"low"``, ``"medium"`` and ``"high"`` turn it on with a budget of 1024, 4096 and 16384 tokens
    (over ``thinking_budget``), and ``"minimal"`` turns it off. ``UsageDelta.model`` is the model named by
    ``message_start``.

    The API has no field for a speaker's name, so a user or assistant turn with a ``name`` has its first text
    block prefixed with ``"{name}: "``.

    Images (``loop.Image``) go as ``image`` blocks, their bytes as a ``base64`` source or their ``url`` as a
    ``url`` source; files (``loop.File``) as ``document`` blocks: a PDF by bytes or URL, plain text by its
    text. A tool result with attachments sends its content as an array: its text, then their blocks. What the
    API cannot carry (another file type, an image in an assistant or system turn) is a ``UsageError``.

    Prompt caching is on (``prompt_cache=True``): every request marks up to four ``cache_control`` breakpoints
    (the API's limit) where the next request will start the same: the end of the conversation so far, the end
    of the previous request, the end of ``system`` and the last tool (see ``place_breakpoints``), each only
    where the prompt up to it reaches the model's minimum cacheable length (1024 tokens; 2048 for Claude 3 and
    3.5 Haiku; 4096 for Haiku 4.5 and Opus 4.5 and 4.6), estimated generously, or ``cache_min_tokens`` when
    given. Short prompts are sent unmarked. The 5-minute cache is used: its writes cost 1.25 times the input
    price and its reads a tenth (``Usage.cache_write_tokens`` and ``cache_read_tokens``, priced by
    ``loop.Price``). ``prompt_cache=False`` sends no marks (for a compatible server that refuses them, say);
    marks in ``Options.extra`` are kept and count toward the four.
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
        prompt_cache: bool = True,
        cache_min_tokens: int | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise UsageError(f"Anthropic needs a model name, got {model!r}")
        if not isinstance(prompt_cache, bool):
            raise UsageError(f"prompt_cache must be True or False, got {prompt_cache!r}")
        url = http_url(base_url, ANTHROPIC_URL)
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if not isinstance(key, str) or not key.strip():
            raise UsageError("Anthropic needs an API key: set ANTHROPIC_API_KEY or pass api_key=")
        self.model = model
        self.base_url = str(base_url).rstrip("/")
        self.who = "Anthropic" if url.host == "api.anthropic.com" else f"Anthropic-compatible server at {url.host}"
        self.max_tokens = positive_int("max_tokens", max_tokens)
        self.thinking_budget = int_at_least("thinking_budget", thinking_budget, 1024, optional=True)
        self.prompt_cache = prompt_cache
        self.cache_min_tokens = positive_int("cache_min_tokens", cache_min_tokens, optional=True)
        self._headers = {"x-api-key": key, "anthropic-version": API_VERSION, "content-type": "application/json",
                         **(headers or {})}
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)

    @property
    def info(self) -> ProviderInfo:
        """The model it asks for; one choice per request (the Messages API has no ``n``)."""
        return ProviderInfo(model=self.model)

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Anthropic:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def body(self, request: Request) -> dict[str, Any]:
        """The JSON body sent for ``request``.

        Extended thinking is left out of a request the API would refuse with it on: one that forces a tool
        call (structured output, ``"required"``, ``UseTool``), and one that continues a tool loop whose
        assistant message does not open with signed thinking (it came from another provider or from a forced
        turn). While thinking is on, ``temperature`` is not sent, nor a ``top_p`` below 0.95: the API refuses
        them with thinking. Cache breakpoints are placed last, after ``Options.extra`` (see the class docstring).
        """
        opts = request.options
        if opts.n is not None and opts.n > 1:
            raise UsageError(f"Anthropic returns one choice per request, and n={opts.n} was asked; ask "
                             "Step.sample for several, which makes concurrent calls")
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
        forced = False
        if tools:
            body["tools"] = tools
            if choice is not None:
                body["tool_choice"] = (
                    {"type": "tool", "name": choice.name} if isinstance(choice, UseTool)
                    else {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
                )
                forced = body["tool_choice"]["type"] in ("any", "tool")
        budget = self.thinking_budget
        if opts.reasoning_effort is not None:
            budget = _EFFORT_BUDGET[opts.reasoning_effort]
        thinking = budget is not None and not forced and not _unsigned_tool_loop(msgs)
        if opts.temperature is not None and not thinking:
            body["temperature"] = min(opts.temperature, 1.0)
        if opts.top_p is not None and (not thinking or opts.top_p >= 0.95):
            body["top_p"] = opts.top_p
        if opts.stop:
            body["stop_sequences"] = list(opts.stop)
        if thinking and budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            body["max_tokens"] = max(max_tokens, budget + 1)
        if opts.extra:
            body.update(json_data(opts.extra))
        if self.prompt_cache:
            # Only Options.extra can bring marks of its own; counting them costs a pass over the whole body.
            room = MAX_BREAKPOINTS - (marks(body) if opts.extra else 0)
            place_breakpoints(body, self.cache_min_tokens or minimum_tokens(str(body.get("model"))), room=room)
        return body

    def stream(self, request: Request) -> DeltaStream:
        structured = request.options.output_schema is not None
        return self._stream(self.body(request), output_tool=OUTPUT_TOOL if structured else None)

    async def _stream(self, body: dict[str, Any], *, output_tool: str | None) -> AsyncGenerator[Delta, None]:
        who = self.who
        events = MessageEvents(who, output_tool)
        try:
            async with self._client.stream("POST", f"{self.base_url}/v1/messages", json=body,
                                           headers=self._headers) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    raise status_error(who, response.status_code, text, response.headers)
                async with contextlib.aclosing(sse_stream(response.aiter_bytes())) as stream:
                    async for event in stream:
                        for delta in events.deltas(event):
                            yield delta
                        if events.done:
                            break
                    if not events.done:
                        raise StreamError(f"{who} ended the stream without its final message_stop event; "
                                          "the response may be incomplete", retryable=True)
                    await drain(stream)  # so the connection goes back to the pool
        except httpx.HTTPError as exc:
            raise transport_error(who, exc) from exc
        yield events.usage()
        yield events.finish()

    def __repr__(self) -> str:
        return f"Anthropic({self.model!r})"


def _blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in turn.parts:
        if isinstance(part, Text) and part.text.strip():  # the API refuses empty and whitespace-only text blocks
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, Reasoning) and part.signature and not part.signature.startswith(REASONING_SIGNATURE):
            # Only Anthropic's signed thinking can go back; reasoning from another provider (OpenAI's encrypted
            # reasoning items included) cannot be verified.
            if part.signature.startswith(REDACTED):
                blocks.append({"type": "redacted_thinking", "data": part.signature[len(REDACTED):]})
            else:
                blocks.append({"type": "thinking", "thinking": part.text, "signature": part.signature})
        elif isinstance(part, ToolCall):
            try:
                arguments = json.loads(part.arguments or "{}")
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                arguments = {}  # the call was answered with an error result; the API needs an object here
            blocks.append({"type": "tool_use", "id": part.id, "name": part.name, "input": arguments})
        elif isinstance(part, ToolResult):
            content: str | list[dict[str, Any]] = part.content
            if part.attachments:
                content = [{"type": "text", "text": part.content}] if part.content.strip() else []
                content.extend(_media_block(a) for a in part.attachments)
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.call_id, "content": content}
            if part.is_error:
                block["is_error"] = True
            blocks.append(block)
        elif isinstance(part, (Image, File)):
            if turn.role not in (Role.USER, Role.TOOL):
                _refuse_media(turn)
            blocks.append(_media_block(part))
    return blocks


def _refuse_media(turn: Turn) -> None:
    """Raise ``UsageError`` if ``turn`` holds an image or a file: only user and tool turns may."""
    for part in turn.parts:
        if isinstance(part, (Image, File)):
            raise UsageError(f"Anthropic cannot send {part!r} in {turn.role.value} turns: images and files "
                             "go in user turns and tool results")


def _media_block(part: Image | File) -> dict[str, Any]:
    """An ``image`` block for an image, a ``document`` block for a PDF or a plain-text file."""
    if isinstance(part, Image):
        if part.data is None:
            return {"type": "image", "source": {"type": "url", "url": part.url}}
        return {"type": "image", "source": {"type": "base64", "media_type": part.media_type,
                                            "data": base64.b64encode(part.data).decode("ascii")}}
    source: dict[str, Any]
    if part.media_type in (None, "application/pdf") and part.data is None:
        source = {"type": "url", "url": part.url}
    elif part.media_type == "application/pdf" and part.data is not None:
        source = {"type": "base64", "media_type": "application/pdf",
                  "data": base64.b64encode(part.data).decode("ascii")}
    elif part.media_type == "text/plain" and part.data is not None:
        try:
            source = {"type": "text", "media_type": "text/plain", "data": part.data.decode("utf-8")}
        except UnicodeDecodeError:
            raise UsageError(f"Anthropic cannot send {part!r}: a text/plain document must be UTF-8") from None
    else:
        raise UsageError(f"Anthropic cannot send {part!r}: its documents are PDFs (by bytes or URL) and "
                         "text/plain files (by bytes)")
    block = {"type": "document", "source": source}
    if part.name is not None:
        block["title"] = part.name
    return block


_NAMED = (Role.USER, Role.ASSISTANT)


def _prefix_name(blocks: list[dict[str, Any]], name: str) -> None:
    """Say who spoke the way the API can carry it: ``"{name}: "`` before the first text block."""
    for block in blocks:
        if block["type"] == "text":
            block["text"] = f"{name}: {block['text']}"
            return


def _unsigned_tool_loop(msgs: list[dict[str, Any]]) -> bool:
    """Whether ``msgs`` continue a tool loop whose assistant message does not open with thinking. With thinking
    on, the API refuses that ("a final assistant message must start with a thinking block") and says to turn
    thinking off for the request instead."""
    if len(msgs) < 2:
        return False
    assistant, user = msgs[-2], msgs[-1]
    return (assistant["role"] == "assistant" and user["content"][0]["type"] == "tool_result"
            and assistant["content"][0]["type"] not in _THINKING)


def messages(turns: tuple[Turn, ...]) -> tuple[str, list[dict[str, Any]]]:
    """``turns`` as the Messages API's ``system`` text and ``messages`` list.

    Leading system turns become ``system``; later ones (a verification report, say) become user text, since
    the API has no system role inside the conversation. Tool results go in a user message; consecutive turns
    that land on the same role are merged. Within a message the order is the one the API requires: tool
    results before text in a user message; thinking, then text, then tool calls in an assistant message.
    An assistant turn with nothing but thinking is left out (the API refuses a message that ends in thinking).
    A user or assistant turn with a ``name`` has ``"{name}: "`` put before its first text block.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role is Role.SYSTEM and not out:
            _refuse_media(turn)
            if turn.text:
                system.append(turn.text)
            continue
        role = "assistant" if turn.role is Role.ASSISTANT else "user"
        blocks = _blocks(turn)
        if turn.name is not None and turn.role in _NAMED:
            _prefix_name(blocks, turn.name)
        if all(block["type"] in _THINKING for block in blocks):  # also true of no blocks at all
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for message in out:
        message["content"].sort(key=lambda block: _ORDER.get(block["type"], 1))  # stable
    return "\n\n".join(system), out
