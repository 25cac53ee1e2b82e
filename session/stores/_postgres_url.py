"""A PostgreSQL store's URL: what it connects with, and how it is shown without its password.

The URL names the database; the password may be in it (``postgresql://user:secret@host/db`` or
``?password=secret``) or where libpq looks for it itself (``PGPASSWORD``, ``~/.pgpass``), and libpq's other ``PG*``
variables fill in what else it leaves out (``PGHOST``, ``PGUSER``, ``PGSSLMODE`` ...). The password is never
shown: a store's repr, its log lines and its errors show the URL with ``***`` for the password, and every message
from the driver or the server is scrubbed of the password (and of ``PGPASSWORD``'s value) before it is raised.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from loop import UsageError
from session.stores._open import masked_url, url_passwords
from session.stores._protocol import StoreError

SCHEMES = ("postgresql", "postgres")
CONNECT_TIMEOUT = 10  # seconds to reach the server, unless the URL says (libpq's own default is to wait for ever)
APPLICATION_NAME = "cognitive-loop"  # how the store's connections are named in pg_stat_activity, unless the URL says


class Conninfo:
    """The connection parameters a URL gives (libpq fills in the rest from the ``PG*`` variables), with a
    ``connect_timeout`` and an ``application_name`` unless the URL has them. Its repr is the URL shown without
    its password, so that it can sit in an object printed whole."""

    __slots__ = ("_params", "_secrets", "url")

    def __init__(self, url: Any) -> None:
        if not isinstance(url, str) or urlsplit(url).scheme not in SCHEMES:
            raise UsageError(f"a PostgreSQL store's URL starts with postgresql:// or postgres://, got "
                             f"{masked_url(url) if isinstance(url, str) else url!r}"[:400])
        scheme = urlsplit(url).scheme
        url = scheme.lower() + url[len(scheme):]  # schemes ignore case; libpq's parser does not
        self.url = masked_url(url)
        secrets = {p for p in url_passwords(url) if p}
        self._secrets = tuple(sorted(secrets, key=len, reverse=True))
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise UsageError(f"bad PostgreSQL URL {self.url!r}: {self.scrub(str(exc))}") from None
        if not params.get("dbname"):  # libpq would take PGDATABASE, or else the user's name: a store says which
            raise UsageError(f"the store URL {self.url!r} names no database; use "
                             "postgresql://user@host[:port]/database")
        params.setdefault("connect_timeout", CONNECT_TIMEOUT)
        params.setdefault("application_name", APPLICATION_NAME)
        self._params = params

    @property
    def params(self) -> dict[str, Any]:
        """The parameters to connect with, password included: for the driver's eyes only."""
        return dict(self._params)

    def scrub(self, text: str) -> str:
        """``text`` (a message of the driver or the server) with every password it could hold put out of sight."""
        env = os.environ.get("PGPASSWORD")
        for secret in (*self._secrets, *((env,) if env else ())):
            text = text.replace(secret, "***")
        return text

    def describe(self, exc: BaseException) -> str:
        """The driver's ``exc`` on one line, its type first, with every password scrubbed out."""
        text = " ".join(line.strip() for line in self.scrub(str(exc)).splitlines() if line.strip())
        return f"{type(exc).__name__}: {text}"

    def error(self, exc: BaseException, where: str, what: str = "") -> StoreError:
        """A ``StoreError`` for the driver's ``exc`` met by ``where`` (a store, as its ``str`` names it), doing
        ``what``, with every password scrubbed out. ``exc`` is its cause, unless its own message held a password
        (then the chain would show it)."""
        detail = self.describe(exc)
        error = StoreError(f"{where}: {what}: {detail}" if what else f"{where}: {detail}")
        error.__cause__ = exc if self.scrub(str(exc)) == str(exc) else None
        error.__suppress_context__ = True
        return error

    def __repr__(self) -> str:
        return f"Conninfo({self.url!r})"

