"""`mcpcache bench --quick` end to end: the real command, the real demo server, real subprocesses.

Only the structure of what it writes is checked (never a timing): every configuration and size has a
summary with its figures, the raw per-read records are there, the PNG exists, and `--compare` reads it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcpcache.bench.configs import CONFIGS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, "-m", "mcpcache", "bench", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-4000:]
    return out


def test_bench_json_holds_every_configuration_and_size(bench_out: Path) -> None:
    document = json.loads((bench_out / "bench.json").read_text())
    assert set(document) >= {"created", "machine", "args", "configs", "summaries", "answers", "by_reference", "raw"}
    assert document["args"]["quick"] is True
    sizes = document["args"]["sizes"]
    assert sizes == ["100KB", "1MB"]
    pairs = {(s["config"], s["size"]) for s in document["summaries"]}
    assert pairs == {(c.key, size) for c in CONFIGS for size in sizes}
    for summary in document["summaries"]:
        assert summary["reads"] == document["args"]["reads"]
        for field in ("median_ms", "p95_ms", "sent_per_read", "received_per_read", "client_peak_mib"):
            assert summary[field] > 0, (summary["config"], field)
        assert summary["wire_vs_baseline"] is not None
    for raw in document["raw"]:
        for run in raw["runs"]:
            reads = [op for op in run["operations"] if op["op"] == "read"]
            assert len(reads) == document["args"]["reads"]
    assert {a["size"] for a in document["answers"]} == set(sizes)
    assert document["by_reference"]["write_inline"]["tokens"] > document["by_reference"]["write_by_reference"]["tokens"]


def test_the_configurations_do_what_they_say(bench_out: Path) -> None:
    """Behaviour, not speed: who revalidates, who is served fresh, who sends everything every time."""
    document = json.loads((bench_out / "bench.json").read_text())
    by = {(s["config"], s["size"]): s for s in document["summaries"]}
    for size in document["args"]["sizes"]:
        assert set(by["baseline", size]["statuses"]) == {"full"}
        assert by["mcpcache", size]["statuses"].get("revalidated", 0) > 0
        assert by["mcpcache-validator", size]["statuses"].get("revalidated", 0) > 0
        assert by["sha256-peer", size]["statuses"].get("revalidated", 0) > 0
        assert by["mcpcache-ttl", size]["statuses"].get("fresh_hit", 0) > 0
        assert by["mcpcache", size]["not_modified_reply_bytes"] < 1000
        assert by["mcpcache", size]["received_per_read"] < by["baseline", size]["received_per_read"]


def test_the_plot_exists_and_compare_reads_the_json(bench_out: Path) -> None:
    png = bench_out / "bench.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcpcache",
            "bench",
            "--compare",
            str(bench_out / "bench.json"),
            str(bench_out / "bench.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "baseline" in done.stdout
