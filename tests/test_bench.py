"""`mcpcache bench` end to end: the real command, the real demo server, real worker processes.

Only the structure of what it writes and what the configurations do is checked, never a timing: a tiny
"full" run (one size, two reads, two configurations), then `--quick` beside it, which must leave the
first run's files alone; `--report` and `--compare` on what they wrote; an old-format file read, a file
that is not a bench.json refused in one line.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcpcache.bench.configs import CONFIGS

pytestmark = pytest.mark.slow

PNG = b"\x89PNG\r\n\x1a\n"


def _bench(*arguments: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "mcpcache", "bench", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def bench_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    tiny = _bench(
        "--full", "--sizes", "100KB", "--reads", "2", "--transport", "http", "--configs", "baseline,mcpcache",
        "--no-extras", "--out", str(out),
    )  # fmt: skip
    assert tiny.returncode == 0, tiny.stderr[-4000:] + tiny.stdout[-4000:]
    before = {name: _digest(out / name) for name in ("bench.json", "bench-http.png")}
    quick = _bench("--quick", "--out", str(out))
    assert quick.returncode == 0, quick.stderr[-4000:] + quick.stdout[-4000:]
    assert "bench-quick.json" in quick.stdout
    (out / "quick-stdout.txt").write_text(quick.stdout)
    assert {name: _digest(out / name) for name in before} == before, "--quick overwrote the full run's files"
    return out


def test_a_full_run_writes_bench_json_and_a_png_per_transport(bench_out: Path) -> None:
    document = json.loads((bench_out / "bench.json").read_text())
    assert document["args"]["mode"] == "full"
    assert document["args"]["sizes"] == ["100KB"]
    assert document["args"]["transports"] == ["http"]
    assert {(s["config"], s["transport"], s["size"]) for s in document["summaries"]} == {
        ("baseline", "http", "100KB"),
        ("mcpcache", "http", "100KB"),
    }
    assert (bench_out / "bench-http.png").read_bytes()[:8] == PNG


def test_progress_on_a_pipe_is_plain_lines_as_the_run_goes(bench_out: Path) -> None:
    """Output to a file or a pipe gets no bar (drawn once, at the end, it left minutes of silence) but a line
    per phase and per tenth of the reads."""
    out = (bench_out / "quick-stdout.txt").read_text()
    # One worker per configuration and 6 reads each in the quick run: counted from the run's own JSON, so the
    # test holds whatever configurations the bench compares.
    document = json.loads((bench_out / "bench-quick.json").read_text())
    workers = len(document["configs"])
    reads = 6 * workers
    assert not re.search(rf"━ *\d+/{reads}", out), out  # the bar's tail
    assert f"http: starting {workers} workers: 0/{reads} reads" in out
    counts = [int(n) for n in re.findall(rf"^http, 100 KB: (\d+)/{reads} reads, \d+:\d\d elapsed$", out, re.MULTILINE)]
    assert len(counts) >= 10, out
    assert counts == sorted(counts)
    assert counts[-1] == reads


def test_quick_json_holds_every_configuration_with_provenance(bench_out: Path) -> None:
    document = json.loads((bench_out / "bench-quick.json").read_text())
    assert set(document) >= {
        "format", "created", "provenance", "machine", "load_average", "args", "configs", "seconds", "phases",
        "summaries", "answers", "by_reference", "model_rereads", "raw", "interleaved",
    }  # fmt: skip
    assert document["format"] == 2
    assert document["interleaved"] is True
    assert set(document["provenance"]) == {"commit", "dirty"}
    assert "mcpcache" in document["machine"]["libraries"]
    assert document["args"]["mode"] == "quick"
    sizes, transports = document["args"]["sizes"], document["args"]["transports"]
    reads = document["args"]["reads"]
    pairs = {(s["config"], s["transport"], s["size"]) for s in document["summaries"]}
    assert pairs == {(c.key, t, size) for c in CONFIGS for t in transports for size in sizes}
    for summary in document["summaries"]:
        assert summary["reads"] == reads == summary["rounds"]
        for field in ("median_ms", "p95_ms", "sent_per_read", "received_per_read", "client_peak_mib"):
            assert summary[field] > 0, (summary["config"], field)
        assert summary["wire_vs_baseline"] is not None
        assert summary["speedup_p10"] <= summary["speedup"] <= summary["speedup_p90"]
    for raw in document["raw"]:
        for run in raw["runs"]:
            rounds = [op["round"] for op in run["operations"] if op["op"] == "read"]
            assert rounds == list(range(reads))
    # Each round visits every configuration once, in some order.
    for round_index in range(reads):
        positions = sorted(
            op["position"]
            for raw in document["raw"]
            for run in raw["runs"]
            for op in run["operations"]
            if op["op"] == "read" and op["round"] == round_index
        )
        assert positions == list(range(len(CONFIGS)))
    assert {a["size"] for a in document["answers"]} == set(sizes)
    assert document["by_reference"]["write_inline"]["tokens"] > document["by_reference"]["write_by_reference"]["tokens"]
    rereads = document["model_rereads"]
    assert rereads["reads"] >= 10
    assert rereads["edits"] >= 2
    assert rereads["edits_seen"] is True
    assert rereads["views_match"] is True
    assert rereads["mcpcache_tokens"] <= 0.15 * rereads["naive_tokens"]
    for transport in transports:
        assert (bench_out / f"bench-quick-{transport}.png").read_bytes()[:8] == PNG


def test_the_configurations_do_what_they_say(bench_out: Path) -> None:
    """Behaviour, not speed: who revalidates, who is served fresh, who sends everything every time."""
    document = json.loads((bench_out / "bench-quick.json").read_text())
    by = {(s["config"], s["size"]): s for s in document["summaries"]}
    for size in document["args"]["sizes"]:
        assert set(by["baseline", size]["statuses"]) == {"full"}
        assert by["mcpcache", size]["statuses"].get("revalidated", 0) > 0
        assert by["mcpcache-validator", size]["statuses"].get("revalidated", 0) > 0
        assert by["sha256-peer", size]["statuses"].get("revalidated", 0) > 0
        assert by["mcpcache-ttl", size]["statuses"].get("fresh_hit", 0) > 0
        assert by["mcpcache", size]["not_modified_reply_bytes"] < 1000
        assert by["mcpcache", size]["received_per_read"] < by["baseline", size]["received_per_read"]
        # Deltas are the client's default: a read after an edit is patched, unless they are turned off.
        assert by["mcpcache", size]["statuses"].get("patched", 0) == by["mcpcache", size]["reads_after_edit"] > 0
        assert "patched" not in by["mcpcache-no-deltas", size]["statuses"]
        assert by["mcpcache", size]["after_edit_wire_per_read"] < 2000
        assert by["mcpcache-no-deltas", size]["after_edit_wire_per_read"] > by["mcpcache", size]["notebook_bytes"]
        assert by["mcpcache", size]["wire_after_first_vs_baseline"] < 0.01
        assert by["mcpcache", size]["after_edit_speedup"] is not None


def test_report_and_compare_read_what_was_written(bench_out: Path) -> None:
    (bench_out / "bench-quick-http.png").unlink()
    done = _bench("--report", str(bench_out / "bench-quick.json"), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "mcpcache-validator" in done.stdout
    assert "fewer bytes per revalidated read" in done.stdout
    assert "the reads after an edit" in done.stdout
    assert "every read but the first" in done.stdout
    assert (bench_out / "bench-quick-http.png").read_bytes()[:8] == PNG
    done = _bench("--compare", str(bench_out / "bench.json"), str(bench_out / "bench-quick.json"), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "baseline" in done.stdout
    assert "mcpcache" in done.stdout


def _old_format(document: dict[str, object]) -> dict[str, object]:
    """The same figures as a bench.json of before format 2 held them (one transport, no rounds)."""
    args = dict(document["args"])  # type: ignore[call-overload]
    raw = []
    for result in document["raw"]:  # type: ignore[attr-defined]
        runs = [
            {k: v for k, v in run.items() if k != "size"}
            | {
                "operations": [
                    {k: v for k, v in op.items() if k not in ("round", "position")} for op in run["operations"]
                ]
            }
            for run in result["runs"]
        ]
        raw.append({"config": result["config"], "runs": runs})
    old_args = {"sizes": args["sizes"], "transport": args["transports"][0], "reads": args["reads"], "quick": True}
    return {"created": document["created"], "machine": document["machine"], "args": old_args,
            "configs": document["configs"], "raw": raw}  # fmt: skip


def test_an_old_bench_json_is_still_read_and_anything_else_refused(bench_out: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_old_format(json.loads((bench_out / "bench-quick.json").read_text()))))
    done = _bench("--report", str(old), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "not interleaved" in done.stdout
    assert "mcpcache-ttl" in done.stdout
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"hello": "world"}))
    done = _bench("--report", str(foreign), timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "not a bench.json" in done.stderr


def test_the_proxy_and_gateway_scenario_counts_each_link() -> None:
    """`--full`'s proxy-and-gateway scenario on a tiny notebook, one round, on the route with every hop (a
    stock host, the proxy, the gateway, a server without mcpcache): what each link carries."""
    import anyio

    from mcpcache.bench.hops import ROUTES, run

    routes = [route for route in ROUTES if route.name in ("direct", "proxy+gateway")]
    document = anyio.run(run, 20_000, 1, 7, routes)
    rows = {row["config"]: row for row in document["rows"]}
    assert list(rows) == ["direct", "proxy+gateway"]
    full = rows["direct"]["bytes_by_link"]["client"]
    assert full > document["notebook_bytes"]
    both = rows["proxy+gateway"]
    assert both["network_link"] == "gateway"
    # Neither end changed: the host gets the whole answer, the plain server sends it, the link between
    # the proxy and the gateway carries a revalidation.
    assert both["bytes_by_link"]["gateway"] < 1000 < full <= both["bytes_by_link"]["client"]
    assert full <= both["bytes_by_link"]["server"]
    assert all(len(row["seconds"]) == 1 for row in rows.values())
