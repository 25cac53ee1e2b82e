"""An SQLite store's files are its owner's alone: a new folder 0700, the database and its -wal and -shm 0600."""

import stat
from pathlib import Path

from loop import Role, Text, Turn
from session import SQLiteStore


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_store_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "chats.db"
    async with SQLiteStore(path) as store:
        await store.append("s1", 0, [Turn(Role.USER, [Text("private")])], {})
        files = sorted(p.name for p in path.parent.iterdir())
        assert files == ["chats.db", "chats.db-shm", "chats.db-wal"]
        assert {p.name: mode(p) for p in path.parent.iterdir()} == dict.fromkeys(files, 0o600)
    assert mode(path.parent) == 0o700


async def test_an_existing_file_and_folder_keep_their_modes(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    path.touch(mode=0o640)
    path.chmod(0o640)
    async with SQLiteStore(path) as store:
        await store.append("s1", 0, [Turn(Role.USER, [Text("shared on purpose")])], {})
    assert mode(path) == 0o640 and mode(tmp_path) == stat.S_IMODE(tmp_path.stat().st_mode)
