"""``POST /v1/responses``: OpenAI's Responses API over the pattern a ``Manager`` runs, beside Chat Completions, on
the same sessions, limits, errors, cancellation and retries (``session.openai._app`` describes those; this
module says what differs).

Conversations. A response is kept (``store``, true unless the request says ``false``): its conversation is a
session of its own, named after the first response (``resp_<hex>``), and each response's id says where in that
conversation it starts (``resp_<hex>_<n>``: the conversation held ``n`` turns before its message). A request with
``previous_response_id`` continues after that response: in the same session when that response is the
conversation's latest and nothing else runs in it; otherwise (an earlier response, or one whose conversation is
busy) in a new conversation seeded with the turns up to that response's end, as OpenAI forks a conversation. Its
``input`` is then the new message only (a user message, or the outputs of the calls the previous response left
for the client). As on OpenAI, ``instructions`` are not carried over: each response runs under its own, so a
continuation whose ``instructions`` differ from the conversation's (sent anew, changed, or left out) runs in a new
conversation that opens with them (an agent handing off to another does this). ``store: false`` runs in a
session of its own, seeded from the previous response if one is named, deleted once answered (unless the
endpoint keeps conversations), so no later request can continue after it. A previous response that is not kept,
not the caller's, or unknown is 404 ``previous_response_not_found``. Conversations are per token, as every
session is.

The answer and its stream: ``session.openai._responses_wire``. Typed answers (``text.format``), client tools
(function tools, whose calls end the run as ``function_call`` items), ``X-Request-Id`` retries and cancellation on
disconnect work as on the Chat Completions endpoint.
"""

from __future__ import annotations

import functools
import re
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
from starlette.requests import Request

from loop import Role, Turn
from session._bearer import caller_in, owner_in
from session._message import ToolResultsMismatch, before
from session._session import Session
from session.openai._answer import failure, opening_errors
from session.openai._completion import Completion
from session.openai._errors import OpenAIError
from session.openai._replay import KEY_HEADER, Replay
from session.openai._request import ChatRequest
from session.openai._responses_request import (ResponsesRequest, instructions_turn, named_results,
                                               parse_responses_request)
from session.openai._responses_wire import ResponsesWire

if TYPE_CHECKING:
    from session.openai._app import _Endpoint

_RESPONSE_ID = re.compile(r"resp_([0-9a-f]{32})_([0-9]{1,9})")


@attrs.frozen
class _Opened:
    session: Session
    conversation: str  # the hex that names the session and its responses
    start: int  # the turns the conversation held before this response's message
    chat: ChatRequest


