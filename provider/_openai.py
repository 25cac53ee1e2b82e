"""``OpenAICompatible``: the Chat Completions API over httpx with SSE streaming.

One class serves OpenAI and the servers that copy its API (vLLM, llama.cpp server, Ollama, LM Studio) through
``base_url``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx

from loop import (Delta, DeltaStream, ProviderInfo, ReasoningDelta, Request, TextDelta, ToolCallDelta, Usage,
                  UsageDelta, UsageError, UseTool, approx_tokens, tracing)
from loop.errors import StreamError
from provider._openai_chunks import Chunks, not_a_stream
from provider._openai_messages import messages
from provider._strict import strict_compatible
from provider._http import drain, http_url, json_data, openai_key, sse_stream, status_error, transport_error

OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
_log = tracing.logger("provider.openai")
JSON_OBJECT_PROMPT = ("Answer with one JSON object, and nothing else, that matches this JSON schema:\n{schema}")
"""The system message that carries the schema to a server that takes ``response_format`` ``json_object`` only."""
OUTPUT_TOOL = "final_answer"  # the forced tool that carries a structured answer with structured_output="tool"
STRUCTURED_OUTPUT = ("response_format", "tool")
MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")
# OpenAI's reasoning models (o1, o3, o4-mini, ..., the gpt-5 family, and fine-tunes of them) refuse max_tokens.
_REASONING_MODEL = re.compile(r"(ft:)?(o\d|gpt-5)")


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

    What the server honours are settings with safe defaults, corrected from what it does (and kept, for this
    provider, in ``info``): ``choices`` (``n`` above 1; a response with fewer choices than asked turns it off,
    and ``Step.sample`` asks for the missing ones one by one), ``json_schema`` (``response_format`` of type
    ``json_schema``; a server that refuses it, with a 400 or 422 naming ``response_format`` or ``json_schema``,
    is asked again at once with type ``json_object``, the schema beside it (llama.cpp's servers constrain the
    answer to it) and in a last system message, and every later
    request goes that way). Usage is always asked for (``stream_options.include_usage``); a server that streams
    none, or only zeros, gets its usage estimated (``loop.approx_tokens`` of the prompt, a token per four
    characters of the answer) and marked ``Usage.estimated``, so token and cost limits still hold.

    ``Options.max_tokens`` goes in the field ``max_tokens_field`` names (``MAX_TOKENS_FIELDS``). Left ``None``,
    the model the request names decides on OpenAI itself (``api.openai.com``): a name starting with ``o`` and a
    digit (``o1``, ``o3``, ``o4-mini``) or with ``gpt-5``, after any ``ft:``, gets ``max_completion_tokens``,
    which those reasoning models require; other models, and every model on another server (vLLM, llama.cpp
    server, Ollama, a proxy named by ``OPENAI_BASE_URL``), get ``max_tokens``.

    Prompt caching needs no marks here: OpenAI caches prompts of 1024 tokens or more by themselves, routing a
    request by a hash of its first tokens, and reports the tokens read back (``Usage.cache_read_tokens``,
    priced by ``loop.Price.cached_input``; there is no charge for writing). Nothing that varies per turn goes
    before the history: the messages are the turns in order (the schema message of the ``json_object``
    fallback goes last), and the tools are the request's, the same from turn to turn. ``prompt_cache_key`` is
    sent as the request's ``prompt_cache_key``, which OpenAI combines with that hash to keep requests with the
    same key on the same cache: give one per conversation or per agent when many requests share a long start.
    It is off by default: a key made from the prompt itself would add nothing to the hash, and some compatible
    servers refuse fields they do not know. One request can set or override it with
    ``Options(extra={"prompt_cache_key": ...})``.
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
        structured_output: str = "response_format",
        max_tokens_field: str | None = None,
        choices: bool = True,
        json_schema: bool = True,
        prompt_cache_key: str | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise UsageError(f"OpenAICompatible needs a model name, got {model!r}")
        if prompt_cache_key is not None and (not isinstance(prompt_cache_key, str) or not prompt_cache_key.strip()):
            raise UsageError(f"prompt_cache_key must be a non-empty string or None, got {prompt_cache_key!r}")
        if structured_output not in STRUCTURED_OUTPUT:
            raise UsageError(f"structured_output must be one of {', '.join(map(repr, STRUCTURED_OUTPUT))}, "
                             f"got {structured_output!r}")
        if max_tokens_field is not None and max_tokens_field not in MAX_TOKENS_FIELDS:
            raise UsageError(f"max_tokens_field must be one of {', '.join(map(repr, MAX_TOKENS_FIELDS))}, or None "
                             f"to choose by model, got {max_tokens_field!r}")
        url = http_url(base_url)
        key = openai_key(api_key, url)
        self._on_openai = url.host == "api.openai.com"
        self.model = model
        self.base_url = str(base_url).rstrip("/")
        self.who = "OpenAI" if self._on_openai else f"OpenAI-compatible server at {url.host}"
        self._headers = {"content-type": "application/json", **(headers or {})}
        if key:
            self._headers["authorization"] = f"Bearer {key}"
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._strict = strict_output
        self._structured = structured_output
        self._max_tokens_field = max_tokens_field
        if not isinstance(choices, bool) or not isinstance(json_schema, bool):
            raise UsageError(f"choices and json_schema are True or False, got {choices!r} and {json_schema!r}")
        self._choices = choices  # corrected from what the server does (see the class docstring)
        self._json_schema = json_schema
        self._streams_usage = True
        self.prompt_cache_key = prompt_cache_key

    @property
    def info(self) -> ProviderInfo:
        """The model it asks for, and what the server honours as far as it has shown (see the class docstring)."""
        beside_tools = self._json_schema and self._structured == "response_format"  # a forced tool excludes others
        return ProviderInfo(model=self.model, choices=self._choices, json_schema=beside_tools,
                            streams_usage=self._streams_usage)

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
                  "function": {"name": t.name, "description": t.description, "parameters": json_data(t.parameters)}}
                 for t in request.tools]
        choice = opts.tool_choice
        schema = json_data(opts.output_schema) if opts.output_schema is not None else None
        strict = self._strict and strict_compatible(schema)
        if schema is not None and self._structured == "tool":
            if any(t.name == OUTPUT_TOOL for t in request.tools):
                raise UsageError(f"the request has a tool named {OUTPUT_TOOL!r}, which structured_output='tool' "
                                 "needs for the answer; rename the tool or use structured_output='response_format'")
            output = {"name": OUTPUT_TOOL, "description": "Give the final answer in the required structure.",
                      "parameters": schema}
            tools.append({"type": "function", "function": {**output, "strict": True} if strict else output})
            choice = UseTool(OUTPUT_TOOL)
        elif schema is not None and not self._json_schema:
            # The schema goes in the prompt, which every model reads, and beside the type, where servers that
            # take it (llama.cpp's) hold the answer to it with a grammar.
            body["response_format"] = {"type": "json_object", "schema": schema}
            body["messages"].append({"role": "system", "content": JSON_OBJECT_PROMPT.format(
                schema=json.dumps(schema, ensure_ascii=False))})
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
            body[self._max_tokens_key(body["model"])] = opts.max_tokens
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
        if self.prompt_cache_key is not None:
            body["prompt_cache_key"] = self.prompt_cache_key
        if opts.extra:
            body.update(json_data(opts.extra))
        return body

    def _max_tokens_key(self, model: str) -> str:
        """The field that carries ``Options.max_tokens`` when ``model`` answers (see the class docstring)."""
        if self._max_tokens_field is not None:
            return self._max_tokens_field
        if self._on_openai and _REASONING_MODEL.match(model):
            return "max_completion_tokens"
        return "max_tokens"

    def stream(self, request: Request) -> DeltaStream:
        tool_mode = self._structured == "tool" and request.options.output_schema is not None
        return self._stream(request, self.body(request), output_tool=OUTPUT_TOOL if tool_mode else None)

    def _refused_json_schema(self, body: dict[str, Any], status: int, text: str) -> bool:
        """Whether an error answer refuses ``response_format`` of type ``json_schema``; it is then not asked
        for again. A 400 or 422 naming either is a refusal; so is a 500 naming both, as llama-cpp-python's
        server answers a request its own validation rejects."""
        asked = (body.get("response_format") or {}).get("type") == "json_schema"
        if not asked:
            return False
        names_one = "json_schema" in text or "response_format" in text
        names_both = "json_schema" in text and "response_format" in text
        if not ((status in (400, 422) and names_one) or (status == 500 and names_both)):
            return False
        self._json_schema = False
        _log.warning("the server refuses response_format json_schema; asking for json_object from now on",
                     server=self.base_url)
        return True

    async def _stream(self, request: Request, body: dict[str, Any], *,
                      output_tool: str | None) -> AsyncGenerator[Delta, None]:
        who = self.who
        chunks = Chunks(who, output_tool)
        written = 0  # characters of answer streamed: the estimate of the output when no usage comes
        again = False
        try:
            async with self._client.stream("POST", f"{self.base_url}/chat/completions", json=body,
                                           headers=self._headers) as response:
                if not 200 <= response.status_code < 300:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    if not self._refused_json_schema(body, response.status_code, text):
                        raise status_error(who, response.status_code, text, response.headers)
                    again = True  # nothing was streamed: ask again the way the server takes
                elif response.headers.get("content-type", "").lower().startswith("application/json"):
                    # Not a stream: an error reported with status 200, or a server that ignored stream=true.
                    raise not_a_stream(who, (await response.aread()).decode("utf-8", errors="replace"))
                else:
                    done = False
                    async with contextlib.aclosing(sse_stream(response.aiter_bytes())) as events:
                        async for event in events:
                            if event.event not in ("message", "error"):
                                continue  # named events some servers add (pings, metrics) carry no chunk
                            if event.data.strip() == "[DONE]":
                                done = True
                                break
                            for delta in chunks.deltas(event):
                                if isinstance(delta, (TextDelta, ReasoningDelta)):
                                    written += len(delta.text)
                                elif isinstance(delta, ToolCallDelta):
                                    written += len(delta.arguments_fragment)
                                yield delta
                        if not done:
                            raise StreamError(f"{who} ended the stream without its final 'data: [DONE]' event; "
                                              "the response may be incomplete", retryable=True)
                        await drain(events)
        except httpx.HTTPError as exc:
            raise transport_error(who, exc) from exc
        if again:
            async with contextlib.aclosing(self._stream(request, self.body(request), output_tool=output_tool)) as retry:
                async for delta in retry:
                    yield delta
            return
        asked = body.get("n", 1)
        if asked > 1 and len(chunks.choices) < asked and self._choices:
            self._choices = False
            _log.warning("the server answers one choice whatever n asks; samples are asked for one by one from now on",
                         server=self.base_url, asked=asked, answered=len(chunks.choices))
        usage = chunks.usage
        if usage is None or (not usage.input_tokens and not usage.output_tokens):
            if self._streams_usage:
                self._streams_usage = False
                _log.warning("the server streams no token usage; it is estimated", server=self.base_url)
            usage = Usage(approx_tokens(request.turns), -(-written // 4), estimated=True)
        yield UsageDelta(usage, chunks.model)  # the whole response's: the prompt is charged once
        for finish in chunks.finishes():
            yield finish

    def __repr__(self) -> str:
        return f"OpenAICompatible({self.model!r}, base_url={self.base_url!r})"
