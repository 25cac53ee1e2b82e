"""The command line: ``python -m session chat|serve|mcp MODULE:FACTORY``."""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, cast

import anyio

from loop import Closable, LoopError, UsageError, has, tracing
from provider import is_loopback
from session._collector import tune_collector
from session._groups import unwrap
from session._manager import Manager
from session._module import check_factory, choose_provider, deps_of, load_factory, step_maker
from session._serving import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONVERSATION_BYTES
from session.stores._open import masked_url, open_store

if TYPE_CHECKING:
    from session.http import RateLimit

DEFAULT_STORE = "sqlite:///sessions.db"


def _count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return count


def _count_or_off(text: str) -> int | None:
    return None if text.strip().lower() == "off" else _count(text)


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def _rate_limit(text: str) -> RateLimit | None:
    """``RATE[:BURST]`` as a ``RateLimit`` (BURST: the class's default), or ``None`` for ``off``."""
    from session.http import RateLimit

    if text.strip().lower() == "off":
        return None
    rate, sep, burst = text.partition(":")
    try:
        per_second = float(rate)
        if not math.isfinite(per_second):
            raise ValueError(rate)
        return RateLimit(per_second=per_second, burst=_count(burst)) if sep else RateLimit(per_second=per_second)
    except (ValueError, UsageError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"expected RATE[:BURST] (requests a second, and a whole number of them at "
                                         f"once: 20 or 20:100), or off; got {text!r}") from None


def _token(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the token is empty; give the token clients must send, or leave --token "
                                         "out (with SESSION_TOKEN unset) to serve this machine only without one")
    return text


def _token_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            token = file.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read the token file {path!r}: {exc}") from None
    if not token:
        raise argparse.ArgumentTypeError(f"the token file {path!r} is empty: its first line is the token")
    return token


def _limit_flags(cmd: argparse.ArgumentParser, name: str) -> None:
    """The server's limits: all of them for ``serve``; for ``mcp``, those its HTTP server has."""
    only = " (with --http)" if name == "mcp" else ""
    cmd.add_argument("--max-body-bytes", type=_count, default=DEFAULT_MAX_BODY_BYTES, metavar="N",
                     help=f"refuse request bodies over N bytes with 413{only} (default: %(default)s, 4 MiB)")
    cmd.add_argument("--header-timeout", type=_seconds, default="10", metavar="SECONDS",
                     help=f"how long a connection may take to send a request's headers; slower gets 408 and is "
                          f"closed{only} (default: %(default)s)")
    cmd.add_argument("--shutdown-grace", type=_seconds, default="5", metavar="SECONDS",
                     help=f"on SIGINT or SIGTERM, how long requests in flight get to be answered (their runs are "
                          f"cancelled at once, and the requests told the server is shutting down){only} "
                          "(default: %(default)s)")
    if name != "serve":
        return
    cmd.add_argument("--body-timeout", type=_seconds, default="30", metavar="SECONDS",
                     help="how long a request's body may take to arrive after its headers; slower gets 408 "
                          "(default: %(default)s)")
    cmd.add_argument("--rate-limit", type=_rate_limit, default="20:100", metavar="RATE[:BURST]",
                     help="POST requests a second per token, and how many may come at once (BURST, default 100); "
                          "beyond, 429 with Retry-After; off: no limit (default: %(default)s)")
    cmd.add_argument("--max-conversation-bytes", type=_count_or_off, default=str(DEFAULT_MAX_CONVERSATION_BYTES),
                     metavar="N", help="the most message text (UTF-8 bytes) one conversation may hold, beyond which "
                                       "413; off: no limit (default: %(default)s, 64 MiB)")
    cmd.add_argument("--max-sessions-per-token", type=_count_or_off, default="100", metavar="N",
                     help="sessions one token may hold open at once, beyond which 429; off: only the server's "
                          "limit (default: %(default)s)")
    cmd.add_argument("--allowed-host", action="append", metavar="NAME", dest="allowed_hosts",
                     help="a host name clients reach the server by (repeatable); others get 421 (default: the "
                          "loopback names when serving a loopback address, else any)")
    cmd.add_argument("--cors-origin", action="append", metavar="ORIGIN", dest="cors_origins", default=[],
                     help="a web origin (scheme://host[:port]) whose pages may call the API from a browser "
                          "(repeatable); requests from any other origin get 403 (default: none)")


