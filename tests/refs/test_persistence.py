"""A reference outlives the host process that minted it: a new process, on the same SQLite file or Redis
namespace, resolves it (and still refuses it in another conversation, and reports it evicted after a clear).

Minting and resolving happen in two separate interpreters (host_process.py), so nothing survives in memory
between them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from .servers import digest, time_series

HOST = Path(__file__).resolve().parent / "host_process.py"
SERIES = {"station": "KSLC", "rows": time_series()}


def host(store: dict[str, Any], *steps: dict[str, Any]) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(HOST), json.dumps({"store": store, "steps": steps})],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "sqlite":
        return {"kind": "sqlite", "path": str(tmp_path / "refs.db")}
    return {"kind": "redis", "url": request.getfixturevalue("redis_url"), "namespace": f"t-{uuid.uuid4().hex[:12]}"}


@pytest.mark.slow
def test_a_reference_resolves_in_a_new_process(store_spec: dict[str, Any]) -> None:
    [minted] = host(store_spec, {"op": "mint", "conversation": "conv-42", "payload": SERIES})
    uri = minted["uri"] + "#/rows"
    assert uri.startswith("mcp+cache://conv-42/")

    here, elsewhere, cleared, gone = host(
        store_spec,
        {"op": "resolve", "conversation": "conv-42", "uri": uri},
        {"op": "resolve", "conversation": "conv-43", "uri": uri},
        {"op": "clear", "conversation": "conv-42"},
        {"op": "resolve", "conversation": "conv-42", "uri": uri},
    )
    assert here == {"ok": True, "rows": 240, "digest": digest(time_series())}
    assert elsewhere["ok"] is False
    assert elsewhere["error"]["_missing_uris"] == [{"argument": "data_uri", "uri": uri, "reason": "other_conversation"}]
    assert cleared == {"cleared": 1}
    assert gone["ok"] is False
    [missing] = gone["error"]["_missing_uris"]
    assert missing["reason"] == "evicted"
    assert missing["source"] == {"server": "query", "tool": "query", "arguments": {"station": "KSLC"}}
