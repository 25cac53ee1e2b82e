"""Implementations of ``loop.Provider``.

``Scripted`` and ``Function`` run offline: the demo uses them by default and tests use them to stand in for a
model. Real wire-protocol providers live beside them.
"""

from provider._offline import Function, ReplyFunction, Scripted
from provider._replies import Reply, tool_call

__all__ = ["Function", "Reply", "ReplyFunction", "Scripted", "tool_call"]
