"""Images and files in stores: the SQLite store keeps their bytes once, by digest, beside the turns that show them;
they load back byte for byte, across a restart, and survive the deletion of another conversation showing them.
Files from before blobs existed read as they were."""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cognitive import new_turn_processor, react_factory
from loop import File, Image, Request, Role, Text, ToolCall, ToolResult, Turn, tool
from loop.codec import blob_key
from provider import Function, tool_call
from session import Manager, MemoryStore, SQLiteStore, StoreError, step_factory

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
OTHER_PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(255, -1, -1)) * 4
PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n"
BIG_PNG = b"\x89PNG\r\n\x1a\n" + bytes(i * 7 % 251 for i in range(64_000))


@contextmanager
def connected(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to ``path``, committed and closed at the end."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


def count(path: Path, table: str) -> int:
    with connected(path) as conn:
        found: int = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    return found


def conversation() -> tuple[Turn, ...]:
    """A user turn showing an image and a file, a tool call, and its result with an image attached."""
    return (
        Turn(Role.USER, [Text("what is in these?"), Image(data=PNG), File(data=PDF, name="r.pdf")],
             {"message_id": "m1"}),
        Turn(Role.ASSISTANT, [ToolCall("c1", "look", "{}")]),
        Turn(Role.TOOL, [ToolResult("c1", "look", "a screenshot", attachments=(Image(data=OTHER_PNG),))]),
        Turn(Role.ASSISTANT, [Text("a cat and a report")]),
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_images_and_attachments_load_back_byte_for_byte(tmp_path: Path, kind: str) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "c.db")
    turns = conversation()
    await store.append("s", 0, turns[:1], {"k": 1})
    await store.append("s", 1, turns[1:], {"k": 2})
    loaded = await store.load("s")
    assert loaded is not None and loaded.turns == turns and dict(loaded.meta) == {"k": 2}
    image, file = loaded[0].parts[1], loaded[0].parts[2]
    assert isinstance(image, Image) and image.data == PNG and image.media_type == "image/png"
    assert isinstance(file, File) and file.data == PDF and file.name == "r.pdf"
    (attached,) = loaded[2].tool_results[0].attachments
    assert isinstance(attached, Image) and attached.data == OTHER_PNG
    if isinstance(store, SQLiteStore):
        await store.aclose()


async def test_the_turns_json_names_the_bytes_by_digest_and_the_blobs_table_holds_them(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "c.db") as store:
        await store.append("s", 0, conversation(), {})
    with connected(tmp_path / "c.db") as conn:
        texts = [r[0] for r in conn.execute("SELECT data FROM turns ORDER BY idx")]
        blobs = conn.execute("SELECT digest, media_type, bytes, size FROM blobs ORDER BY size").fetchall()
    assert base64.b64encode(PNG).decode() not in "".join(texts)
    assert json.loads(texts[0])["parts"][1] == {"type": "image", "digest": blob_key(PNG), "media_type": "image/png"}
    attachment = json.loads(texts[2])["parts"][0]["attachments"][0]
    assert attachment == {"type": "image", "digest": blob_key(OTHER_PNG), "media_type": "image/png"}
    assert sorted(blobs) == sorted([(blob_key(PDF), "application/pdf", PDF, len(PDF)),
                                    (blob_key(PNG), "image/png", PNG, len(PNG)),
                                    (blob_key(OTHER_PNG), "image/png", OTHER_PNG, len(OTHER_PNG))])


async def test_one_image_in_fifty_turns_is_stored_once(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path) as store:
        await store.append("s", 0, [Turn(Role.USER, [Text("start")])], {})
    assert not (tmp_path / "c.db-wal").exists()  # closing checkpointed the WAL into the file
    before = path.stat().st_size
    async with SQLiteStore(path) as store:
        for i in range(1, 51):  # fifty appends, each its own transaction, each showing the same image
            await store.append("s", i, [Turn(Role.USER, [Text(f"look {i}"), Image(data=BIG_PNG)])], {})
        loaded = await store.load("s")
    assert loaded is not None and len(loaded) == 51
    assert all(t.parts[1] == Image(data=BIG_PNG) for t in loaded.turns[1:])
    assert count(path, "blobs") == 1
    grown = path.stat().st_size - before
    assert grown < 3 * len(BIG_PNG), f"the file grew {grown:,} bytes for one {len(BIG_PNG):,}-byte image"


async def test_an_image_is_read_back_as_one_bytes_object_for_every_turn_showing_it(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "c.db") as store:
        await store.append("s", 0, [Turn(Role.USER, [Image(data=PNG)]) for _ in range(3)], {})
        loaded = await store.load("s")
    assert loaded is not None
    datas = [t.parts[0].data for t in loaded]  # type: ignore[union-attr]
    assert datas == [PNG] * 3 and datas[0] is datas[1] is datas[2]


async def test_deleting_one_of_two_conversations_sharing_an_image_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    shared = Turn(Role.USER, [Text("see"), Image(data=PNG)])
    async with SQLiteStore(path) as store:
        await store.append("a", 0, [shared, Turn(Role.USER, [Image(data=OTHER_PNG)])], {})
        await store.append("b", 0, [shared], {})
        assert await store.delete("a") is True
        kept = await store.load("b")
        assert kept is not None and kept.turns == (shared,)
        assert await store.load("a") is None
    with connected(path) as conn:  # the image only "a" showed went with it
        assert [r[0] for r in conn.execute("SELECT digest FROM blobs")] == [blob_key(PNG)]
    async with SQLiteStore(path) as store:  # and the shared one is still there after a restart
        kept = await store.load("b")
        assert kept is not None and kept.turns == (shared,)
        assert await store.delete("b") is True
    assert count(path, "blobs") == 0 and count(path, "blob_uses") == 0


async def test_a_branch_keeps_the_images_of_the_rows_it_supersedes(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path) as store:
        await store.append("s", 0, [Turn(Role.USER, [Text("q")]), Turn(Role.USER, [Image(data=PNG)])], {})
        await store.append("s", 1, [Turn(Role.USER, [Image(data=OTHER_PNG)])], {})  # the old row stays, for audit
        loaded = await store.load("s")
        assert loaded is not None and loaded[1].parts == (Image(data=OTHER_PNG),)
        await store.append("other", 0, [Turn(Role.USER, [Image(data=PNG)])], {})
        await store.delete("other")
    assert count(path, "blobs") == 2  # "s" still uses the image of its superseded row


async def test_a_waiting_message_with_an_image_is_kept_until_its_conversation_goes(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    message = Turn(Role.USER, [Text("look"), Image(data=PNG)], {"message_id": "m1"})
    async with SQLiteStore(path) as store:
        await store.post("s", message)
        await store.post("s", message)  # posted again: nothing changes
        assert await store.inbox("s") == (message,)
    async with SQLiteStore(path) as store:
        assert await store.inbox("s") == (message,)
        await store.done("s", "m1")
        await store.delete("s")
    assert count(path, "blobs") == 0 and count(path, "blob_uses") == 0


async def test_a_listing_titles_a_conversation_whose_first_message_shows_an_image(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "c.db") as store:
        await store.append("s", 0, conversation(), {})
        (listed,) = await store.list_sessions()
    assert (listed.id, listed.title, listed.turns) == ("s", "what is in these?", 4)


async def test_a_missing_blob_makes_the_conversation_unreadable_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path) as store:
        await store.append("s", 0, [Turn(Role.USER, [Image(data=PNG)])], {})
    with connected(path) as conn:
        conn.execute("DELETE FROM blobs")
    async with SQLiteStore(path) as store:
        with pytest.raises(StoreError, match="unreadable: turn 0.*no blob holds 'sha256:"):
            await store.load("s")


# The schema of version 4, the last before blobs, as that version made it.
SCHEMA_4 = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, meta TEXT NOT NULL, length INTEGER NOT NULL, rev INTEGER NOT NULL,
                       created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE turns (session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, idx INTEGER NOT NULL,
                    rev INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (session_id, idx, rev)) WITHOUT ROWID;
CREATE TABLE inbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, message_id TEXT NOT NULL,
                    data TEXT NOT NULL, UNIQUE (session_id, message_id));
