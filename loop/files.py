"""Files that hold what users said: made readable by their owner only.

Conversations, memories and cached responses hold people's words. A database file created with the process's
umask (often 0644) would let every local account read them, so every store of this project that creates a file
creates it with ``create_private``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["create_private"]


def create_private(path: str | os.PathLike[str]) -> Path:
    """Make ``path``'s folder (mode 0700; missing folders above it get the umask's mode, as ``mkdir -p`` gives
    them) and an empty file at ``path`` (0600) when they do not exist, and return ``path``. An existing folder or file keeps the mode it has. SQLite gives a
    database's ``-wal`` and ``-shm`` files the database file's mode, so they are private too."""
    file = Path(path)
    if not file.parent.exists():
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.close(os.open(file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass
    return file
