"""Large answers: stored once, within deadlines that grow with their bytes, and bounded.

- An answer whose text block is exactly the JSON of its structured content (what FastMCP sends for every
  dict) is stored with that text once, and decodes to exactly the answer received, whatever it holds.
- A store operation that moves a body may take `store_deadline_per_mb_s` per MB on top of the fixed
  deadline: a slow store still stores and serves a large answer. That extra time is bounded by
  `max_answer_bytes`, so a frozen store costs a bounded wait even under a record claiming to be huge.
- An answer above `max_answer_bytes` is passed to the caller, never stored or held decoded, and the
  outcome says why; the entry it supersedes goes.
- The decoded tier holds, by default, any answer the cache stores.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import mcp_types as mt
import orjson
import pydantic_core
import pytest
from fastmcp import FastMCP
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stores.backends import FakeClock
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.client.entries import _SHARED_TEXT, decode_result, encode_entry, encode_result
from mcpcache.client.keys import CallIdentity
from mcpcache.client.policy import DEFAULT_MAX_ANSWER_BYTES
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy
from mcpcache.stores import Item, MemoryStore, RedisStore, SQLiteStore, Store

from .harness import connect, live_clock, plain

pytestmark = pytest.mark.anyio

SERVER_ID = "large"


class Doc:
    """What the large server answers, and how often its tools ran."""

    def __init__(self) -> None:
        self.chars = 4000
        self.runs = 0


def large_server(doc: Doc, ttl_ms: int = 5000) -> FastMCP:
    """A FastMCP server whose `doc` answers a dict (FastMCP sends it as structured content and again as
    its JSON in a text block) with a long text, non-ASCII included; `text` answers the same text alone."""
    server = FastMCP("large")

    def body() -> str:
        return ("cells × “quotes” \\ and\nlines " * (doc.chars // 20 + 1))[: doc.chars]

    @server.tool
    def read(key: str) -> dict[str, Any]:
        doc.runs += 1
        return {"kind": "doc", "key": key, "text": body(), "n": [1, 2.5, None, True]}

    @server.tool
    def text(key: str) -> str:
        doc.runs += 1
        return body()

    install(server, {"read": CachePolicy(ttl_ms=ttl_ms), "text": CachePolicy(ttl_ms=ttl_ms)})
    return server


def key_of(cache: ToolCache, tool: str = "read", key: str = "k") -> str:
    return CallIdentity(SERVER_ID, cache.partition, MODERN, tool, {"key": key}).key("private")


class CountingStore(MemoryStore):
    """A memory store that records the keys of every load with bodies."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.loads: list[list[str]] = []

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        self.loads.append(list(keys))
        return await super().load_many(keys)


# -- the shared-text form ---------------------------------------------------------------------------


async def test_a_fastmcp_answer_is_stored_with_its_text_once_and_decodes_to_exactly_what_came(
    clock: FakeClock,
) -> None:
    store = MemoryStore(clock=clock)
    cache = ToolCache(store, CacheSettings(decoded_tier_bytes=0), clock=clock)
    doc = Doc()
    async with connect("mcp", ServerTarget.memory(large_server(doc)), MODERN, cache, server_id=SERVER_ID) as conn:
        first = await conn.call("read", {"key": "k"})
        assert (first.outcome.status, first.outcome.stored) == ("miss", True)
        item = await store.load(key_of(cache))
        assert item is not None
        plain_body = encode_result(first.result)
        assert item.body.startswith(_SHARED_TEXT)
        assert len(item.body) < 0.6 * len(plain_body)
        # What it cost on the wire is still what a hit reports as saved; what it costs to store is recorded apart.
        assert item.meta["size"] == len(plain_body)
        assert item.meta["stored"] == len(item.body)
        assert decode_result(item.body) == first.result
        hit = await conn.call("read", {"key": "k"})  # no decoded copy: decoded from the stored body
        assert hit.outcome.status == "fresh_hit"
        assert hit.outcome.bytes_saved == len(plain_body)
        assert plain(hit.result) == plain(first.result)
    assert doc.runs == 1


