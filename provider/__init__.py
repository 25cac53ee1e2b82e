"""Implementations of ``loop.Provider``.

``Scripted`` and ``Function`` run offline: the demo uses them by default and tests use them to stand in for a
model. ``OpenAICompatible`` (Chat Completions), ``OpenAIResponses`` (OpenAI's Responses API) and ``Anthropic``
speak the real wire protocols over httpx. ``Retry`` wraps any
provider; ``Recording`` and ``Replay`` capture real traffic once and serve it back offline.

Embedders turn texts into vectors (``Embedder``) for memory and the semantic cache: ``LocalE5`` runs
multilingual-e5-small on this machine's CPU (the ``memory`` extra), ``OpenAIEmbeddings`` speaks the
``/v1/embeddings`` wire protocol, and ``HashingEmbedder`` is a deterministic one for tests.

Errors, under the ``loop.errors`` tree:

    UsageError
    └── CassetteMismatch           a request differs from the recorded one
    LoopError
    └── ModelCallBlocked           (provider.testing) a test tried to reach a host off this machine
"""

from provider._anthropic import Anthropic
from provider._cassette import CassetteMismatch, Recording, Replay
from provider._e5 import LocalE5
from provider._embedder import PASSAGE, QUERY, Embedder, HashingEmbedder, SymmetricEmbedder, Vector, cosine
from provider._embeddings import OpenAIEmbeddings
from provider._http import is_loopback
from provider._offline import Function, ReplyFunction, Scripted
from provider._openai import OpenAICompatible
from provider._responses import OpenAIResponses
from provider._replies import Reply, tool_call
from provider._retry import Retry
from provider._spec import from_environment, from_spec

__all__ = [
    "PASSAGE",
    "QUERY",
    "Anthropic",
    "CassetteMismatch",
    "Embedder",
    "Function",
    "HashingEmbedder",
    "LocalE5",
    "OpenAICompatible",
    "OpenAIEmbeddings",
    "OpenAIResponses",
    "Recording",
    "Replay",
    "Reply",
    "ReplyFunction",
    "Retry",
    "Scripted",
    "SymmetricEmbedder",
    "Vector",
    "cosine",
    "from_environment",
    "from_spec",
    "is_loopback",
    "tool_call",
]
