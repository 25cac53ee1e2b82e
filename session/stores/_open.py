"""``open_store``: the store a URL names, as the command line's ``--store`` gives it, and the registry of URL
schemes behind it.

Each scheme (the part of a URL before ``://``) has an opener, a function from the whole URL to a ``Store``.
``memory``, ``sqlite``, ``postgresql`` and ``postgres`` are registered below with ``register_store``, as a package
of one's own registers a scheme: in code, or without being imported first, by an entry point in the
``cognitive_loop.stores`` group, named for the scheme::

    [project.entry-points."cognitive_loop.stores"]
    redis = "my_package.stores:open_redis"

Entry points are read only when a URL's scheme is not registered, and only the one it names is loaded, so
installed plugins cost nothing until used (and one that fails to load breaks only its own scheme).
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from loop import UsageError
from session.stores._memory import MemoryStore
from session.stores._protocol import Store
from session.stores._sqlite import SQLiteStore

Opener = Callable[[str], Store]
"""Opens the store a URL names (the whole URL, scheme included); raises ``UsageError`` for a URL it cannot use."""

ENTRY_POINTS = "cognitive_loop.stores"

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")  # RFC 3986's, in lower case: URL schemes ignore case
_openers: dict[str, tuple[Opener, str]] = {}  # by scheme: the opener, and a URL of its form for error messages


def register_store(scheme: str, opener: Opener, *, form: str = "") -> None:
    """Make ``open_store`` open the URLs of ``scheme`` (``"redis"`` for ``redis://...``) with ``opener(url)``.
    ``form`` shows what such a URL looks like when ``open_store`` is given one it cannot open (for example
    ``"redis://host[:port]/db"``). Registering a scheme again replaces its opener."""
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme.lower()):
        raise UsageError(f"a store URL scheme is a letter then letters, digits, '+', '-' or '.', got {scheme!r}")
    if not callable(opener):
        raise UsageError(f"a store opener is a function of the URL that returns a Store, got {opener!r}")
    if not isinstance(form, str):
        raise UsageError(f"form must be a string (a URL of the scheme's form), got {form!r}")
    _openers[scheme.lower()] = (opener, form)


def known_schemes() -> tuple[str, ...]:
    """The schemes ``open_store`` can open: those registered and those the installed entry points name."""
    return tuple(sorted({*_openers, *(ep.name.lower() for ep in _entry_points())}))


def open_store(url: str) -> Store:
    """The store a URL names: ``memory://``, ``sqlite:///relative/path.db`` (relative to the working directory),
    ``sqlite:////absolute/path.db``, ``postgresql://user@host[:port]/database`` (``postgres://`` too), or one of a
    scheme registered with ``register_store`` or by an entry point. A SQLite file is made on first use, but not
    its folder: a folder that does not exist raises ``UsageError`` (a mistyped path would otherwise start an
    empty store somewhere new). An unknown scheme raises ``UsageError`` naming the known ones."""
    scheme, sep, _ = url.partition("://") if isinstance(url, str) else ("", "", "")
    opener = _opener(scheme.lower()) if sep and _SCHEME.fullmatch(scheme.lower()) else None
    if opener is None:
        raise _unknown(url)
    store = opener(url)
    if not isinstance(store, Store):
        raise UsageError(f"the opener of {scheme}:// store URLs returned {store!r}, which is not a Store "
                         "(it has no load and append)"[:400])
    return store


def masked_url(url: str) -> str:
    """``url`` with its password, if any (in its user info or a ``password=`` query field), shown as ``***``."""
    for start, end in sorted(_password_spans(url), reverse=True):
        url = f"{url[:start]}***{url[end:]}"
    return url


def url_passwords(url: str) -> tuple[str, ...]:
    """Every password ``url`` holds, as written and percent-decoded."""
    found = [url[start:end] for start, end in _password_spans(url)]
    return (*found, *(unquote(p) for p in found))


_QUERY_PASSWORD = re.compile(r"[?&]password=([^&#]*)", re.IGNORECASE)


def _password_spans(url: str) -> list[tuple[int, int]]:
    """Where ``url``'s passwords are. The user info is read as libpq reads it, even in a malformed URL: up to the
    first ``@`` after ``://`` that comes before any ``/``, its password after its first ``:``."""
    spans = [match.span(1) for match in _QUERY_PASSWORD.finditer(url)]
    begin = url.find("://") + 3
    if begin >= 3:
        slash = url.find("/", begin)
        at = url.find("@", begin, len(url) if slash < 0 else slash)
        colon = url.find(":", begin, at) if at >= 0 else -1
        if colon >= 0:
            spans.append((colon + 1, at))
    return [span for span in spans if span[1] > span[0]]


def _opener(scheme: str) -> Opener | None:
    found = _openers.get(scheme)
    if found is not None:
        return found[0]
    for entry in _entry_points():
        if entry.name.lower() == scheme:
            try:
                opener = entry.load()
            except Exception as exc:  # a broken plugin breaks its own scheme only, and says so
                raise UsageError(f"the {scheme}:// store opener from entry point {entry.value!r} (group "
                                 f"{ENTRY_POINTS!r}) cannot be loaded: {type(exc).__name__}: {exc}") from exc
            register_store(scheme, opener)
            return opener
    return None


def _entry_points() -> tuple[importlib.metadata.EntryPoint, ...]:
    return tuple(importlib.metadata.entry_points(group=ENTRY_POINTS))


def _forms() -> str:
    forms = dict.fromkeys(form for _, form in _openers.values() if form)  # in the order registered, once each
    return " or ".join(forms)


def _unknown(url: object) -> UsageError:
    shown = masked_url(url) if isinstance(url, str) else url
    return UsageError(f"unknown store URL {shown!r}; use {_forms()}; the schemes known: "
                      f"{', '.join(known_schemes())}"[:1000])


# The schemes built in.

def _open_memory(url: str) -> Store:
    if url != "memory://":
        raise _unknown(url)
    return MemoryStore()


def _open_sqlite(url: str) -> Store:
    if not url.startswith("sqlite:///") or len(url) == len("sqlite:///") or "?" in url:
        raise _unknown(url)
    path = Path(url[len("sqlite:///"):])
    folder = path.parent
    if not folder.exists():
        where = "" if path.is_absolute() else f" (in the working directory {str(Path.cwd())!r})"
        raise UsageError(f"the folder {str(folder)!r} for {url!r}{where} does not exist; create it first")
    if not folder.is_dir():
        raise UsageError(f"{str(folder)!r} in {url!r} is not a folder")
    return SQLiteStore(path)


def _open_postgres(url: str) -> Store:
    """A ``PostgresStore``; a ``pool_size`` query field, which is not libpq's, sets its pool's size."""
    try:
        from session.stores._postgres import PostgresStore
    except ImportError as exc:
        raise UsageError(f"PostgreSQL stores need psycopg 3 and psycopg_pool ({exc}); install them with pip "
                         "install 'cognitive-loop[postgres]'") from None
    parts = urlsplit(url)
    fields = parse_qsl(parts.query, keep_blank_values=True)
    sizes = [value for key, value in fields if key == "pool_size"]
    if not sizes:
        return PostgresStore(url)
    if not sizes[-1].isdigit() or int(sizes[-1]) < 1:
        raise UsageError(f"pool_size in the store URL {masked_url(url)!r} must be a positive int, got {sizes[-1]!r}")
    rest = urlunsplit((*parts[:3], urlencode([(k, v) for k, v in fields if k != "pool_size"]), parts.fragment))
    return PostgresStore(rest, pool_size=int(sizes[-1]))


register_store("memory", _open_memory, form="memory://")
register_store("sqlite", _open_sqlite, form="sqlite:///path/to/file.db (relative to the working directory; "
                                            "sqlite:////path for an absolute one)")
register_store("postgresql", _open_postgres, form="postgresql://user@host[:port]/database")
register_store("postgres", _open_postgres)
