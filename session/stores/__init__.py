"""Where conversations are kept: the ``Store`` protocol and the stores built in.

    Store             the protocol: ``load`` a conversation, ``append`` turns to it (all or nothing, durable)
    DeletingStore     a store that can also ``delete`` a conversation (an optional ability)
    InboxStore        a store that keeps messages until they are run (an optional ability)
    CheckpointStore   a store that keeps checkpoints, a long run's saved progress (an optional ability)
    ListingStore      a store that can list its conversations, newest first (an optional ability)
    LeaseStore        a store that leases each conversation to one worker of many (an optional ability)
    HandOffStore      a leasing store that hands a message to the worker holding its conversation (an optional
                      ability); ``HandOffs`` follows what is handed to one worker
    FeedStore         a store that carries its sessions' events between processes (an optional ability), through
                      its ``EventFeed``
    Lease, LeaseLost  a worker's lease of a conversation; the error of a write fenced off by a newer lease
    StoredSession     what a listing says of one conversation: id, title, turns, when updated
    StoreCheckpoints  such a store as the ``cognitive.Checkpoints`` a search saves its progress to
    MemoryStore       in this process's memory: fast, gone when the process ends
    SQLiteStore       an SQLite file: the embedded durable default, survives a killed process
    PostgresStore     a PostgreSQL database that any number of processes can share (the ``postgres`` extra)
    PostgresMemory    a ``cognitive.Memory`` in PostgreSQL, for servers sharing one database (the ``postgres``
                      extra): exact cosine search in SQL, for scopes of up to some thousands of items
    open_store        the store a URL names: ``memory://``, ``sqlite:///path/to.db``, ``postgresql://user@host/db``
    register_store    teach ``open_store`` a URL scheme (or name an opener in the ``cognitive_loop.stores``
                      entry points)

``session.testing.check_store`` checks any store of your own against the contract.
"""

from typing import TYPE_CHECKING

from session._lazy import exports
from session.stores._checkpoints import StoreCheckpoints
from session.stores._memory import MemoryStore
from session.stores._open import known_schemes, open_store, register_store
from session.stores._protocol import (CheckpointStore, DeletingStore, EventFeed, FeedStore, HandOffs, HandOffStore,
                                     InboxStore, Lease, LeaseLost, LeaseStore, ListingStore, Store, StoreConflict,
                                     StoredSession, StoreError)
from session.stores._sqlite import SQLiteStore

if TYPE_CHECKING:
    from session.stores._postgres import PostgresStore
    from session.stores._postgres_memory import PostgresMemory

__all__ = ["CheckpointStore", "DeletingStore", "EventFeed", "FeedStore", "HandOffStore", "HandOffs", "InboxStore", "Lease",
           "LeaseLost", "LeaseStore", "ListingStore", "MemoryStore", "PostgresMemory", "PostgresStore", "SQLiteStore", "Store",
           "StoreCheckpoints", "StoreConflict", "StoreError", "StoredSession", "known_schemes", "open_store",
           "register_store"]

# PostgresStore and PostgresMemory load psycopg (the postgres extra) on first use only.
__getattr__, __dir__ = exports(__name__, {"session.stores._postgres": ("PostgresStore",),
                                          "session.stores._postgres_memory": ("PostgresMemory",)})
