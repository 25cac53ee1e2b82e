"""The chat page's routes: every file at its exact path with its content type, a strict Content-Security-Policy
and the other protective headers; open without a token in the conduit while the data routes are not."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from importlib import resources

import httpx
import pytest
from starlette.applications import Starlette

from provider import Scripted
from session.web._page import CONTENT_SECURITY_POLICY, PAGE_PATHS, page_routes
from tests.session.http.helpers import in_process

TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}


def static(name: str) -> bytes:
    return resources.files("session.web").joinpath("static", name).read_bytes()


def file_of(path: str) -> str:
    return "index.html" if path == "/" else path.lstrip("/")


def client() -> httpx.AsyncClient:
    app = Starlette(routes=page_routes())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


def test_the_paths_are_the_routes_and_every_static_file_is_served() -> None:
    assert PAGE_PATHS[0] == "/" and len(set(PAGE_PATHS)) == len(PAGE_PATHS)
    assert [route.path for route in page_routes()] == list(PAGE_PATHS)
    shipped = {f.name for f in resources.files("session.web").joinpath("static").iterdir()}
    assert shipped == {file_of(p) for p in PAGE_PATHS}


@pytest.mark.parametrize("path", PAGE_PATHS)
async def test_each_file_comes_with_its_type_and_the_protective_headers(path: str) -> None:
    async with client() as http:
        response = await http.get(path)
    assert response.status_code == 200
    assert response.content == static(file_of(path))
    assert response.headers["content-type"] == TYPES[re.sub(r".*(\.\w+)$", r"\1", file_of(path))]
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["cache-control"] == "no-cache"
    assert re.fullmatch(r'"[0-9a-f]{32}"', response.headers["etag"])


def test_the_policy_allows_nothing_inline_and_nothing_from_elsewhere() -> None:
    rules = dict(rule.strip().split(" ", 1) for rule in CONTENT_SECURITY_POLICY.split(";"))
    assert rules == {"default-src": "'none'", "script-src": "'self'", "style-src": "'self'", "connect-src": "'self'",
                     "img-src": "'self' data:", "base-uri": "'none'", "form-action": "'none'",
                     "frame-ancestors": "'none'"}


async def test_an_unchanged_file_is_not_sent_again() -> None:
    async with client() as http:
        first = await http.get("/app.js")
        again = await http.get("/app.js", headers={"if-none-match": f'"other", {first.headers["etag"]}'})
        changed = await http.get("/app.js", headers={"if-none-match": '"other"'})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == first.headers["etag"]
    assert again.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert changed.status_code == 200 and changed.content == first.content


async def test_only_get_and_head_are_answered() -> None:
    async with client() as http:
        head = await http.head("/")
        post = await http.post("/")
        other = await http.get("/index.html")
    assert head.status_code == 200 and head.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert post.status_code == 405
    assert other.status_code == 404


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.inline: list[str] = []
        self._open = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._open = tag

    def handle_data(self, data: str) -> None:
        if self._open in ("script", "style") and data.strip():
            self.inline.append(data)

    def handle_endtag(self, tag: str) -> None:
        self._open = ""


def test_the_page_loads_only_its_own_files_and_holds_no_inline_code() -> None:
    parsed = _Tags()
    parsed.feed(static("index.html").decode())
    assert parsed.inline == []
    assert not [tag for tag, attrs in parsed.tags if tag == "style" or "style" in attrs
                or any(name.startswith("on") for name in attrs)]
    loaded = [attrs.get("src") or attrs.get("href") for tag, attrs in parsed.tags if tag in ("script", "link")]
    assert loaded and set(loaded) <= set(PAGE_PATHS)
    imported = {m for p in PAGE_PATHS if p.endswith(".js") for m in re.findall(r'from "\.(/\w+\.js)"', static(p[1:]).decode())}
    assert imported and imported <= set(PAGE_PATHS)


@pytest.mark.parametrize("path", [p for p in PAGE_PATHS if p.endswith(".js")])
def test_the_scripts_never_parse_data_as_markup(path: str) -> None:
    # What a model or a tool wrote is put in with textContent; nothing here turns a string into markup or code.
    code = static(path[1:]).decode()
    assert not re.findall(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
                          r"setTimeout\(\s*['\"`]|https?://", code)


async def test_the_conduit_serves_the_page_without_a_token_and_the_data_routes_only_with_one() -> None:
    async with in_process(Scripted(["hi"])) as served:
        anonymous = served.client(token=None)
        for path in PAGE_PATHS:
            response = await anonymous.get(path)
            assert response.status_code == 200, path
            assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert (await anonymous.get("/sessions")).status_code == 401
        assert (await anonymous.post("/sessions")).status_code == 401
        assert (await served.client().get("/sessions")).status_code == 200
