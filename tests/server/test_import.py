"""What importing the server half pulls in: no FastMCP for `mcpcache.server` and the SDK adapter, a
one-line error naming the extra when FastMCP is missing, and no import of FastMCP's response memo (and
its storage backends) by the FastMCP adapter. Each check runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mcpcache.extras import install_command

ROOT = Path(__file__).resolve().parents[2]


def run(script: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


WITHOUT_FASTMCP = """
import json, sys
sys.modules["fastmcp"] = None  # as if it were not installed: any import of it fails
import mcpcache.server
from mcpcache.server import CachePolicy, RevalidationExtension, cache_meta
from mcp.server.mcpserver import MCPServer
MCPServer("s", extensions=[RevalidationExtension({"t": CachePolicy(ttl_ms=5)})])
errors = []
for attempt in ("import mcpcache.server.fastmcp", "from mcpcache.server import install"):
    try:
        exec(attempt)
    except ImportError as exc:
        errors.append(str(exc))
print(json.dumps({"errors": errors, "fastmcp": [m for m in sys.modules if m.startswith("fastmcp.")]}))
"""


def test_the_server_half_imports_without_fastmcp_and_names_the_extra_when_it_is_needed() -> None:
    found = run(WITHOUT_FASTMCP)
    assert found["fastmcp"] == []
    expected = f"mcpcache: mcpcache.server.fastmcp needs the fastmcp extra: {install_command('fastmcp')}"
    assert found["errors"] == [expected, expected]


ADAPTER_ONLY = """
import json, sys
from fastmcp import FastMCP
FastMCP("probe")
before = set(sys.modules)
import mcpcache.server.fastmcp
added = sorted(set(sys.modules) - before)
print(json.dumps({"added": added}))
"""


def test_the_fastmcp_adapter_does_not_import_the_response_memo() -> None:
    """FastMCP's `ResponseCachingMiddleware` module brings about 440 modules of storage backends; the
    adapter finds the class in `sys.modules` instead, where it is whenever a server uses it."""
    added = run(ADAPTER_ONLY)["added"]
    assert isinstance(added, list)
    assert "fastmcp.server.middleware.caching" not in added
    assert not [name for name in added if name.startswith(("key_value", "beartype"))]
    # What it does add is mcpcache itself and the two hashing/serialising libraries it is built on.
    assert {name.split(".")[0] for name in added} <= {"mcpcache", "orjson", "xxhash"}
