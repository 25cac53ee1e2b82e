"""``loop.files.create_private``: a new folder 0700 and a new file 0600, whatever the umask; what exists is left
as it is."""

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from loop.files import create_private


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_a_new_file_and_its_folder_are_their_owners_alone(tmp_path: Path, open_umask: None) -> None:
    made = create_private(str(tmp_path / "a" / "b" / "notes.db"))
    assert made == tmp_path / "a" / "b" / "notes.db" and made.read_bytes() == b""
    assert mode(made) == 0o600 and mode(made.parent) == 0o700
    assert mode(tmp_path / "a") == 0o755, "a folder above it only names it: made as mkdir -p makes it"


def test_an_existing_file_and_folder_keep_their_modes_and_contents(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    path.write_bytes(b"kept")
    path.chmod(0o640)
    assert create_private(path) == path
    assert mode(path) == 0o640 and path.read_bytes() == b"kept"
    assert mode(tmp_path) == stat.S_IMODE(tmp_path.stat().st_mode)
