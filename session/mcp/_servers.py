"""Where an MCP server is, for ``MCPTools``: ``MCPStdioServer`` (a command to start) or ``MCPHTTPServer`` (a URL).

Both also say what the server is called, under which namespace its tools go, which of them to use and how
long a call may take. They are frozen values: the same one can open any number of ``MCPTools``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Union

import attrs

from loop import UsageError
from loop.checks import positive_number

UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # model APIs accept tool names of letters, digits, '_' and '-' only


def _names(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else tuple(value)
    if not all(isinstance(n, str) and n for n in names):
        raise UsageError(f"include and exclude take tool names (or fnmatch patterns), got {value!r}")
    return names


def _args(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(a, str) for a in value):
        raise UsageError(f"MCPStdioServer args must be a sequence of strings, got {value!r}")
    return tuple(value)


def _exclude(value: Any) -> tuple[str, ...]:
    return _names(value) or ()


def _check_timeout(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    positive_number(attribute.name, value, unit="seconds", optional=True)  # None: MCPTools' timeout


def _check_name(_: Any, __: Any, value: Any) -> None:
    if value is not None and not (isinstance(value, str) and value.strip()):
        raise UsageError(f"name must be a non-empty string, got {value!r}")


def _check_namespace(_: Any, __: Any, value: Any) -> None:
    if value is not None and not (isinstance(value, str) and not UNSAFE.search(value)):
        raise UsageError(f"namespace must be letters, digits, '_' or '-' ('' for none), got {value!r}")


@attrs.frozen(kw_only=True)
class _Selection:
    """Settings every server takes: what it is called, and which of its tools to use, for how long."""

    name: str | None = attrs.field(default=None, validator=_check_name)
    namespace: str | None = attrs.field(default=None, validator=_check_namespace)
    include: tuple[str, ...] | None = attrs.field(default=None, converter=_names)
    exclude: tuple[str, ...] = attrs.field(default=(), converter=_exclude)
    timeout: float | None = attrs.field(default=None, validator=_check_timeout)


def _keys(value: Mapping[str, str] | None) -> str:
    return "None" if value is None else f"<{', '.join(value) or 'none'}>"  # values may be secrets


def _mapping(value: Any) -> Mapping[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise UsageError(f"expected a mapping of strings to strings, got {value!r}")
    return dict(value)


def _headers(value: Any) -> Mapping[str, str]:
    return _mapping(value) or {}


def _path(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


@attrs.frozen(kw_only=True)
class MCPStdioServer(_Selection):
    """An MCP server this process starts and talks to over its stdin and stdout.

    ``env`` is added to a minimal inherited environment (``PATH``, ``HOME``, ...), not to this process's whole
    environment; ``cwd`` is its working directory. Keyword settings: ``name`` (default: the name the server
    reports), ``namespace`` (default: the name; ``""`` for none), ``include``/``exclude`` (tool names or
    ``fnmatch`` patterns, applied to the server's own names), ``timeout`` (seconds per call).
    """

    command: str = attrs.field(kw_only=False)
    args: tuple[str, ...] = attrs.field(default=(), kw_only=False, converter=_args)
    env: Mapping[str, str] | None = attrs.field(default=None, converter=_mapping, hash=False, repr=_keys)
    cwd: str | None = attrs.field(default=None, converter=_path)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command:
            raise UsageError(f"MCPStdioServer needs a command to run, got {self.command!r}")

    @property
    def label(self) -> str:
        """What messages call the server: its ``name``, else its command line."""
        return self.name or " ".join((self.command, *self.args))


@attrs.frozen(kw_only=True)
class MCPHTTPServer(_Selection):
    """An MCP server reached over streamable HTTP at ``url``, sending ``headers`` and, when ``token`` is
    set, ``Authorization: Bearer <token>`` with every request. Keyword settings as for ``MCPStdioServer``."""

    url: str = attrs.field(kw_only=False)
    headers: Mapping[str, str] = attrs.field(factory=dict, converter=_headers, hash=False, repr=_keys)
    token: str | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise UsageError(f"MCPHTTPServer needs an http:// or https:// URL, got {self.url!r}")
        if self.token is not None and (not isinstance(self.token, str) or not self.token.strip()
                                       or any(c.isspace() for c in self.token)):
            raise UsageError("token must be a non-empty string without spaces")

    @property
    def label(self) -> str:
        """What messages call the server: its ``name``, else its URL."""
        return self.name or self.url


MCPServer = Union[MCPStdioServer, MCPHTTPServer]
"""Where an MCP server is: ``MCPStdioServer`` or ``MCPHTTPServer``."""