def _version() -> str:
    try:
        return importlib.metadata.version("cognitive-loop")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "not installed"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m session", description="Chat with or serve a composed agent.")
    top.add_argument("--version", action="version", version=f"%(prog)s (cognitive-loop {_version()})")
    commands = top.add_subparsers(dest="command", required=True)
    for name, text in (("chat", "chat in this terminal"),
                       ("serve", "serve over HTTP (sessions, SSE, OpenAI APIs, AG-UI, MCP at /mcp, A2A at /a2a)"),
                       ("mcp", "serve as an MCP server: stdio, or streamable HTTP with --http")):
        cmd = commands.add_parser(name, help=text)
        cmd.add_argument("factory", metavar="MODULE:FACTORY", help="a callable: TurnExecutor -> Pattern")
        cmd.add_argument("--provider", help="openai:MODEL, anthropic:MODEL or openai-compatible:MODEL@URL")
        cmd.add_argument("--store", default=DEFAULT_STORE,
                         help="memory://, or sqlite:///path.db relative to the working directory, or "
                              "sqlite:////abs/path.db (four slashes) for an absolute path; the folder must exist; "
                              "or postgresql://user@host/db, which several servers may share "
                              f"(default {DEFAULT_STORE})")
        cmd.add_argument("--approval-timeout", type=_seconds, default="3600", metavar="SECONDS",
                         help="how long tool calls that need approval wait for an answer before they are denied "
                              "(default 3600)")
        cmd.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio",
                         help="the event loop to run on: asyncio (HTTP served by uvicorn) or trio (by Hypercorn) "
                              "(default asyncio)")
        if name == "chat":
            cmd.add_argument("--session", metavar="ID",
                             help="the conversation's id: resumed if the store holds it, else started under it")
        else:
            cmd.add_argument("--host", default="127.0.0.1")
            cmd.add_argument("--port", type=int, default=8000)
            cmd.add_argument("--token", type=_token,
                             help="bearer token clients must send (default: $SESSION_TOKEN; without either, or "
                                  "with it empty, the server serves this machine only, without a token); "
                                  "other users of the machine can read it in the process list: prefer "
                                  "SESSION_TOKEN or --token-file")
            cmd.add_argument("--token-file", type=_token_file, metavar="PATH",
                             help="read the bearer token from the first line of this file")
            _limit_flags(cmd, name)
        if name == "serve":
            cmd.add_argument("--lease-ttl", type=_seconds, default="5", metavar="SECONDS",
                             help="with a store several servers share (postgresql://): how long a server that stopped "
                                  "answering keeps its conversations from the others (default: %(default)s)")
            cmd.add_argument("--openai-approvals", choices=("deny", "allow"), default="deny",
                             help="what the OpenAI-compatible API does with tool calls that need approval, since "
                                  "its clients cannot be asked: deny them (default) or allow them")
            cmd.add_argument("--no-page", dest="page", action="store_false",
                             help="do not serve the chat page at / (the API routes stay)")
            cmd.add_argument("--no-mcp", dest="mcp", action="store_false",
                             help="do not serve MCP (streamable HTTP) at /mcp (the other routes stay)")
            cmd.add_argument("--mcp-tool", default="ask", metavar="NAME",
                             help="the name of the agent's tool at /mcp (default: %(default)s)")
            cmd.add_argument("--mcp-description", metavar="TEXT",
                             help="what the tool at /mcp does, as MCP clients and their models are told")
            cmd.add_argument("--no-a2a", dest="a2a", action="store_false",
                             help="do not serve A2A at /a2a and its agent card (the other routes stay)")
            cmd.add_argument("--a2a-url", metavar="URL", help="the A2A endpoint's URL the agent card names "
                                                               "(default: the URL each request came to)")
        if name == "mcp":
            cmd.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
            cmd.add_argument("--tool", default="ask", help="the name of the agent's tool (default: ask)")
            cmd.add_argument("--description", help="what the tool does, as clients and their models are told")
    return top