class Responses:
    """The handler of ``POST /v1/responses``, over an OpenAI-compatible endpoint's sessions and settings."""

    def __init__(self, endpoint: _Endpoint) -> None:
        self.endpoint = endpoint
        self.claimed: set[str] = set()  # sessions a response is continuing in place: the next forks

    async def create(self, request: Request) -> Any:
        endpoint = self.endpoint
        entry = None
        try:
            body = await endpoint.read(request)
            parsed = parse_responses_request(body, model_name=endpoint.model_name, agent_tools=endpoint.agent_tools())
            key = request.headers.get(KEY_HEADER)
            if key is not None:
                entry, new = endpoint.replays.take(owner_in(request.scope), key, b"POST /v1/responses\n" + body)
                if not new:  # a retry: the first request's run answers it
                    return Replay(entry, stream=parsed.chat.stream, wire=functools.partial(self._wire, parsed))
            opened = await self._open(request, parsed)
        except BaseException as error:
            if entry is not None:
                endpoint.replays.drop(entry)  # nothing ran: a retry may run
            if isinstance(error, OpenAIError):
                return error.response()
            raise
        wire = self._wire(parsed, f"resp_{opened.conversation}_{opened.start}", int(time.time()))
        completion = Completion(endpoint, opened.session, opened.chat, wire, fresh=not parsed.store, entry=entry,
                                caller=caller_in(request.scope))
        if parsed.chat.stream:
            return _Released(completion, self.claimed, opened.session.id)
        try:
            return await completion.respond(request.receive)
        finally:
            self.claimed.discard(opened.session.id)

    def _wire(self, parsed: ResponsesRequest, id: str, created: int) -> ResponsesWire:
        return ResponsesWire(id, created, self.endpoint.model_name, settings=parsed.echo,
                             previous=parsed.previous_response_id, store=parsed.store)

    async def _open(self, request: Request, parsed: ResponsesRequest) -> _Opened:
        with opening_errors():
            if parsed.previous_response_id is None:
                return await self._new(request, parsed, parsed.chat)
            return await self._continue(request, parsed)

    async def _new(self, request: Request, parsed: ResponsesRequest, chat: ChatRequest) -> _Opened:
        """A conversation of its own for this response, starting from ``chat.history``."""
        endpoint = self.endpoint
        conversation = secrets.token_hex(16)
        key = endpoint.key(request, f"resp_{conversation}")
        if parsed.store:
            session = await endpoint.open_key(request, key, chat)
            self._opened(conversation, session)
        else:
            session = await endpoint.open_fresh(request, key, chat)
        return _Opened(session, conversation, len(chat.history), _with_results(chat, session))

    async def _continue(self, request: Request, parsed: ResponsesRequest) -> _Opened:
        endpoint = self.endpoint
        previous = parsed.previous_response_id
        assert previous is not None  # only asked for a continuation
        if parsed.chat.history:
            raise OpenAIError(400, "With 'previous_response_id', 'input' holds the new message only: a user message, "
                                   "or the outputs of the calls the previous response left open.", param="input",
                              code="invalid_value")
        not_found = OpenAIError(404, f"Previous response with id '{previous}' not found.",
                                param="previous_response_id", code="previous_response_not_found")
        found = _RESPONSE_ID.fullmatch(previous)
        if found is None:
            raise not_found
        conversation, start = found.group(1), int(found.group(2))
        name = f"resp_{conversation}"
        await endpoint.check_access(request, name, not_found)
        key = endpoint.key(request, name)
        stored = await endpoint.manager.history(key)
        end = None if stored is None else response_end(stored.turns, start)
        if stored is None or end is None:
            raise not_found
        if parsed.instructions != _instructions(stored.turns):  # a response runs under its own instructions only
            history = _instructed(stored.turns[:end], parsed.instructions)
            return await self._new(request, parsed, attrs.evolve(parsed.chat, history=history))
        running = endpoint.manager.get(key)
        if (parsed.store and end == len(stored) and key not in self.claimed
                and not (running is not None and running.busy)):
            self.claimed.add(key)  # with no checkpoint since the check: the next request for it forks
            try:
                session = await endpoint.open_key(request, key, parsed.chat)
                self._opened(conversation, session)
                return _Opened(session, conversation, len(session.state), _with_results(parsed.chat, session))
            except BaseException:
                self.claimed.discard(key)
                raise
        return await self._new(request, parsed, attrs.evolve(parsed.chat, history=stored.turns[:end]))

    def _opened(self, conversation: str, session: Session) -> None:
        if self.endpoint.on_open is not None:
            self.endpoint.on_open(f"resp_{conversation}", session)


def response_end(turns: Sequence[Turn], start: int) -> int | None:
    """Where the response that began at turn ``start`` ends: before the next message's own turn, or at the end of
    the conversation; ``None`` when no message begins at or after ``start`` (no such response was stored)."""
    message = None
    for index in range(start, len(turns)):
        turn = turns[index]
        message_id = turn.meta.get("message_id")
        if message_id is None or turn.role not in (Role.USER, Role.TOOL):
            continue
        if message is None:
            message = message_id
        elif message_id != message:
            return index
    return None if message is None else len(turns)


def _instructions(turns: Sequence[Turn]) -> str | None:
    """The instructions a conversation runs under: those of the response that opened it or forked it."""
    return turns[0].text if turns and turns[0].meta.get("instructions") else None


def _instructed(turns: Sequence[Turn], instructions: str | None) -> tuple[Turn, ...]:
    """``turns`` under ``instructions`` (or none) in place of the ones they ran under."""
    rest = tuple(turns[1:] if _instructions(turns) is not None else turns)
    return rest if instructions is None else (instructions_turn(instructions), *rest)


def _with_results(chat: ChatRequest, session: Session) -> ChatRequest:
    """``chat`` with the outputs it sends named after the calls of ``session`` they answer, and checked against
    them (400 when they answer other calls)."""
    if chat.results is None:
        return chat
    results = named_results(chat.results, {call.id: call.name for call in session.state.pending_calls})
    try:
        before(session.state, results)
    except ToolResultsMismatch as exc:
        raise failure(exc) from None
    return attrs.evolve(chat, message=results)


class _Released:
    """A streamed response, as an ASGI app, that gives up its claim on the session once it has run."""

    def __init__(self, completion: Completion, claimed: set[str], key: str) -> None:
        self.completion = completion
        self.claimed = claimed
        self.key = key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.completion(scope, receive, send)
        finally:
            self.claimed.discard(self.key)
