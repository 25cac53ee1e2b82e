"""The error tree drawn in ``loop/errors.py`` lists every exception the project raises on purpose, where it sits."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from loop import LoopError
from tests.loop.test_errors import drawn_tree

ERRORS_HEADING = "Errors, under the ``loop.errors`` tree:"

PACKAGES = ("loop", "provider", "verifier", "sandbox", "cognitive", "session")
# Raised inside sandboxed programs only, from the stubs they import; the docstring names them apart.
IN_PROGRAMS = {"ToolError", "ToolCallRefused", "ToolCallLimit"}


def project_errors() -> dict[str, type]:
    """Every LoopError subclass defined in the project's packages, by name (the same name means the same
    concept: each must be one class)."""
    found: dict[str, set[type]] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        modules = [root] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(root.__path__, f"{package}.")
                            if not m.name.endswith("__main__")]
        for module in modules:
            for name, obj in vars(module).items():
                if (inspect.isclass(obj) and issubclass(obj, LoopError) and obj.__module__ == module.__name__
                        and not name.startswith("_")):
                    found.setdefault(name, set()).add(obj)
    return {name: next(iter(classes)) for name, classes in found.items()}


def drawn_everywhere() -> dict[str, str | None]:
    """The tree ``loop.errors`` draws, with what each package draws under it in its own docstring (the indented
    block after ``ERRORS_HEADING``)."""
    tree = drawn_tree()
    for package in PACKAGES[1:]:
        doc = importlib.import_module(package).__doc__ or ""
        if ERRORS_HEADING not in doc:
            continue
        block = doc.split(ERRORS_HEADING, 1)[1].lstrip("\n").split("\n\n", 1)[0]
        for name, parent in drawn_tree(block).items():
            if parent is not None or name not in tree:
                tree[name] = parent
    return tree


def test_loop_names_none_of_the_other_packages_errors() -> None:
    own = {name for name, cls in project_errors().items() if cls.__module__.startswith("loop")}
    assert set(drawn_tree()) == own


def test_every_project_error_is_drawn_under_its_parent() -> None:
    errors = project_errors()
    tree = drawn_everywhere()
    missing = sorted(set(errors) - set(tree))
    assert not missing, f"not drawn in its package's errors tree: {missing}"
    unknown = sorted(set(tree) - set(errors))
    assert not unknown, f"drawn but not defined anywhere: {unknown}"
    for name, cls in errors.items():
        parent = next((b.__name__ for b in cls.__mro__[1:] if b.__name__ in errors), None)
        assert tree[name] == parent, f"{name} is drawn under {tree[name]}, but derives from {parent}"


def test_the_programs_errors_are_named_apart() -> None:
    import sandbox

    assert sandbox.__doc__ is not None
    assert all(name in sandbox.__doc__ for name in IN_PROGRAMS)
