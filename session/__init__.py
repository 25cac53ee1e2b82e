"""Sessions own all IO: conversations, durable stores, conduits and the command line.

A ``Manager`` opens ``Session`` objects by id; each runs one worker that processes its user messages in order
with a ``TurnProcessor`` (see ``cognitive.new_turn_processor``) and persists every completed turn through a
``Store``: ``MemoryStore`` or the durable ``SQLiteStore``.
"""

from session._events import Interrupted, MessageFailed, MessageFinished, MessageQueued, MessageStarted, TurnStored
from session._manager import Manager, SessionLimit, StepFactory, step_factory
from session._openai_api import openai_app, openai_routes
from session._session import Message, Session, SessionBusy, SessionClosed, TurnProcessor
from session._sqlite import SQLiteStore, open_store
from session._store import MemoryStore, Store, StoreConflict, StoreError

__all__ = [
    "Interrupted",
    "Manager",
    "MemoryStore",
    "Message",
    "MessageFailed",
    "MessageFinished",
    "MessageQueued",
    "MessageStarted",
    "SQLiteStore",
    "Session",
    "SessionBusy",
    "SessionClosed",
    "SessionLimit",
    "StepFactory",
    "Store",
    "StoreConflict",
    "StoreError",
    "TurnProcessor",
    "TurnStored",
    "open_store",
    "openai_app",
    "openai_routes",
    "step_factory",
]
