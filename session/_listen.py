"""Listening sockets for the conduits that serve over HTTP."""

from __future__ import annotations

import ipaddress
import socket

from loop import UsageError


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """A bound, non-blocking TCP socket on ``host``:``port`` (0: any free port), ready to hand to uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP (not 0) lets asyncio turn Nagle's algorithm off on accepted connections; otherwise a
    # keep-alive client waits ~40 ms for a delayed ACK on every request after its first.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc}") from exc
    return sock


def url_of(sock: socket.socket, host: str, path: str = "") -> str:
    """The URL clients reach ``sock`` at."""
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}{path}"
