"""Sessions own all IO: conversations, durable stores, conduits and the command line.

A ``Manager`` opens ``Session`` objects by id; each runs one worker that processes its user messages in order
with a ``TurnProcessor`` (see ``cognitive.new_turn_processor``) and persists every completed turn through a
``Store``. Conduits (``Conduit.serve(manager)``) connect the outside world. The parts:

    session          Session, Manager and the events they publish; StdioConduit (a terminal chat)
    session.stores   Store, MemoryStore, the durable SQLiteStore, PostgresStore, open_store, StoreCheckpoints
    session.http     HTTPConduit: sessions, an SSE event stream, OpenAPI, the OpenAI-compatible API, AG-UI and the
                     chat page at /
    session.openai   openai_routes / openai_app: the OpenAI-compatible API on its own
    session.agui     agui_routes: the AG-UI route on its own
    session.mcp      MCPTools (the tools of MCP servers) and MCPConduit (the agent as an MCP tool)
    session.a2a      A2AEndpoint / a2a_routes (the agent over A2A) and a2a_tool (a remote A2A agent as a tool)
    session.testing  check_store, check_lease_store: the conformance checks for a store of your own
    python -m session chat|serve|mcp MODULE:FACTORY    the command line

Every name here is also importable from ``session`` itself, and loads its module on first use: ``import
session`` loads none of them, and ``from session import MCPTools`` loads the MCP client without the HTTP server.

Errors, under the ``loop.errors`` tree:

    UsageError
    └── ToolResultsMismatch        tool results sent as a message do not answer the open calls
    LoopError
    ├── StoreError                 a store cannot read or write; nothing was half-written
    │   └── StoreConflict              an append would leave a gap in the stored conversation
    │       └── LeaseLost                  a write fenced off: another worker holds the conversation's lease
    ├── SessionBusy                a session's queue of waiting messages is full
    ├── SessionClosed              a message was sent to a closed session
    ├── SessionLimit               a manager already holds its most open sessions
    │   ├── ShuttingDown               the manager is stopping: it opens no session
    │   └── SessionElsewhere           another worker sharing the store runs the session, and did not let go
    ├── MCPToolError               an MCP server's tool failed or answered wrongly
    ├── MCPConnectionError         an MCP server could not be started or reached
    ├── A2AToolError               a remote A2A agent could not be reached or did not complete its task
    ├── Problem                    an HTTP request is answered with an error status
    └── OpenAIError                an OpenAI-compatible request is answered with an OpenAI error
"""

from typing import TYPE_CHECKING

from session._lazy import exports

if TYPE_CHECKING:
    from session._collector import tune_collector
    from session._conduit import Conduit
    from session._events import (ApprovalAnswered, ApprovalRequested, Interrupted, MessageFailed, MessageFinished,
                                 MessageQueued, MessageStarted, StorePaused, TurnStored, TurnUpdated)
    from session._manager import Manager, SessionElsewhere, SessionLimit, ShuttingDown
    from session._steps import StepFactory, current_checkpoints, step_factory
    from session._session import Message, Session, SessionBusy, SessionClosed, ToolResultsMismatch, TurnProcessor
    from session._stdio import StdioConduit
    from session.http import EventLog, EventReader, EventsLost, HTTPConduit, LoggedEvent, RateLimit, event_to_json
    from session.mcp import (MCPConduit, MCPConnectionError, MCPHTTPServer, MCPServer, MCPStdioServer, MCPTool,
                             MCPToolError, MCPTools)
    from session.openai import openai_app, openai_routes
    from session.a2a import A2AEndpoint, A2ATool, A2AToolError, a2a_routes, a2a_tool
    from session.agui import agui_routes
    from session.stores import (CheckpointStore, DeletingStore, InboxStore, Lease, LeaseLost, LeaseStore, ListingStore,
                                MemoryStore, PostgresStore, SQLiteStore, Store, StoreCheckpoints, StoreConflict,
                                StoredSession, StoreError, open_store, register_store)

__all__ = [
    "A2AEndpoint",
    "A2ATool",
    "A2AToolError",
    "ApprovalAnswered",
    "ApprovalRequested",
    "CheckpointStore",
    "Conduit",
    "DeletingStore",
    "InboxStore",
    "Lease",
    "LeaseLost",
    "LeaseStore",
    "ListingStore",
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
    "PostgresStore",
    "RateLimit",
    "SQLiteStore",
    "Session",
    "SessionBusy",
    "SessionClosed",
    "SessionElsewhere",
    "SessionLimit",
    "ShuttingDown",
    "StdioConduit",
    "StepFactory",
    "Store",
    "StoreCheckpoints",
    "StoreConflict",
    "StoreError",
    "StoredSession",
    "StorePaused",
    "ToolResultsMismatch",
    "TurnProcessor",
    "TurnStored",
    "TurnUpdated",
    "a2a_routes",
    "a2a_tool",
    "agui_routes",
    "current_checkpoints",
    "event_to_json",
    "open_store",
    "openai_app",
    "openai_routes",
    "register_store",
    "step_factory",
    "tune_collector",
]

# Where each name lives; the imports above say the same to type checkers (a test keeps the two alike).
__getattr__, __dir__ = exports(__name__, {
    "session._collector": ("tune_collector",),
    "session._conduit": ("Conduit",),
    "session._events": ("ApprovalAnswered", "ApprovalRequested", "Interrupted", "MessageFailed", "MessageFinished",
                        "MessageQueued", "MessageStarted", "StorePaused", "TurnStored", "TurnUpdated"),
    "session._manager": ("Manager", "SessionElsewhere", "SessionLimit", "ShuttingDown"),
    "session._steps": ("StepFactory", "current_checkpoints", "step_factory"),
    "session._session": ("Message", "Session", "SessionBusy", "SessionClosed", "ToolResultsMismatch", "TurnProcessor"),
    "session._stdio": ("StdioConduit",),
    "session.http": ("EventLog", "EventReader", "EventsLost", "HTTPConduit", "LoggedEvent", "RateLimit",
                     "event_to_json"),
    "session.mcp": ("MCPConduit", "MCPConnectionError", "MCPHTTPServer", "MCPServer", "MCPStdioServer", "MCPTool",
                    "MCPToolError", "MCPTools"),
    "session.openai": ("openai_app", "openai_routes"),
    "session.agui": ("agui_routes",),
    "session.a2a": ("A2AEndpoint", "A2ATool", "A2AToolError", "a2a_routes", "a2a_tool"),
    "session.stores": ("CheckpointStore", "DeletingStore", "InboxStore", "Lease", "LeaseLost", "LeaseStore",
                       "ListingStore", "MemoryStore", "PostgresStore", "SQLiteStore", "Store", "StoreCheckpoints",
                       "StoreConflict", "StoreError", "StoredSession", "open_store", "register_store"),
})