async def test_a_text_that_is_not_exactly_the_json_is_stored_plainly(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    cache = ToolCache(store, clock=clock)
    async with connect("mcp", ServerTarget.memory(large_server(Doc())), MODERN, cache, server_id=SERVER_ID) as conn:
        answer = (await conn.call("read", {"key": "k"})).result
    assert isinstance(answer.content[0], mt.TextContent)
    near = answer.content[0].text.replace("cells", "celLs", 1)  # one byte off: the JSON of nothing stored
    for other in (near, answer.content[0].text + " ", orjson.dumps(answer.structured_content).decode() + "\n"):
        changed = answer.model_copy(update={"content": [mt.TextContent(type="text", text=other)]})
        encoded = encode_entry(changed)
        assert encoded.body == encode_result(changed)
        assert encoded.size == len(encoded.body)


_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    extra=st.dictionaries(st.text(max_size=6), _json, max_size=4),
    padding=st.text(alphabet=st.characters(codec="utf-8"), min_size=1100, max_size=1300),
    exact=st.booleans(),
    blocks=st.lists(st.sampled_from(["shared", "other", "image"]), min_size=1, max_size=4),
    meta=st.none() | st.dictionaries(st.text(max_size=6), _json, max_size=3),
)
def test_every_answer_decodes_from_its_stored_form_as_from_its_plain_json(
    extra: dict[str, Any], padding: str, exact: bool, blocks: list[str], meta: dict[str, Any] | None
) -> None:
    structured = {"padding": padding, **extra}
    json_text = pydantic_core.to_json(structured).decode()
    text = json_text if exact else json_text[:-1] + " }"
    content: list[mt.ContentBlock] = []
    for kind in blocks:
        if kind == "shared":
            content.append(mt.TextContent(type="text", text=text))
        elif kind == "other":
            content.append(mt.TextContent(type="text", text=padding))
        else:
            content.append(mt.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"))
    answer = mt.CallToolResult(content=content, structured_content=structured, _meta=meta)
    encoded = encode_entry(answer)
    plain_body = encode_result(answer)
    assert decode_result(encoded.body) == decode_result(plain_body)
    assert encoded.size == len(plain_body)
    assert encoded.body.startswith(_SHARED_TEXT) == (exact and "shared" in blocks)


def _shared(header: Any, shared: bytes, rest: Mapping[str, Any]) -> bytes:
    head = header if isinstance(header, bytes) else orjson.dumps(header)
    return _SHARED_TEXT + head + b"\n" + shared + orjson.dumps(rest)


_JSON = b'{"a":"' + b"x" * 2000 + b'"}'
_REST = {"content": [{"type": "text", "text": ""}], "isError": False}
HOSTILE_BODIES = {
    "a header that is not JSON": _shared(b"{not json", _JSON, _REST),
    "a header that is not an object": _shared([1], _JSON, _REST),
    "no end of header": _SHARED_TEXT + b'{"structured": 5}',
    "a length past the end": _shared({"structured": len(_JSON) * 3, "texts": [0]}, _JSON, _REST),
    "a negative length": _shared({"structured": -1, "texts": [0]}, _JSON, _REST),
    "a block index out of range": _shared({"structured": len(_JSON), "texts": [3]}, _JSON, _REST),
    "a block that is not text": _shared(
        {"structured": len(_JSON), "texts": [0]}, _JSON, {"content": [{"type": "image", "data": "", "mimeType": "x"}]}
    ),
    "a text block that is not empty": _shared(
        {"structured": len(_JSON), "texts": [0]}, _JSON, {"content": [{"type": "text", "text": "planted"}]}
    ),
    "structured content twice": _shared(
        {"structured": len(_JSON), "texts": [0]}, _JSON, {**_REST, "structuredContent": {}}
    ),
    "shared bytes that are not UTF-8": _shared({"structured": 4, "texts": [0]}, b'"\xff"x', _REST),
    "shared bytes that are not JSON": _shared({"structured": 4, "texts": [0]}, b"{{{{", _REST),
    "truncated": _shared({"structured": len(_JSON), "texts": [0]}, _JSON, _REST)[:-5],
}


@pytest.mark.parametrize("case", list(HOSTILE_BODIES))
async def test_a_malformed_shared_text_body_is_a_miss_never_an_answer(case: str, clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    cache = ToolCache(store, clock=clock)
    doc = Doc()
    async with connect("mcp", ServerTarget.memory(large_server(doc)), MODERN, cache, server_id=SERVER_ID) as conn:
        honest = await conn.call("read", {"key": "k"})
        item = await store.load(key_of(cache))
        assert item is not None
        planted = Item(item.meta, HOSTILE_BODIES[case], item.group, item.created_at, item.expires_at, None, item.stamp)
        assert await store.save(key_of(cache), planted)
        assert decode_result(planted.body) is None
        call = await conn.call("read", {"key": "k"})
        assert (call.outcome.status, call.outcome.stored) == ("miss", True)
        assert plain(call.result) == plain(honest.result)
    assert doc.runs == 2


# -- deadlines that grow with the bytes -------------------------------------------------------------

SECONDS_PER_MB_OF_DISK = 0.5
"""The slow store's pace: a 2 MB body takes a second to save and a second to load."""


class SlowDisk(SQLiteStore):
    """A real SQLite file behind a disk that moves `SECONDS_PER_MB_OF_DISK` per MB of body, each way."""

    async def save(self, key: str, item: Item) -> bool:
        await anyio.sleep(len(item.body) / 1e6 * SECONDS_PER_MB_OF_DISK)
        return await super().save(key, item)

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        items = await super().load_many(keys)
        await anyio.sleep(sum(len(item.body) for item in items if item is not None) / 1e6 * SECONDS_PER_MB_OF_DISK)
        return items


@pytest.mark.slow
async def test_a_slow_store_saves_and_serves_a_large_answer_within_its_scaled_deadline(tmp_path: Path) -> None:
    clock = FakeClock()
    doc = Doc()
    doc.chars = 4_000_000  # stored once: about 4 MB, two seconds each way on this disk
    async with SlowDisk(tmp_path / "tools.db", clock=clock) as store:
        # A fixed deadline well under the transfer, and a budget per MB well over it.
        cache = ToolCache(store, CacheSettings(store_deadline_s=0.5, store_deadline_per_mb_s=2.0), clock=clock)
        async with connect("mcp", ServerTarget.memory(large_server(doc)), MODERN, cache, server_id=SERVER_ID) as conn:
            first = await conn.call("read", {"key": "k"})
            assert (first.outcome.status, first.outcome.stored) == ("miss", True)
        # Another cache over the same file holds no decoded copy: it loads the body.
        again = ToolCache(store, CacheSettings(store_deadline_s=0.5, store_deadline_per_mb_s=2.0), clock=clock)
        async with connect("mcp", ServerTarget.memory(large_server(doc)), MODERN, again, server_id=SERVER_ID) as conn:
            hit = await conn.call("read", {"key": "k"})
            assert hit.outcome.status == "fresh_hit"
            assert plain(hit.result) == plain(first.result)
    assert doc.runs == 1
    assert cache.stats.store_failures == again.stats.store_failures == 0


class FreezingStore(MemoryStore):
    """A memory store whose loads with bodies never answer once `frozen` (a disk or server that hangs
    after answering the metadata read)."""

    frozen = False

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        if self.frozen:
            await anyio.sleep_forever()
        return await super().load_many(keys)


async def test_a_frozen_store_waits_no_longer_for_a_record_that_claims_to_be_huge(clock: FakeClock) -> None:
    store = FreezingStore(clock=clock)
    # Up to 1 MB counts: the longest wait for a body is 0.2 s plus 1 s.
    cache = ToolCache(
        store, CacheSettings(store_deadline_s=0.2, store_deadline_per_mb_s=1.0, max_answer_bytes=10**6), clock=clock
    )
    doc = Doc()
    async with connect("mcp", ServerTarget.memory(large_server(doc)), MODERN, cache, server_id=SERVER_ID) as conn:
        first = await conn.call("read", {"key": "k"})
        key = key_of(cache)
        item = await store.load(key)
        assert item is not None
        # The record claims 10^12 bytes: at 1 s per MB, a million seconds if the claim were believed.
        claims = {**item.meta, "size": 10**12, "stored": 10**12}
        assert await store.update_meta(key, claims, item.expires_at, if_tag=item.tag)
        fresh = ToolCache(
            store, CacheSettings(store_deadline_s=0.2, store_deadline_per_mb_s=1.0, max_answer_bytes=10**6), clock=clock
        )
        async with connect("mcp", ServerTarget.memory(large_server(doc)), MODERN, fresh, server_id=SERVER_ID) as other:
            store.frozen = True
            started = time.monotonic()
            with anyio.fail_after(60):
                call = await other.call("read", {"key": "k"})
            waited = time.monotonic() - started
    assert call.outcome.status == "miss"  # the server answered; the store was given up on
    assert plain(call.result) == plain(first.result)
    assert fresh.stats.store_failures >= 1
    assert waited < 1.2 + 8.0  # the bound, with a generous margin: never the claimed size's million seconds


# -- the size bound -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "sizes", "how"),
    [
        # 94,124 characters of JSON, 109,297 bytes once encoded: only the encoding tells.
        ("read", (60_000, 88_000), "is 107.1 KiB as stored"),
        # Its text alone is longer than the bound: known without encoding anything.
        ("text", (30_000, 150_000), "is at least 146.5 KiB as stored"),
    ],
    ids=["measured once encoded", "longer than the bound"],
)
async def test_an_answer_above_max_answer_bytes_is_passed_through_unstored(
    clock: FakeClock, tool: str, sizes: tuple[int, int], how: str
) -> None:
    store = CountingStore(clock)
    cache = ToolCache(store, CacheSettings(max_answer_bytes=100_000), clock=clock)
    doc = Doc()
    doc.chars = sizes[0]
    async with connect("mcp", ServerTarget.memory(large_server(doc)), MODERN, cache, server_id=SERVER_ID) as conn:
        first = await conn.call(tool, {"key": "k"})
        assert (first.outcome.status, first.outcome.stored) == ("miss", True)
        doc.chars = sizes[1]  # too large now: the smaller answer it supersedes must not be served again
        calls = [await conn.call(tool, {"key": "k"}, cache_mode="refresh"), await conn.call(tool, {"key": "k"})]
    for call in calls:
        assert (call.outcome.status, call.outcome.stored) == ("miss", False)
        assert f"not stored: the answer {how}, above max_answer_bytes (97.7 KiB)" in call.outcome.reason
        assert isinstance(call.result.structured_content, dict)
        assert len(call.result.structured_content["text" if tool == "read" else "result"]) == sizes[1]
    assert await store.load(key_of(cache, tool)) is None
    assert doc.runs == 3


async def test_the_bound_is_checked_on_construction() -> None:
    for bad in (0, -1, True, 1.5, "64MB"):
        with pytest.raises(ValueError, match="max_answer_bytes"):
            ToolCache(MemoryStore(), CacheSettings(max_answer_bytes=bad))  # type: ignore[arg-type]
    assert ToolCache(MemoryStore()).settings.max_answer_bytes == DEFAULT_MAX_ANSWER_BYTES == 64 * 1024 * 1024
    for per_mb in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="per MB"):
            ToolCache(MemoryStore(), CacheSettings(store_deadline_per_mb_s=per_mb))


