"""MCP both ways: the tools of MCP servers as ``loop.Tool`` s, and a manager's agent served as an MCP server.

    MCPTools        connects to servers and gives each of their tools as a ``loop.Tool``
    MCPStdioServer  a server started as a command (``MCPHTTPServer``: reached at a URL; ``MCPServer``: either)
    MCPConduit      serves a manager's agent as an MCP tool, over stdio or streamable HTTP

``MCPConduit`` loads on first use: a program that only uses servers' tools does not load the serving side.
"""

from typing import TYPE_CHECKING

from session._lazy import exports
from session.mcp._servers import MCPHTTPServer, MCPServer, MCPStdioServer
from session.mcp._tools import MCPConnectionError, MCPTool, MCPToolError, MCPTools

if TYPE_CHECKING:
    from session.mcp._conduit import MCPConduit

__all__ = [
    "MCPConduit",
    "MCPConnectionError",
    "MCPHTTPServer",
    "MCPServer",
    "MCPStdioServer",
    "MCPTool",
    "MCPToolError",
    "MCPTools",
]

__getattr__, __dir__ = exports(__name__, {"session.mcp._conduit": ("MCPConduit",)})
