"""A2A (the Agent2Agent protocol) both ways: a manager's agent served as an A2A agent, and remote A2A agents as
tools a local pattern can call.

    A2AEndpoint   the agent over A2A: its agent card and JSON-RPC endpoint as Starlette routes (a2a-sdk's server)
    a2a_routes    the same routes, for an app that need not end the tasks still running when it stops
    CARD_PATHS    where the agent card is served (the paths an app's bearer check leaves open)
    a2a_tool      a remote A2A agent, found by its card, as a ``loop.Tool`` (``A2ATool``) taking a ``message``
    A2AToolError  raised by that tool when the remote agent cannot be reached or does not complete its task

The serving side loads on first use: a program that only calls remote agents does not load it.
"""

from typing import TYPE_CHECKING

from session._lazy import exports
from session.a2a._tool import A2ATool, A2AToolError, a2a_tool

if TYPE_CHECKING:
    from session.a2a._card import CARD_PATHS
    from session.a2a._endpoint import A2AEndpoint, a2a_routes

__all__ = ["A2AEndpoint", "A2ATool", "A2AToolError", "CARD_PATHS", "a2a_routes", "a2a_tool"]

__getattr__, __dir__ = exports(__name__, {"session.a2a._card": ("CARD_PATHS",),
                                          "session.a2a._endpoint": ("A2AEndpoint", "a2a_routes")})
