"""Sandboxes for model-written code: the ``Sandbox`` protocol, a hardened Docker sandbox, the tool bridge.

    DockerSandbox        each run in a fresh container: no network, read-only root, no capabilities, limits
    SandboxConfig        its settings, safe by default; unsafe ones are refused
    UnsafeLocalSandbox   plain subprocesses, NO isolation, for machines without Docker (only when named)
    ToolBridge           host tools a sandboxed program calls as plain functions (``from tools import add``)
    build_image          the sandbox image from debootstrap, no registry (``python -m sandbox build-image``)
    reap                 kill a child process's whole group and wait for it, even if cancelled

``sandbox.testing.check_sandbox`` checks any implementation against the ``Sandbox`` contract.

Errors, under the ``loop.errors`` tree:

    LoopError
    ├── SandboxError               the sandbox itself cannot run: no engine, no image
    └── ProtocolViolation          a sandboxed program broke the supervisor's frame format

Raised inside sandboxed programs (never in the host): ``ToolError`` and its subclasses ``ToolCallRefused`` and
``ToolCallLimit``, from the tool stubs the program imports.
"""

from sandbox._bridge import ToolBridge
from sandbox._config import SandboxConfig
from sandbox._docker import DockerSandbox
from sandbox._image import BuiltImage, ImageRecipe, build_image
from sandbox._local import UnsafeLocalSandbox, reap
from sandbox._protocol import ExecResult, FunctionSandbox, Sandbox, SandboxError, ToolSandbox, accepts_tools

__all__ = [
    "BuiltImage",
    "DockerSandbox",
    "ExecResult",
    "FunctionSandbox",
    "ImageRecipe",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "ToolBridge",
    "ToolSandbox",
    "UnsafeLocalSandbox",
    "accepts_tools",
    "build_image",
    "reap",
]