async def run(args: argparse.Namespace, say: Callable[[str], None]) -> None:
    from cognitive import new_turn_processor

    module, factory = load_factory(args.factory)
    make_step = step_maker(module)
    deps = deps_of(module)
    provider = choose_provider(module, args.provider, say)
    try:
        check_factory(args.factory, factory, make_step, provider)
        store = open_store(args.store)
    except BaseException:
        await _close(provider)
        raise
    try:
        leases = {"lease_ttl": args.lease_ttl} if args.command == "serve" else {}
        manager = Manager(new_turn_processor(factory), provider=provider, store=store, make_step=make_step,
                          deps=deps, approval_timeout=args.approval_timeout, **leases)
        async with manager:
            tune_collector()  # everything alive now lives as long as the process
            if args.command == "chat":
                from session._stdio import StdioConduit

                if args.session is not None:
                    stored = await store.load(args.session)
                    if stored is None:
                        say(f"session {args.session!r} is new: nothing is stored under that id in {masked_url(args.store)}")
                    else:
                        say(f"resuming session {args.session!r}: {len(stored)} turn{'s' * (len(stored) != 1)} stored")
                await StdioConduit(session_id=args.session).serve(manager)
            elif args.command == "mcp":
                from session.mcp._conduit import DESCRIPTION, MCPConduit

                token = server_token(args.token, args.host, say, args.token_file) if args.http else None
                mcp = MCPConduit(transport="http" if args.http else "stdio", tool=args.tool,
                                 description=args.description or DESCRIPTION, host=args.host, port=args.port,
                                 token=token, allow_no_token=token is None, max_body_bytes=args.max_body_bytes,
                                 header_timeout=args.header_timeout, shutdown_timeout=args.shutdown_grace)
                if not args.http:
                    async with anyio.create_task_group() as group:
                        say(f"serving the agent as MCP tool {args.tool!r} on {await group.start(mcp.serve, manager)}")
                else:
                    await serve_until_signalled(manager, mcp.serve, lambda url: say(
                        f"serving the agent as MCP tool {args.tool!r} on {url}"), args.shutdown_grace)
            else:
                from session.http._conduit import HTTPConduit

                token = server_token(args.token, args.host, say, args.token_file)
                conduit = HTTPConduit(host=args.host, port=args.port, token=token, allow_no_token=token is None,
                                      max_body_bytes=args.max_body_bytes, rate_limit=args.rate_limit,
                                      max_sessions_per_token=args.max_sessions_per_token,
                                      max_conversation_bytes=args.max_conversation_bytes,
                                      header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                                      allowed_hosts=args.allowed_hosts, cors_origins=args.cors_origins,
                                      shutdown_timeout=args.shutdown_grace, openai_approvals=args.openai_approvals,
                                      page=args.page, mcp=args.mcp, mcp_tool=args.mcp_tool,
                                      mcp_description=args.mcp_description, a2a=args.a2a, a2a_url=args.a2a_url)
                mcp_at = f"MCP at /mcp (tool {args.mcp_tool!r}), " if args.mcp else ""
                mcp_at += "A2A at /a2a (card at /.well-known/agent-card.json), " if args.a2a else ""
                await serve_until_signalled(manager, conduit.serve, lambda url: say(
                    f"serving on {url}: {f'the chat page at {url}/, ' if args.page else ''}sessions under /sessions, "
                    f"OpenAI-compatible API under /v1, AG-UI at /agui, {mcp_at}OpenAPI at /openapi.json"
                    f"{'' if token else ' (no token: this machine only)'}"), args.shutdown_grace)
    finally:
        await _close(store, provider)


async def serve_until_signalled(manager: Manager, serve: Callable[..., Coroutine[Any, Any, None]],
                                started: Callable[[str], None], grace: float = 0.0) -> None:
    """Run ``serve(manager)`` (a conduit's, started with ``task_status``; ``started`` hears its URL) until SIGINT
    or SIGTERM, then shut down as servers do: the manager stops (no new session; every run in flight is
    cancelled, its open tool calls answered "cancelled" and stored, so each request waiting on one is answered
    at once that the server is shutting down) while the conduit stops accepting connections and waits, for at
    most its ``shutdown_timeout``, for those answers to go out. Returns normally: the process exits 0.

    With leases (a store several servers share), the manager drains instead: it opens no more sessions (those
    requests get 503, for the load balancer to send elsewhere) and gives the runs in flight ``grace`` seconds to
    finish before it stops the rest; each conversation's lease is let go as its run ends, so another server takes
    it over at once, and a posted message cut short runs again there."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:
            started(await group.start(serve, manager))
            async for received in signals:
                tracing.logger("session.cli").info("shutting down", signal=signal.Signals(received).name)
                break
            if manager.leasing is not None:
                await manager.drain(grace)
            else:
                await manager.stop()
            group.cancel_scope.cancel()


def server_token(given: str | None, host: str, say: Callable[[str], None], from_file: str | None = None
                 ) -> str | None:
    """The token a server on ``host`` requires: ``--token`` (with a warning: the process list shows it), else
    ``--token-file``'s, else ``$SESSION_TOKEN``; an empty variable counts as unset. None is refused off loopback,
    in the command line's words."""
    if given is not None and from_file is not None:
        raise UsageError("give the token once: --token or --token-file, not both")
    if given is not None:
        say("warning: --token shows the token to every user of this machine in the process list; "
            "prefer SESSION_TOKEN or --token-file")
    token = given if given is not None else from_file
    if token is None:
        token = os.environ.get("SESSION_TOKEN")
        if token is not None and not token.strip():
            say("SESSION_TOKEN is empty: serving without a token, this machine only")
            token = None
    if token is None and not is_loopback(host):
        raise UsageError(f"refusing to serve {host!r} without a token: anyone who can reach it could use every "
                         "session; pass --token TOKEN or set SESSION_TOKEN, or serve 127.0.0.1")
    return token


async def _close(*resources: object) -> None:
    for resource in resources:
        if has(resource, Closable):
            with anyio.CancelScope(shield=True):
                await cast(Closable, resource).aclose()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # Warnings and errors on stderr, so they never mix with the chat; a server also logs its requests.
    tracing.configure_logging(level="info" if args.command != "chat" else "warning",
                              json=args.command == "serve" and not sys.stderr.isatty())

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        anyio.run(run, args, say, backend=args.backend)
    except (LoopError, BaseExceptionGroup) as exc:
        error = unwrap(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if not isinstance(error, LoopError):
            raise
        say(f"error: {error}")
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
