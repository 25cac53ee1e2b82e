"""``OpenAICompatible``: the Chat Completions API over httpx with SSE streaming.

One class serves OpenAI and the servers that copy its API (vLLM, llama.cpp server, Ollama, LM Studio) through
``base_url``.
"""

from __future__ import annotations

import contextlib
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
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageDelta,
    UsageError,
    UseTool,
)
from loop.errors import StreamError
from provider._openai_messages import messages
from provider._strict import strict_compatible
from provider._http import SSEEvent, drain, excerpt, plain, sse_stream, status_error, transport_error

OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
OUTPUT_TOOL = "final_answer"  # the forced tool that carries a structured answer with structured_output="tool"
STRUCTURED_OUTPUT = ("response_format", "tool")
_FINISH = {"tool_calls": "tool_calls", "function_call": "tool_calls"}


class OpenAICompatible:
    """Streams Chat Completions from ``base_url`` (OpenAI itself unless told otherwise).

    ``api_key`` defaults to ``OPENAI_API_KEY``; it is required for OpenAI itself (a missing key is an error
    here, not a 401 later) and optional for local servers. Pass ``client`` to share one ``httpx.AsyncClient``;
    a client the provider made itself is closed by ``aclose``.

    Streams are read as the API reference draws them and end at ``data: [DONE]``; anything else (cut short, no
    ``[DONE]``, invalid JSON, an error object mid-stream) raises a ``ProviderError``, never a short answer.
    Unknown fields and named events are ignored, and common deviations of compatible servers are accepted:
    tool calls without an ``index`` or sharing one, arguments sent as an object, usage in several chunks.

    ``Options.n`` above 1 asks for that many choices in one response (``supports_choices``): every delta
    carries its choice's index, each choice ends with its own ``Finish``, and one ``UsageDelta`` covers the
    whole response, since the prompt is paid once. ``seed``, ``top_p`` and ``reasoning_effort`` are sent as
    the API names them, and ``Options.extra`` is merged into the body last. A turn's ``name`` is sent as the
    message's ``name`` (user, assistant and system messages), with characters the API refuses replaced by
    ``_`` and cut to 64 characters. ``UsageDelta.model`` is the model the response names.

    ``Options.output_schema`` is asked for as ``structured_output`` says. ``"response_format"`` (the default)
    sends it as ``response_format`` of type ``json_schema``. ``"tool"``, for servers without ``response_format``,
    adds a function tool named ``final_answer`` (``OUTPUT_TOOL``) whose parameters are the schema and forces a
    call to it; that call's arguments stream back as ``TextDelta``s and the choice finishes with ``"stop"`` when it
    was the only call, so the answer arrives as text either way (a request that already has a tool of that name
    is a ``UsageError``). The schema is marked ``strict`` only when ``strict_output`` is on *and* the schema
    qualifies (``strict_compatible``: every object closed and requiring all its properties, which schemas with
    optional fields are not); otherwise ``strict`` is ``false`` in ``response_format`` and left out of the tool.
    """

    supports_choices = True  # can return several choices for one request (Options.n)

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
        structured_output: str = "response_format",
    ) -> None:
        if not isinstance(model, str) or not model:
            raise UsageError(f"OpenAICompatible needs a model name, got {model!r}")
        if structured_output not in STRUCTURED_OUTPUT:
            raise UsageError(f"structured_output must be one of {', '.join(map(repr, STRUCTURED_OUTPUT))}, "
                             f"got {structured_output!r}")
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
        self._structured = structured_output

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
        tools = [{"type": "function",
                  "function": {"name": t.name, "description": t.description, "parameters": plain(t.parameters)}}
                 for t in request.tools]
        choice = opts.tool_choice
        schema = plain(opts.output_schema) if opts.output_schema is not None else None
        strict = self._strict and strict_compatible(schema)
        if schema is not None and self._structured == "tool":
            if any(t.name == OUTPUT_TOOL for t in request.tools):
                raise UsageError(f"the request has a tool named {OUTPUT_TOOL!r}, which structured_output='tool' "
                                 "needs for the answer; rename the tool or use structured_output='response_format'")
            output = {"name": OUTPUT_TOOL, "description": "Give the final answer in the required structure.",
                      "parameters": schema}
            tools.append({"type": "function", "function": {**output, "strict": True} if strict else output})
            choice = UseTool(OUTPUT_TOOL)
        elif schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": schema, "strict": strict}}
        if tools:
            body["tools"] = tools
            if choice is not None:
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
        if opts.n is not None and opts.n > 1:
            body["n"] = opts.n
        if opts.seed is not None:
            body["seed"] = opts.seed
        if opts.top_p is not None:
            body["top_p"] = opts.top_p
        if opts.reasoning_effort is not None:
            body["reasoning_effort"] = opts.reasoning_effort
        if opts.extra:
            body.update(plain(opts.extra))
        return body

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        tool_mode = self._structured == "tool" and request.options.output_schema is not None
        return self._stream(self.body(request), output_tool=OUTPUT_TOOL if tool_mode else None)

    async def _stream(self, body: dict[str, Any], *, output_tool: str | None) -> AsyncIterator[Delta]:
        who = self.who
        chunks = _Chunks(who, output_tool)
        try:
            async with self._client.stream("POST", f"{self.base_url}/chat/completions", json=body,
                                           headers=self._headers) as response:
                if not 200 <= response.status_code < 300:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    raise status_error(who, response.status_code, text, response.headers)
                if response.headers.get("content-type", "").lower().startswith("application/json"):
                    # Not a stream: an error reported with status 200, or a server that ignored stream=true.
                    raise _not_a_stream(who, (await response.aread()).decode("utf-8", errors="replace"))
                done = False
                async with contextlib.aclosing(sse_stream(response.aiter_bytes())) as events:
                    async for event in events:
                        if event.event not in ("message", "error"):
                            continue  # named events some servers add (pings, metrics) carry no chunk
                        if event.data.strip() == "[DONE]":
                            done = True
                            break
                        for delta in chunks.deltas(event):
                            yield delta
                    if not done:
                        raise StreamError(f"{who} ended the stream without its final 'data: [DONE]' event; "
                                          "the response may be incomplete", retryable=True)
                    await drain(events)
        except httpx.HTTPError as exc:
            raise transport_error(who, exc) from exc
        if chunks.usage is not None:
            yield UsageDelta(chunks.usage, chunks.model)  # the whole response's: the prompt is charged once
        for finish in chunks.finishes():
            yield finish

    def __repr__(self) -> str:
        return f"OpenAICompatible({self.model!r}, base_url={self.base_url!r})"


