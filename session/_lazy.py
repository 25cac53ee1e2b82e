"""Names a package exports without loading them: each loads its module the first time it is used (PEP 562).

A package's ``__init__`` says where each name lives and keeps its ``__all__``::

    __getattr__, __dir__ = exports(__name__, {"session.mcp._conduit": ("MCPConduit",)})

``from package import *`` still works (it reads ``__all__`` and asks for each name), and so does ``dir()``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def exports(
    package: str, where: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, which exports the names ``where`` lists under
    the module that defines them. A name, once loaded, is kept in the package like any other."""
    module_of = {name: module for module, names in where.items() for name in names}
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *module_of})

    return __getattr__, __dir__