CREATE TABLE checkpoints (key TEXT PRIMARY KEY, data TEXT NOT NULL, updated REAL NOT NULL);
PRAGMA user_version = 4;
"""


async def test_a_file_from_before_blobs_loads_its_inline_images_and_gains_the_blobs_table(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    inline = {"role": "user", "parts": [{"type": "text", "text": "old"},
                                        {"type": "image", "data": base64.b64encode(PNG).decode(),
                                         "media_type": "image/png"}]}
    plain = {"role": "assistant", "parts": [{"type": "text", "text": "a picture"}]}
    conn = sqlite3.connect(path)
    try:
        conn.executescript(SCHEMA_4)
        with conn:
            conn.execute("INSERT INTO sessions VALUES ('old', '{\"title\": \"t\"}', 2, 0, 1.0, 1.0)")
            conn.executemany("INSERT INTO turns VALUES ('old', ?, 0, ?)",
                             [(0, json.dumps(inline)), (1, json.dumps(plain))])
    finally:
        conn.close()
    async with SQLiteStore(path) as store:
        old = await store.load("old")
        assert old is not None and dict(old.meta) == {"title": "t"}
        assert old.turns == (Turn(Role.USER, [Text("old"), Image(data=PNG)]), Turn(Role.ASSISTANT, [Text("a picture")]))
        await store.append("old", 2, [Turn(Role.USER, [Image(data=PNG)])], {"title": "t"})  # now kept apart
        again = await store.load("old")
        assert again is not None and again[2].parts == (Image(data=PNG),) and again.turns[:2] == old.turns
    with connected(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("SELECT digest FROM blobs").fetchall() == [(blob_key(PNG),)]
        first = conn.execute("SELECT data FROM turns WHERE idx = 0").fetchone()[0]
    assert json.loads(first) == inline  # old rows are never rewritten


@tool
async def look() -> Image:
    """A picture of the screen."""
    return Image(data=OTHER_PNG)


async def test_a_conversation_with_images_resumes_after_a_restart_and_the_model_sees_them(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    replies: Iterator[ToolCall | str] = iter([tool_call("look", {}), "a cat"])
    async with SQLiteStore(path) as store:
        async with Manager(new_turn_processor(react_factory), provider=Function(lambda r: next(replies)),
                           store=store, make_step=step_factory([look])) as manager:
            session = await manager.open("s")
            before = await session.ask([Text("what is this?"), Image(data=PNG)])
    assert before.answer == "a cat"
    (result,) = [r for t in before if t.role is Role.TOOL for r in t.tool_results]
    assert result.attachments == (Image(data=OTHER_PNG),)

    seen: list[Request] = []

    def model(request: Request) -> str:
        seen.append(request)
        return "still a cat"

    async with SQLiteStore(path) as store:
        async with Manager(new_turn_processor(react_factory), provider=Function(model), store=store,
                           make_step=step_factory([look])) as manager:
            session = await manager.open("s")
            assert session.state.turns == before.turns
            after = await session.ask("and now?")
    assert after.answer == "still a cat" and after.turns[:len(before)] == before.turns
    (request,) = seen
    shown = [p for t in request.turns for p in t.parts if isinstance(p, Image)]
    attached = [a for t in request.turns for r in t.tool_results for a in r.attachments]
    assert [p.data for p in shown] == [PNG] and [a.data for a in attached] == [OTHER_PNG]
    assert count(path, "blobs") == 2
