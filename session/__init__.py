"""Sessions own all IO: conversations, durable stores, conduits and the command line.

Available now: the ``Store`` protocol with the in-memory and SQLite stores. Sessions, the manager and the
conduits are in development.
"""

from session._sqlite import SQLiteStore, open_store
from session._store import MemoryStore, Store, StoreConflict, StoreError

__all__ = ["MemoryStore", "SQLiteStore", "Store", "StoreConflict", "StoreError", "open_store"]
