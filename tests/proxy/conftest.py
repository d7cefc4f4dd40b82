"""The HTTP upstreams of the proxy tests, started once for the session and side by side (one start-up for
all): the demo server with mcpcache over a folder holding a generated notebook, the tests' own upstream
(`upstream.py`), and the chart server of the reference tests (tests/refs/servers.py), a second server to
pass rows to."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from refs.servers import SERVE_SCRIPT as REFS_SERVERS
from support.transports import http_servers

from mcpcache.demo.notebooks import generate_notebook

from .hosts import DEMO, PYTHON
from .upstream import SCRIPT

NOTEBOOK = "demo-12.ipynb"


@dataclass(frozen=True)
class Upstreams:
    folder: Path
    demo: str
    """The demo server with mcpcache, announcing ttlMs 0: every reuse revalidates."""
    tests: str
    """`upstream.py` over HTTP."""
    chart: str
    """The MCP SDK server with `plot(data, title)` (tests/refs/servers.py)."""


@pytest.fixture(scope="session")
def upstreams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstreams]:
    folder = tmp_path_factory.mktemp("notebooks")
    generate_notebook(folder / NOTEBOOK, 12, seed=11)  # its answer stays under the stock clients' 1 MiB SSE event cap
    demo = [*DEMO, "--dir", str(folder), "--ttl-ms", "0", "--http"]
    tests = [PYTHON, str(SCRIPT), "http"]
    chart = [PYTHON, str(REFS_SERVERS), "chart", "http"]
    # Generous: with two test workers, each starts these servers, on two cores that may be busy.
    with http_servers([demo, tests, chart], ready_within=180) as urls:
        yield Upstreams(folder, *urls)
