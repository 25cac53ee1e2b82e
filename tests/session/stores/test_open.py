"""``open_store``: what a store URL names, relative or absolute, and the folders it will not make."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop import Role, State, Text, UsageError
from session import MemoryStore, SQLiteStore, open_store


async def test_three_slashes_are_relative_to_the_working_directory(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    store = open_store("sqlite:///data/chats.db")
    assert isinstance(store, SQLiteStore) and store.path == Path("data/chats.db")
    try:
        await store.append("s", 0, State().append(Role.USER, Text("hi")).turns, {})
    finally:
        await store.aclose()
    assert (tmp_path / "data" / "chats.db").exists()


def test_four_slashes_are_an_absolute_path(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/chats.db")  # tmp_path starts with '/': four slashes in all
    assert isinstance(store, SQLiteStore) and store.path == tmp_path / "chats.db"


def test_memory() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)


@pytest.mark.parametrize("url", ["sqlite:////nonexistent/dir/x.db", "sqlite:///no/such/folder/x.db"])
def test_a_missing_folder_is_refused_and_named(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = url[len("sqlite:///"):].rsplit("/", 1)[0]
    with pytest.raises(UsageError, match=f"the folder {folder!r} .*does not exist; create it first"):
        open_store(url)
    assert not Path("/nonexistent").exists() and list(tmp_path.iterdir()) == []


def test_a_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(UsageError, match="is not a folder"):
        open_store(f"sqlite:///{tmp_path}/plain/x.db")


@pytest.mark.parametrize("url", ["redis://x", "sqlite:///", "sqlite://x.db", "sqlite:///x.db?mode=ro", 42])
def test_an_unknown_url_is_refused_with_the_forms_it_takes(url: object) -> None:
    with pytest.raises(UsageError, match="memory:// or sqlite:///"):
        open_store(url)  # type: ignore[arg-type]