class _Chunks:
    """Reads the chunks of one response into deltas, keeping what spans chunks: the usage (a total, so the last
    report wins), the model that answered, and per choice its finish reason and tool-call slots. Calls to
    ``output_tool`` (if one was forced for structured output) are read as text."""

    __slots__ = ("who", "output_tool", "usage", "model", "choices")

    def __init__(self, who: str, output_tool: str | None = None) -> None:
        self.who = who
        self.output_tool = output_tool
        self.usage: Usage | None = None
        self.model: str | None = None
        self.choices: dict[int, _Choice] = {0: _Choice()}

    def deltas(self, event: SSEEvent) -> list[Delta]:
        chunk = event.json(self.who)
        if not isinstance(chunk, dict):
            raise StreamError(f"{self.who} sent a chunk that is not a JSON object on line {event.line}")
        error = chunk.get("error")
        if error or event.event == "error":
            raise _stream_error(self.who, error or chunk)
        try:
            return self._read(chunk)
        except (AttributeError, TypeError, ValueError) as exc:
            raise StreamError(
                f"{self.who} sent a chunk of an unexpected shape in the event on line {event.line} "
                f"({type(exc).__name__}: {exc}): {excerpt(event.data, 200)!r}"
            ) from None

    def finishes(self) -> list[Finish]:
        """One ``Finish`` per choice seen, in choice order; choice 0 always."""
        return [Finish(self.choices[i].finish(), i) for i in sorted(self.choices)]

    def _read(self, chunk: dict[str, Any]) -> list[Delta]:
        out: list[Delta] = []
        usage = chunk.get("usage")
        if usage:
            self.usage = _usage(usage)
        model = chunk.get("model")
        if model and isinstance(model, str):
            self.model = model
        for choice in chunk.get("choices") or ():
            index = choice.get("index")
            if type(index) is not int:
                if index is not None:
                    raise ValueError(f"a choice index must be a whole number, got {index!r}")
                index = 0  # servers answering one choice sometimes leave the index out
            state = self.choices.get(index)
            if state is None:
                if index < 0:
                    raise ValueError(f"a choice index must be a whole number, got {index!r}")
                state = self.choices[index] = _Choice()
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                out.append(ReasoningDelta(_text(reasoning), None, index))
            content = delta.get("content")
            if content:
                out.append(TextDelta(_text(content), index))
            refusal = delta.get("refusal")
            if refusal:
                # Structured output puts a refusal here instead of in content; dropping it would leave an
                # empty answer that looks like success.
                state.refused = True
                out.append(TextDelta(_text(refusal), index))
            for call in delta.get("tool_calls") or ():
                fn = call.get("function") or {}
                name = fn.get("name") or None
                arguments = fn.get("arguments")
                if arguments is None:
                    arguments = ""
                elif not isinstance(arguments, str):
                    arguments = json.dumps(arguments)  # some servers send the object itself
                call_id = call.get("id") or None
                slot = state.slot(call.get("index"), call_id)
                if name is not None and name == self.output_tool:
                    state.output.add(slot)
                if slot in state.output:
                    if arguments:
                        out.append(TextDelta(arguments, index))
                    continue
                state.other_calls = True
                out.append(ToolCallDelta(slot, call_id, name, arguments, index))
            reason = choice.get("finish_reason")
            if reason:
                state.reason = _FINISH.get(reason, reason)
        return out


