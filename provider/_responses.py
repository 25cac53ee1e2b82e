"""``OpenAIResponses``: OpenAI's Responses API over httpx with its semantic server-sent events."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx

from loop import (Delta, DeltaStream, ProviderInfo, Request, Usage, UsageDelta, UsageError, UseTool, approx_tokens,
                  tracing)
from loop.errors import StreamError
from provider._http import drain, http_url, json_data, openai_key, sse_stream, status_error, transport_error
from provider._openai_chunks import not_a_stream
from provider._responses_events import ResponseEvents
from provider._responses_items import input_items
from provider._strict import strict_compatible

OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
REASONING_SUMMARIES = ("auto", "concise", "detailed")
_log = tracing.logger("provider.openai_responses")


class OpenAIResponses:
    """Streams responses from OpenAI's Responses API (``POST {base_url}/responses``), OpenAI itself unless
    ``base_url`` names another server that speaks it.

    ``api_key`` defaults to ``OPENAI_API_KEY``; it is required for OpenAI itself (a missing key is an error
    here, not a 401 later) and optional elsewhere. Pass ``client`` to share one ``httpx.AsyncClient``; a client
    the provider made itself is closed by ``aclose``.

    Stateless by default: every request carries the whole conversation, with ``store: false``, and asks for
    ``include: ["reasoning.encrypted_content"]``. Reasoning items then come back as ``loop.Reasoning`` parts
    whose text is the summary (when one is asked for with ``reasoning_summary``) and whose signature carries the
    item's id and encrypted content (see ``provider._responses_items.REASONING_SIGNATURE``); the next request
    sends them back as ``reasoning`` input items, so the model keeps its reasoning across a tool loop. Reasoning
    made by another provider is not sent. ``store=True`` keeps responses on the server (and asks for no
    encrypted content): reasoning then goes back by its id alone.

    The conversation: leading system turns are the ``instructions``; tool calls go back as ``function_call``
    items and tool results as ``function_call_output`` items, paired by ``call_id`` (see ``input_items``).
    Tools are function tools, ``strict`` when their parameters qualify (``strict_compatible``: the API
    defaults to strict and refuses schemas that do not). ``Options.output_schema`` is asked for as
    ``text.format`` of type ``json_schema``, beside any tools (``info.json_schema``), and ``strict`` when
    ``strict_output`` is on and the schema qualifies.

    Options: ``max_tokens`` is sent as ``max_output_tokens``, ``temperature`` and ``top_p`` as they are,
    ``reasoning_effort`` as ``reasoning.effort``; ``seed`` is not part of the API and is ignored; ``stop``
    is not either, and asking for it is a ``UsageError`` (an answer that ran past its stop would look right).
    The API returns one choice per request, so ``n`` above 1 is a ``UsageError`` (``Step.sample`` makes
    concurrent calls instead). ``Options.extra`` is merged into the body last.

    The stream ends at ``response.completed`` (or ``response.incomplete``: ``max_output_tokens`` finishes with
    ``"length"``); a stream that ends without one, or that breaks the format, raises a ``StreamError``,
    never a short answer. ``response.failed`` and ``error`` events raise the typed error their code names
    (``server_error`` a ``ServerError``, ``rate_limit_exceeded`` a ``RateLimitError``, ...). Usage counts every
    input token, cached ones included, with the cached ones as ``Usage.cache_read_tokens`` (OpenAI caches long
    prompts by itself; ``prompt_cache_key`` is sent as the request's ``prompt_cache_key`` to keep requests that
    share it on one cache). A server that reports no usage gets it estimated and marked ``Usage.estimated``.
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
        store: bool = False,
        reasoning_summary: str | None = None,
        prompt_cache_key: str | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise UsageError(f"OpenAIResponses needs a model name, got {model!r}")
        if not isinstance(strict_output, bool) or not isinstance(store, bool):
            raise UsageError(f"strict_output and store are True or False, got {strict_output!r} and {store!r}")
        if reasoning_summary is not None and reasoning_summary not in REASONING_SUMMARIES:
            raise UsageError(f"reasoning_summary must be one of {', '.join(map(repr, REASONING_SUMMARIES))}, or "
                             f"None for no summary, got {reasoning_summary!r}")
        if prompt_cache_key is not None and (not isinstance(prompt_cache_key, str) or not prompt_cache_key.strip()):
            raise UsageError(f"prompt_cache_key must be a non-empty string or None, got {prompt_cache_key!r}")
        url = http_url(base_url)
        key = openai_key(api_key, url)
        on_openai = url.host == "api.openai.com"
        self.model = model
        self.base_url = str(base_url).rstrip("/")
        self.who = "OpenAI" if on_openai else f"Responses API server at {url.host}"
        self._headers = {"content-type": "application/json", **(headers or {})}
        if key:
            self._headers["authorization"] = f"Bearer {key}"
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self.strict_output = strict_output
        self.store = store
        self.reasoning_summary = reasoning_summary
        self.prompt_cache_key = prompt_cache_key
        self._streams_usage = True

    @property
    def info(self) -> ProviderInfo:
        """The model it asks for; one choice per request; structured output beside tools (``text.format``)."""
        return ProviderInfo(model=self.model, choices=False, json_schema=True, streams_usage=self._streams_usage)

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> OpenAIResponses:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def body(self, request: Request) -> dict[str, Any]:
        """The JSON body sent for ``request`` (see the class docstring)."""
        opts = request.options
        if opts.n is not None and opts.n > 1:
            raise UsageError(f"the Responses API returns one choice per request, and n={opts.n} was asked; ask "
                             "Step.sample for several, which makes concurrent calls")
        if opts.stop:
            raise UsageError(f"the Responses API has no stop sequences, and stop={list(opts.stop)!r} was asked; "
                             "leave Options.stop unset for this provider")
        instructions, items = input_items(request.turns, stored=self.store)
        body: dict[str, Any] = {"model": opts.model or self.model}
        if instructions:
            body["instructions"] = instructions
        body["input"] = items
        if request.tools:
            tools = []
            for t in request.tools:
                parameters = json_data(t.parameters)
                tools.append({"type": "function", "name": t.name, "description": t.description,
                              "parameters": parameters, "strict": strict_compatible(parameters)})
            body["tools"] = tools
            choice = opts.tool_choice
            if isinstance(choice, UseTool):
                body["tool_choice"] = {"type": "function", "name": choice.name}
            elif choice is not None:
                body["tool_choice"] = choice
        if opts.output_schema is not None:
            schema = json_data(opts.output_schema)
            body["text"] = {"format": {"type": "json_schema", "name": "output", "schema": schema,
                                       "strict": self.strict_output and strict_compatible(schema)}}
        reasoning: dict[str, str] = {}
        if opts.reasoning_effort is not None:
            reasoning["effort"] = opts.reasoning_effort
        if self.reasoning_summary is not None:
            reasoning["summary"] = self.reasoning_summary
        if reasoning:
            body["reasoning"] = reasoning
        if opts.temperature is not None:
            body["temperature"] = opts.temperature
        if opts.top_p is not None:
            body["top_p"] = opts.top_p
        if opts.max_tokens is not None:
            body["max_output_tokens"] = opts.max_tokens
        if self.prompt_cache_key is not None:
            body["prompt_cache_key"] = self.prompt_cache_key
        body["store"] = self.store
        if not self.store:
            body["include"] = ["reasoning.encrypted_content"]
        body["stream"] = True
        if opts.extra:
            body.update(json_data(opts.extra))
        return body

    def stream(self, request: Request) -> DeltaStream:
        return self._stream(request, self.body(request))

    async def _stream(self, request: Request, body: dict[str, Any]) -> AsyncGenerator[Delta, None]:
        who = self.who
        events = ResponseEvents(who)
        try:
            async with self._client.stream("POST", f"{self.base_url}/responses", json=body,
                                           headers=self._headers) as response:
                if not 200 <= response.status_code < 300:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    raise status_error(who, response.status_code, text, response.headers)
                if response.headers.get("content-type", "").lower().startswith("application/json"):
                    # Not a stream: an error reported with status 200, or a server that ignored stream=true.
                    raise not_a_stream(who, (await response.aread()).decode("utf-8", errors="replace"))
                async with contextlib.aclosing(sse_stream(response.aiter_bytes())) as stream:
                    async for event in stream:
                        for delta in events.deltas(event):
                            yield delta
                        if events.done:
                            break
                    if not events.done:
                        raise StreamError(f"{who} ended the stream without its final response.completed event; "
                                          "the response may be incomplete", retryable=True)
                    await drain(stream)  # so the connection goes back to the pool
        except httpx.HTTPError as exc:
            raise transport_error(who, exc) from exc
        usage = events.usage
        if usage is None or (not usage.input_tokens and not usage.output_tokens):
            if self._streams_usage:
                self._streams_usage = False
                _log.warning("the server streams no token usage; it is estimated", server=self.base_url)
            usage = Usage(approx_tokens(request.turns), -(-events.written // 4), estimated=True)
        yield UsageDelta(usage, events.model)
        yield events.finish()

    def __repr__(self) -> str:
        return f"OpenAIResponses({self.model!r}, base_url={self.base_url!r})"
