"""Sessions own all IO: conversations, durable stores, conduits and the command line.

A ``Manager`` opens ``Session`` objects by id; each runs one worker that processes its user messages in order
with a ``TurnProcessor`` (see ``cognitive.new_turn_processor``) and persists every completed turn through a
``Store``: ``MemoryStore`` or the durable ``SQLiteStore``. Conduits (``Conduit.serve(manager)``) connect the
outside world: ``StdioConduit`` (a terminal chat), ``HTTPConduit`` (sessions, an SSE event stream, OpenAPI,
and the OpenAI-compatible API; ``openai_routes``/``openai_app`` serve that API on its own) and ``MCPConduit``
(the agent as an MCP tool). ``MCPTools`` brings the tools of MCP servers in.
"""

from session._conduit import Conduit
from session._eventlog import EventLog, EventReader, EventsLost, LoggedEvent
from session._events import Interrupted, MessageFailed, MessageFinished, MessageQueued, MessageStarted, TurnStored
from session._guards import RateLimit
from session._http import HTTPConduit
from session._mcp_servers import MCPHTTPServer, MCPServer, MCPStdioServer
from session._manager import Manager, SessionLimit, StepFactory, step_factory
from session._openai_api import openai_app, openai_routes
from session._session import Message, Session, SessionBusy, SessionClosed, TurnProcessor
from session._sqlite import SQLiteStore, open_store
from session._stdio import StdioConduit
from session._store import MemoryStore, Store, StoreConflict, StoreError
from session._wire import event_to_json

__all__ = [
    "Conduit",
    "EventLog",
    "EventReader",
    "EventsLost",
    "HTTPConduit",
    "Interrupted",
    "LoggedEvent",
    "MCPConduit",
    "MCPConnectionError",
    "MCPHTTPServer",
    "MCPServer",
    "MCPStdioServer",
    "MCPTool",
    "MCPToolError",
    "MCPTools",
    "Manager",
    "MemoryStore",
    "Message",
    "MessageFailed",
    "MessageFinished",
    "MessageQueued",
    "MessageStarted",
    "RateLimit",
    "SQLiteStore",
    "Session",
    "SessionBusy",
    "SessionClosed",
    "SessionLimit",
    "StdioConduit",
    "StepFactory",
    "Store",
    "StoreConflict",
    "StoreError",
    "TurnProcessor",
    "TurnStored",
    "event_to_json",
    "open_store",
    "openai_app",
    "openai_routes",
    "step_factory",
]

# The MCP client and server load the mcp SDK (about a third of a second), so they load on first use.
_LAZY = {
    "MCPConduit": "session._mcp_conduit",
    "MCPConnectionError": "session._mcp_tools",
    "MCPTool": "session._mcp_tools",
    "MCPToolError": "session._mcp_tools",
    "MCPTools": "session._mcp_tools",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'session' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