class _Choice:
    """What one choice keeps across chunks: its finish reason, whether it refused, which tool call each
    fragment belongs to (every choice numbers its calls from 0), and which calls carry structured output."""

    __slots__ = ("reason", "refused", "output", "other_calls", "_slot_of_id", "_id_of_slot", "_moved", "_last",
                 "_next")

    def __init__(self) -> None:
        self.reason: str | None = None
        self.refused = False
        self.output: set[int] = set()  # slots of calls to the forced output tool, streamed as text
        self.other_calls = False
        self._slot_of_id: dict[str, int] = {}
        self._id_of_slot: dict[int, str] = {}
        self._moved: dict[int, int] = {}  # wire index -> slot, for a second call sent on a used index
        self._last = 0
        self._next = 0

    def finish(self) -> str:
        if self.refused and self.reason in (None, "stop"):
            return "content_filter"
        if self.reason == "tool_calls" and self.output and not self.other_calls:
            return "stop"  # the forced output call is the answer, not a call for the loop to run
        return self.reason or "stop"

    def slot(self, index: Any, call_id: str | None) -> int:
        """The index this fragment's call gets. It is the wire ``index``, except that servers which omit the
        index (or send several calls on one) get a fresh index for every new call id, so calls never merge."""
        if isinstance(index, int) and not isinstance(index, bool):
            slot = self._moved.get(index, index)
            owner = self._id_of_slot.get(slot)
            if call_id is not None and owner is not None and owner != call_id:
                slot = self._moved[index] = max(self._next, index + 1)
        elif call_id is None:
            slot = self._last
        else:
            slot = self._slot_of_id.get(call_id, self._next)
        if call_id is not None:
            self._slot_of_id[call_id] = slot
            self._id_of_slot[slot] = call_id
        self._last = slot
        self._next = max(self._next, slot + 1)
        return slot


def _text(value: Any) -> str:
    """A delta's text: a string, or the text parts of a list some servers send instead."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p.get("text") or "" for p in value if isinstance(p, dict) and p.get("type") == "text")
    raise TypeError(f"expected text, got {type(value).__name__}")


def _usage(data: Mapping[str, Any]) -> Usage:
    details = data.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=int(data.get("prompt_tokens") or 0),
        output_tokens=int(data.get("completion_tokens") or 0),
        cache_read_tokens=int(details.get("cached_tokens") or 0),
    )


# What an error object's ``code`` or ``type`` says, as an HTTP status (OpenAI, vLLM and llama.cpp spellings).
_ERROR_STATUS = {
    "invalid_request_error": 400, "BadRequestError": 400, "authentication_error": 401, "invalid_api_key": 401,
    "permission_error": 403, "not_found_error": 404, "rate_limit_exceeded": 429, "rate_limit_error": 429,
    "insufficient_quota": 429, "requests": 429, "tokens": 429, "server_error": 500, "api_error": 500,
    "InternalServerError": 500, "overloaded": 503, "overloaded_error": 503, "unavailable_error": 503,
}


def _stream_error(who: str, error: Any) -> Exception:
    """The typed error for an ``{"error": ...}`` object sent inside a stream that began with HTTP 200."""
    if not isinstance(error, dict):
        error = {"message": str(error)}
    status = 500
    code, kind = error.get("code"), error.get("type")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        status = code  # vLLM sends the status itself
    elif isinstance(code, str) and code in _ERROR_STATUS:
        status = _ERROR_STATUS[code]
    elif isinstance(kind, str) and kind in _ERROR_STATUS:
        status = _ERROR_STATUS[kind]
    return status_error(who, status, json.dumps({"error": error}), {})


def _not_a_stream(who: str, text: str) -> Exception:
    """The error for a JSON document where an event stream was asked for."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("error"):
        return _stream_error(who, data["error"])
    return StreamError(f"{who} answered with a JSON document instead of an event stream; does it support "
                       f"stream=true? {excerpt(text, 200)!r}")
