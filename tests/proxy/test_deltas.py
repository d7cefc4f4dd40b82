"""The proxy stands aside for delta replies between its tool cache and the upstream: the request `_meta`
the cache hands the proxy's connection (a tag and `acceptDelta`) reaches the upstream whole, and the
upstream's delta reply comes back to the cache as the upstream sent it, for the cache to apply.

The upstream is the demo server with mcpcache (it sends deltas) over stdio, started by the proxy's own
link; the connection is the proxy's `UpstreamCall`, driven here as the cache drives it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mcpcache.client.cache import ToolCache
from mcpcache.delta import FORMAT, apply, document_of, result_of
from mcpcache.demo.notebooks import generate_notebook
from mcpcache.etag import answer_digest
from mcpcache.protocol import DeltaBlock, conditional_request_meta, parse_cache_block
from mcpcache.proxy.calls import UpstreamCall
from mcpcache.proxy.link import UpstreamLink
from mcpcache.proxy.settings import ProxySettings, StdioUpstream, UpstreamEra
from mcpcache.stores import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_a_request_for_a_delta_goes_upstream_whole_and_the_delta_comes_back(
    tmp_path: Path, era: UpstreamEra
) -> None:
    generate_notebook(tmp_path / "nb.ipynb", 12, seed=2)
    demo = ("-m", "mcpcache", "demo-server", "--dir", str(tmp_path), "--ttl-ms", "0")
    settings = ProxySettings(upstream=StdioUpstream(sys.executable, demo), upstream_era=era)
    link = UpstreamLink(settings, ToolCache(MemoryStore()))
    await link.open()
    try:
        conn = UpstreamCall(link, None, host_is_modern=True)
        args = {"path": "nb.ipynb"}
        held = await conn.send("read_notebook", args, None, None)
        assert held is not None
        block = parse_cache_block(held.meta)
        assert block is not None
        assert block.etag is not None
        edited = await conn.send("edit_cell", {"path": "nb.ipynb", "index": 3, "source": "x = 'edited'"}, None, None)
        assert edited is not None
        assert not edited.is_error
        meta = conditional_request_meta(block.etag, accept_delta=[FORMAT])
        reply = await conn.send("read_notebook", args, meta, None)
        full = await conn.send("read_notebook", args, None, None)
    finally:
        await link.aclose()
    assert reply is not None
    assert full is not None
    reply_block = parse_cache_block(reply.meta)
    assert reply_block is not None
    found = reply_block.delta
    assert isinstance(found, DeltaBlock), reply.meta
    assert reply.content == []
    rebuilt = result_of(apply(document_of(held), found.ops))
    assert answer_digest(rebuilt.content, rebuilt.structured_content, rebuilt.meta) == found.digest
    assert rebuilt.content == full.content
    assert rebuilt.structured_content == full.structured_content
