"""``ToolBridge``: host tools a sandboxed program calls as plain Python functions, every call checked here.

The program imports a generated stub module (``from tools import add``). A call becomes one JSON line
``{"id": n, "tool": name, "args": "<JSON object>"}`` that reaches the host over the sandbox's own standard
streams; the answer goes back the same way. Nothing in the sandbox is trusted: every request is checked here
before a tool runs — its id (ids count up from 1, so a replayed or forged id is refused), the per-run cap on
calls, the tool's name, its arguments against the tool's JSON schema, and path-like arguments for traversal.
Both the line and its arguments are read with ``ArgumentChecker.loads``, which refuses what would make the parser
itself fail (nesting deep enough to exhaust the stack, invalid UTF-8, lone surrogates, numbers JSON cannot carry).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import attrs

from loop import ArgumentChecker, Tool, UsageError, index_tools, json_default, tool_timeout, tracing
from loop.checks import int_at_least, non_negative_int, positive_number
from sandbox import _stubs

_PATHLIKE = re.compile(r"(^|_)(path|paths|file|files|filename|filenames|dir|dirs|directory|folder)$", re.I)
_log = tracing.logger("sandbox.bridge")


@attrs.frozen
class Admitted:
    """A request that passed every check and may run."""

    id: int
    tool: Tool
    arguments: Mapping[str, Any]


class ToolBridge:
    """The host side of the tool bridge: which tools a sandboxed program may call, and how often.

    Pass it to a sandbox's ``exec(..., tools=bridge)``. Each run gets a fresh budget of ``max_tool_calls``
    calls; every call counts, refused ones too, and past the cap the program gets ``ToolCallLimit`` and the
    tool does not run. A program that keeps calling far past it (ten times the cap, and at least 1,000 calls)
    is stopped. A tool's exception reaches the program as ``ToolError`` with its message; a call the
    bridge refuses (unknown tool, arguments that break the schema, an absolute or ``..`` path in a path-like
    argument, a bad request id) raises ``ToolCallRefused``. Each call may take ``tool_timeout`` seconds (or the
    tool's own ``timeout``).

    The program imports the tools from the module ``module`` (default ``tools``); ``listing`` shows their
    signatures, for a prompt. A ``ToolBridge`` holds settings only and can serve many runs at once.
    """

    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        max_tool_calls: int = 50,
        module: str = "tools",
        tool_timeout: float = 60.0,
        max_result_bytes: int = 1_000_000,
    ) -> None:
        by_name = index_tools(tools, "in a bridge")
        non_negative_int("max_tool_calls", max_tool_calls)
        if not (isinstance(module, str) and module.isidentifier()):
            raise UsageError(f"module must be a Python module name like 'tools', got {module!r}")
        positive_number("tool_timeout", tool_timeout, unit="seconds")
        int_at_least("max_result_bytes", max_result_bytes, 1024)
        specs = [t.spec for t in by_name.values()]
        _stubs.function_names(specs)  # refuses names that clash in the sandbox
        self.tools = tuple(by_name.values())
        self.max_tool_calls = max_tool_calls
        self.module = module
        self.tool_timeout = float(tool_timeout)
        self.max_result_bytes = max_result_bytes
        self._by_name = by_name
        self._checkers = {n: ArgumentChecker(t.spec.parameters) for n, t in by_name.items()}
        self._paths = {n: _pathlike(t.spec.parameters) for n, t in by_name.items()}
        self._source = _stubs.module_source(specs)
        self._listing = _stubs.listing(specs, module)

    @property
    def stub_source(self) -> str:
        """The Python source of the stub module the program imports."""
        return self._source

    @property
    def listing(self) -> str:
        """One line per tool: its signature as the program calls it, and its description."""
        return self._listing

    def start(self) -> BridgeRun:
        """The per-run state (call count, last request id) for one program run."""
        return BridgeRun(self)

    def __repr__(self) -> str:
        return f"ToolBridge({[t.spec.name for t in self.tools]}, max_tool_calls={self.max_tool_calls})"


class BridgeRun:
    """One program run's side of the bridge: admits or refuses each request line, then runs admitted calls.

    ``unreadable`` says why the first line the bridge could not read as a request at all was refused (``None``
    while there was none) and ``unreadable_lines`` counts them. Their refusals carry no id, since none could be
    read, so the run's result mentions them too.
    """

    __slots__ = ("_bridge", "calls", "_last_id", "_warned", "unreadable", "unreadable_lines")

    def __init__(self, bridge: ToolBridge) -> None:
        self._bridge = bridge
        self.calls = 0
        self._last_id = 0
        self._warned = False
        self.unreadable: str | None = None
        self.unreadable_lines = 0

    @property
    def flooding(self) -> bool:
        """Whether the program keeps calling far past its cap: refusals cost the host too, so the run stops."""
        return self.calls > max(1000, 10 * self._bridge.max_tool_calls)

    def admit(self, line: bytes) -> Admitted | bytes:
        """Check one request line. Returns the call to run, or the refusal to send back at once.

        Synchronous on purpose: requests are checked in the order they arrived, so ids can be held to order.
        """
        self.calls += 1  # every request counts against the cap, refused ones too
        try:
            request = ArgumentChecker.loads(line)
        except json.JSONDecodeError:
            return self._unreadable("not JSON")
        except ValueError as exc:
            return self._unreadable(str(exc))
        if not isinstance(request, dict):
            return self._unreadable("not a JSON object")
        rid = request.get("id")
        expected = self._last_id + 1
        if type(rid) is not int or rid != expected:
            if not self._warned:  # once per run: a program flooding forged ids must not flood the log too
                self._warned = True
                _log.warning("bridge request id refused", id=repr(rid)[:40], expected=expected)
            echo = rid if type(rid) is int else None
            return _refusal(echo, "ToolCallRefused",
                            f"request id {rid!r} refused: expected {expected} (ids count up from 1; a replayed "
                            "or forged id is refused)")
        self._last_id = rid
        bridge = self._bridge
        if self.calls > bridge.max_tool_calls:
            return _refusal(rid, "ToolCallLimit",
                            f"this run may make at most {bridge.max_tool_calls} tool calls; the tool did not run")
        name = request.get("tool")
        if not isinstance(name, str) or (tool := bridge._by_name.get(name)) is None:
            known = ", ".join(sorted(bridge._by_name)) or "none"
            return _refusal(rid, "ToolCallRefused", f"unknown tool {name!r}; the tools are: {known}")
        raw = request.get("args")
        if not isinstance(raw, str):
            return _refusal(rid, "ToolCallRefused", f"{name}: malformed request: 'args' must be JSON text")
        parsed = bridge._checkers[name].parse(raw)
        if isinstance(parsed, str):
            return _refusal(rid, "ToolCallRefused", f"{name}: {parsed}")
        unsafe = _unsafe_path(parsed, bridge._paths[name])
        if unsafe:
            return _refusal(rid, "ToolCallRefused", f"{name}: {unsafe}")
        return Admitted(rid, tool, parsed)

    def _unreadable(self, reason: str) -> bytes:
        self.unreadable_lines += 1
        if self.unreadable is None:  # once per run, as for ids
            self.unreadable = reason
            _log.warning("bridge request unreadable", reason=reason)
        return _refusal(None, "ToolCallRefused", f"malformed request: {reason}")

    async def execute(self, call: Admitted) -> bytes:
        """Run an admitted call; the answer line to send back (a tool's failure becomes ``ToolError``)."""
        name = call.tool.spec.name
        timeout = tool_timeout(call.tool, self._bridge.tool_timeout)
        with tracing.span(f"execute_tool {name}", {"gen_ai.operation.name": "execute_tool",
                                                   "gen_ai.tool.name": name, "sandbox.bridge": True}):
            try:
                with anyio.fail_after(timeout):
                    value = await call.tool.call(call.arguments)
            except TimeoutError:
                return _refusal(call.id, "ToolError", f"{name} did not finish within {timeout:g} seconds")
            except Exception as exc:
                return _refusal(call.id, "ToolError", f"{name} raised {type(exc).__name__}: {exc}")
        try:
            line = json.dumps({"id": call.id, "ok": True, "value": value}, ensure_ascii=True, default=json_default)
        except (TypeError, ValueError) as exc:
            return _refusal(call.id, "ToolError", f"{name} returned a value that cannot be sent back: {exc}")
        except RecursionError:
            return _refusal(call.id, "ToolError", f"{name} returned a value that cannot be sent back: nested too "
                                                  "deeply")
        if len(line) > self._bridge.max_result_bytes:
            return _refusal(call.id, "ToolError", f"{name} returned {len(line):,} bytes, more than the bridge's "
                                                  f"max_result_bytes={self._bridge.max_result_bytes:,}")
        return line.encode("ascii") + b"\n"


def _refusal(rid: int | None, kind: str, message: str) -> bytes:
    return json.dumps({"id": rid, "ok": False, "error": {"type": kind, "message": message}},
                      ensure_ascii=True).encode("ascii") + b"\n"


def _pathlike(schema: Mapping[str, Any]) -> frozenset[str]:
    """Parameters that name files or directories: by name (``path``, ``*_file``, ``dir`` ...) or by format."""
    properties = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
    return frozenset(n for n, sub in properties.items()
                     if _PATHLIKE.search(n) or (isinstance(sub, Mapping) and sub.get("format") == "path"))


def _unsafe_path(arguments: Mapping[str, Any], names: frozenset[str]) -> str:
    for name in names:
        value = arguments.get(name)
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, str):
                continue
            parts = item.replace("\\", "/").split("/")
            if (item.startswith(("/", "\\", "~")) or ".." in parts or "\x00" in item
                    or (len(parts[0]) == 2 and parts[0][1] == ":")):
                return (f"argument {name!r} = {item[:200]!r} is refused: paths must stay relative, with no '..', "
                        "no leading '/' or '~' and no drive letter")
    return ""