# -- the decoded tier follows the bound -----------------------------------------------------------------


@pytest.mark.slow
async def test_the_decoded_tier_holds_an_answer_of_38_mb_by_default(clock: FakeClock) -> None:
    store = CountingStore(clock)
    cache = ToolCache(store, clock=clock)
    doc = Doc()
    doc.chars = 16_000_000  # a text answer (and its structured copy), stored plainly: about 38 MB
    async with connect("mcp", ServerTarget.memory(large_server(doc)), MODERN, cache, server_id=SERVER_ID) as conn:
        first = await conn.call("text", {"key": "k"})
        assert 32 * 2**20 < len(encode_result(first.result)) < DEFAULT_MAX_ANSWER_BYTES
        hit = await conn.call("text", {"key": "k"})
    assert hit.outcome.status == "fresh_hit"
    assert store.loads == []  # served from the decoded copy: the body was never read back


async def test_a_smaller_bound_sizes_the_tier_too(clock: FakeClock) -> None:
    store = CountingStore(clock)
    cache = ToolCache(store, CacheSettings(max_answer_bytes=200_000), clock=clock)
    doc = Doc()
    async with connect("mcp", ServerTarget.memory(large_server(doc)), MODERN, cache, server_id=SERVER_ID) as conn:
        for key, chars in (("a", 70_000), ("b", 10_000), ("c", 10_000)):  # about 168, 24 and 24 KB stored
            doc.chars = chars
            await conn.call("text", {"key": key})
        for key in ("c", "b", "a"):
            assert (await conn.call("text", {"key": key})).outcome.status == "fresh_hit"
    # The tier holds 200 KB: "c" pushed "a" out, so only "a" was read back from the store.
    assert store.loads == [[key_of(cache, "text", "a")]]


