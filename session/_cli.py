"""The command line: ``python -m session chat|serve MODULE:FACTORY``."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from loop import LoopError, Provider, UsageError, tracing
from session._manager import Manager, StepFactory, step_factory
from session.stores._open import open_store

DEFAULT_STORE = "sqlite:///sessions.db"


def load_factory(target: str) -> tuple[Any, Callable[..., Any]]:
    """The module and the factory ``MODULE:FACTORY`` names."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected MODULE:FACTORY (like examples.quickstart:make_agent), got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"{module_name} has no callable {attr!r} (a function taking a TurnExecutor, returning a Pattern)")
    return module, factory


def choose_provider(module: Any, spec: str | None, say: Callable[[str], None]) -> Provider:
    """``--provider`` when given; otherwise the module's own ``demo_provider()``."""
    if spec:
        from provider import from_spec

        return from_spec(spec)
    demo = getattr(module, "demo_provider", None)
    if not callable(demo):
        raise UsageError(f"no --provider given and {module.__name__} defines no demo_provider(); "
                         "pass --provider openai:gpt-4o-mini (or anthropic:..., openai-compatible:MODEL@URL)")
    say(f"no --provider given: using {module.__name__}.demo_provider() (scripted, offline)")
    return demo()


def step_maker(module: Any) -> StepFactory:
    """The module's ``make_step(provider, events)`` if it has one, else a step with its ``TOOLS``."""
    make = getattr(module, "make_step", None)
    if callable(make):
        return make
    return step_factory(getattr(module, "TOOLS", ()))


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m session", description="Chat with or serve a composed agent.")
    commands = top.add_subparsers(dest="command", required=True)
    for name, text in (("chat", "chat in this terminal"), ("serve", "serve over HTTP (sessions, SSE, OpenAI API)"),
                       ("mcp", "serve as an MCP server: stdio, or streamable HTTP with --http")):
        cmd = commands.add_parser(name, help=text)
        cmd.add_argument("factory", metavar="MODULE:FACTORY", help="a callable: TurnExecutor -> Pattern")
        cmd.add_argument("--provider", help="openai:MODEL, anthropic:MODEL or openai-compatible:MODEL@URL")
        cmd.add_argument("--store", default=DEFAULT_STORE, help=f"memory:// or sqlite:///path (default {DEFAULT_STORE})")
        if name == "chat":
            cmd.add_argument("--session", help="resume the stored conversation with this id")
        else:
            cmd.add_argument("--host", default="127.0.0.1")
            cmd.add_argument("--port", type=int, default=8000)
            cmd.add_argument("--token", default=os.environ.get("SESSION_TOKEN"),
                             help="bearer token clients must send (default: $SESSION_TOKEN)")
        if name == "mcp":
            cmd.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
            cmd.add_argument("--tool", default="ask", help="the name of the agent's tool (default: ask)")
            cmd.add_argument("--description", help="what the tool does, as clients and their models are told")
    return top


async def run(args: argparse.Namespace, say: Callable[[str], None]) -> None:
    from cognitive import new_turn_processor

    module, factory = load_factory(args.factory)
    provider = choose_provider(module, args.provider, say)
    store = open_store(args.store)
    manager = Manager(new_turn_processor(factory), provider=provider, store=store, make_step=step_maker(module))
    try:
        async with manager:
            # Everything alive now lives as long as the process: keep the collector from rescanning it on
            # every full collection (with thousands of sessions these pauses dominate).
            gc.collect()
            gc.freeze()
            if args.command == "chat":
                from session._stdio import StdioConduit

                await StdioConduit(session_id=args.session).serve(manager)
            elif args.command == "mcp":
                from session.mcp._conduit import DESCRIPTION, MCPConduit

                mcp = MCPConduit(transport="http" if args.http else "stdio", tool=args.tool,
                                 description=args.description or DESCRIPTION, host=args.host, port=args.port,
                                 token=args.token, allow_no_token=args.token is None)
                async with anyio.create_task_group() as group:
                    say(f"serving the agent as MCP tool {args.tool!r} on {await group.start(mcp.serve, manager)}")
            else:
                from session.http._conduit import HTTPConduit

                conduit = HTTPConduit(host=args.host, port=args.port, token=args.token,
                                      allow_no_token=args.token is None)
                async with anyio.create_task_group() as group:
                    url = await group.start(conduit.serve, manager)
                    say(f"serving on {url}: sessions under /sessions, OpenAI-compatible API under /v1, "
                        f"OpenAPI at /openapi.json{'' if args.token else ' (no token: this machine only)'}")
    finally:
        for resource in (store, provider):
            close = getattr(resource, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # Warnings and errors on stderr, so they never mix with the chat; a server also logs its requests.
    tracing.configure_logging(level="info" if args.command != "chat" else "warning",
                              json=args.command == "serve" and not sys.stderr.isatty())

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        anyio.run(run, args, say)
    except (LoopError, BaseExceptionGroup) as exc:
        error = _single(exc)
        if not isinstance(error, LoopError):
            raise
        say(f"error: {error}")
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _single(exc: BaseException) -> BaseException:
    """The one exception inside (nested) exception groups, or the group itself when there are several."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