# -- a 50 MB notebook, on a real SQLite file and a real redis-server -----------------------------------


@pytest.fixture(scope="module")
def notebook_50_mb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("large-notebook")
    generate_notebook_of_size(folder / "big.ipynb", 50_000_000, seed=50, validate=False)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def test_a_50_mb_notebook_is_revalidated_never_fetched_again_for_a_deadline(
    notebook_50_mb: Path, tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    """The demo server with a validator, ttl 0: every read after the first is a revalidation. The stores keep
    their default timeouts and the cache its default deadlines; the answer is about 97 MB as sent."""
    clock = live_clock()
    server = build_demo_server(notebook_50_mb, validator=True, ttl_ms=0)
    arguments = {"path": "big.ipynb"}
    store: Store = (
        SQLiteStore(tmp_path / "tools.db")
        if kind == "sqlite"
        else RedisStore(request.getfixturevalue("redis_url"), namespace=f"large-{time.time_ns()}")
    )
    async with store:
        first_cache = ToolCache(store, clock=clock)
        async with connect("mcp", ServerTarget.memory(server), MODERN, first_cache, server_id=SERVER_ID) as conn:
            first = await conn.call("read_notebook", arguments)
            assert (first.outcome.status, first.outcome.stored) == ("miss", True), first.outcome.reason
            assert len(encode_result(first.result)) > 90_000_000
            # A cache of another process: no decoded copy, so the revalidation loads the stored body.
            other = ToolCache(store, clock=clock)
            async with connect("mcp", ServerTarget.memory(server), MODERN, other, server_id=SERVER_ID) as again:
                second = await again.call("read_notebook", arguments)
                third = await again.call("read_notebook", arguments)
            assert [second.outcome.status, third.outcome.status] == ["revalidated", "revalidated"]
            assert second.result.structured_content == first.result.structured_content
            assert conn.tool_calls() == 1
        assert first_cache.stats.store_failures == other.stats.store_failures == 0
        await first_cache.clear()
