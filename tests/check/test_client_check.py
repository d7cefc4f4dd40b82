"""`mcpcache check --client`: the scripted server passes mcpcache's `ToolCache` and fails a deliberately
broken client cache, in memory; and the real CLI, over stdio and over streamable HTTP, judges a
`ToolCache` driven through it.

The driver is the reference one (`mcpcache.check.drive`): `script` and `report` go around the cache,
each step's call goes through the client under test as the step's partition.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from mcp.client._memory import InMemoryTransport
from mcp.client.stdio import stdio_client

from mcpcache.check.client_rules import CLIENT_SCENARIOS
from mcpcache.check.core import Report
from mcpcache.check.drive import as_json, drive, raw_caller
from mcpcache.check.scripted import ClientCheck, build_scripted_server
from mcpcache.check.wire import RawResult
from mcpcache.client import CacheSettings, ToolCache
from mcpcache.delta import FORMAT, apply
from mcpcache.processes import accepts, free_port, stop_process
from mcpcache.protocol import META_KEY
from mcpcache.stores import MemoryStore

pytestmark = pytest.mark.anyio

PARTITIONS = ("a", "b")
EVERY_SCENARIO = {item.scenario.id for item in CLIENT_SCENARIOS}


async def drive_tool_cache(client: mcp.Client, partitions: tuple[str, ...] = PARTITIONS) -> int:
    """mcpcache's client under test: one ToolCache per partition over one shared store."""
    store = MemoryStore()
    views = {p: ToolCache(store, partition=p).wrap(client, server_id="scripted") for p in partitions}

    async def through(partition: str, tool: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        return as_json(await views[partition].call_tool(tool, arguments))

    return await drive(raw_caller(client.session), through, partitions)


class NaiveCache:
    """A deliberately broken client cache: one entry per tool and arguments for everyone (no partitions),
    every answer stored (errors and stubs too), whatever tag it held sent back (malformed ones too), and
    every not-modified reply believed and returned as is."""

    def __init__(self, client: mcp.Client) -> None:
        self.client = client
        self.entries: dict[str, tuple[float, dict[str, Any]]] = {}

    async def call(self, partition: str, tool: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        key = json.dumps([tool, arguments], sort_keys=True)
        meta = None
        if key in self.entries:
            received, stored = self.entries[key]
            block = stored.get("_meta", {}).get(META_KEY, {})
            ttl = block.get("ttlMs")
            if isinstance(ttl, int) and time.monotonic() < received + ttl / 1000:
                return stored
            meta = {META_KEY: {"etag": block.get("etag")}}
        params = mcp.types.CallToolRequestParams(name=tool, arguments=arguments, _meta=meta)
        result = (await self.client.session.send_request(mcp.types.CallToolRequest(params=params), RawResult)).root
        self.entries[key] = (time.monotonic(), result)
        return result


class TrustingDeltaCache(NaiveCache):
    """A client cache that takes deltas and applies them without checking their digest (otherwise the naive
    cache above): it serves whatever a corrupt delta makes."""

    async def call(self, partition: str, tool: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        key = json.dumps([tool, arguments], sort_keys=True)
        held = self.entries.get(key)
        meta = None
        if held is not None:
            meta = {META_KEY: {"etag": held[1]["_meta"][META_KEY].get("etag"), "acceptDelta": [FORMAT]}}
        params = mcp.types.CallToolRequestParams(name=tool, arguments=arguments, _meta=meta)
        result = (await self.client.session.send_request(mcp.types.CallToolRequest(params=params), RawResult)).root
        block = result.get("_meta", {}).get(META_KEY, {})
        if held is not None and isinstance(block.get("delta"), dict):
            base = {k: v for k, v in held[1].items() if k in ("content", "structuredContent")}
            base["_meta"] = {k: v for k, v in held[1]["_meta"].items() if k != META_KEY}
            patched = apply(base, block["delta"]["ops"])
            fresh = {k: v for k, v in block.items() if k != "delta"}
            result = {**patched, "_meta": {**patched["_meta"], META_KEY: fresh}}
        self.entries[key] = (time.monotonic(), result)
        return result


async def test_a_client_that_skips_the_digest_serves_a_corrupt_delta_and_fails() -> None:
    check = ClientCheck()
    async with mcp.Client(InMemoryTransport(build_scripted_server(check))) as client:
        await drive(raw_caller(client.session), TrustingDeltaCache(client).call)
    report = check.report()
    got = statuses(report)
    assert got["delta-applied"] == "pass"
    assert got["delta-corrupt"] == "fail"
    details = {v.scenario: v.detail for v in report.subjects[0].verdicts}
    assert details["delta-corrupt"] == "step 2: served what a corrupt delta made (its digest was not checked)"


async def test_a_tool_cache_without_deltas_is_not_judged_on_them() -> None:
    check = ClientCheck()
    async with mcp.Client(InMemoryTransport(build_scripted_server(check))) as client:
        view = ToolCache(MemoryStore(), CacheSettings(deltas=False)).wrap(client, server_id="scripted")

        async def through(partition: str, tool: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
            return as_json(await view.call_tool(tool, arguments))

        await drive(raw_caller(client.session), through, {"a"})
    got = statuses(check.report())
    assert (got["delta-applied"], got["delta-corrupt"], got["delta-unasked"]) == ("n/a", "n/a", "pass")


def statuses(report: Report) -> dict[str, str]:
    (subject,) = report.subjects
    return {v.scenario: v.status for v in subject.verdicts}


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_our_tool_cache_passes_every_scenario(era: Any) -> None:
    check = ClientCheck()
    async with mcp.Client(InMemoryTransport(build_scripted_server(check)), mode=era) as client:
        steps = await drive_tool_cache(client)
    assert check.finished.is_set()
    report = check.report()
    assert statuses(report) == dict.fromkeys(EVERY_SCENARIO, "pass"), report.to_json()
    assert report.ok
    assert steps == sum(len(s.steps) for s in check.plan)


async def test_a_broken_client_fails_what_it_breaks() -> None:
    check = ClientCheck()
    async with mcp.Client(InMemoryTransport(build_scripted_server(check))) as client:
        naive = NaiveCache(client)
        await drive(raw_caller(client.session), naive.call)
    report = check.report()
    got = statuses(report)
    failed = {name for name, status in got.items() if status == "fail"}
    assert failed == {
        "serves-copy",
        "replaces",
        "unmatched-tag",
        "unmatched-untagged",
        "unmatched-error",
        "unmatched-no-entry",
        "error",
        "partitions",
        "unknown-scope",
        "malformed-block",
        "delta-unasked",
    }, report.to_json()
    assert got["sends-tag"] == got["fresh"] == "pass"
    assert got["delta-applied"] == got["delta-corrupt"] == "n/a"  # it never asks for a delta
    details = {v.scenario: v.detail for v in report.subjects[0].verdicts}
    assert details["unmatched-tag"] == "step 2: served the not-modified stub as the answer"
    assert "partition b was served partition a's answer" in details["partitions"]
    assert not report.ok


async def test_a_driver_without_partitions_leaves_those_scenarios_not_applicable() -> None:
    check = ClientCheck()
    async with mcp.Client(InMemoryTransport(build_scripted_server(check))) as client:
        await drive_tool_cache(client, partitions=("a",))
    got = statuses(check.report())
    assert got["partitions"] == got["unknown-scope"] == "n/a"
    assert {s for s in got.values()} == {"pass", "n/a"}


# -- the real CLI ------------------------------------------------------------------------------------


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "mcpcache", "check", "--client", *args]


@pytest.mark.slow
async def test_the_cli_over_stdio_judges_the_client_when_it_disconnects(tmp_path: Path) -> None:
    out, errors = tmp_path / "report.json", tmp_path / "stderr.txt"
    command, *args = _cli("--out", str(out))
    params = mcp.StdioServerParameters(command=command, args=args)
    with errors.open("w") as errlog:
        async with mcp.Client(stdio_client(params, errlog=errlog)) as client:
            await drive_tool_cache(client)
    for _ in range(400):  # the report is written after the client disconnects: a readiness wait
        if out.exists() and out.stat().st_size:
            break
        await anyio.sleep(0.05)
    report = json.loads(out.read_text())
    assert report["ok"], report
    assert {v["status"] for v in report["subjects"][0]["verdicts"]} == {"pass"}
    assert "conforms" in errors.read_text(), "the table goes to stderr: stdout is the protocol channel"


@pytest.mark.slow
async def test_the_cli_over_http_stops_when_every_step_is_reported() -> None:
    port = free_port()
    process = await anyio.to_thread.run_sync(_start_listening, _cli("--http", str(port), "--json"), port)
    try:
        async with mcp.Client(f"http://127.0.0.1:{port}/mcp") as client:
            await drive_tool_cache(client)
        stdout, _ = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=60))
    finally:
        stop_process(process)
    assert process.returncode == 0, "it stopped by itself once every step was reported, and conformed"
    assert json.loads(stdout)["ok"] is True


def _start_listening(command: list[str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60  # a readiness wait, not a timing assertion
    while not accepts(port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process(process)
            raise RuntimeError(f"mcpcache check --client --http {port} did not listen")
        time.sleep(0.05)
    return process


async def test_the_scripted_server_refuses_reports_out_of_order_and_counts_calls() -> None:
    check = ClientCheck()
    async with mcp.Client(InMemoryTransport(build_scripted_server(check, calls=3))) as client:
        direct = raw_caller(client.session)
        refused = await direct("report", {"key": "revalidate", "step": 2, "skipped": True})
        assert refused["isError"] is True
        assert "out of order" in refused["content"][0]["text"]
        unknown = await direct("read", {"key": "no such script"})
        assert unknown["isError"] is True
        assert not check.finished.is_set()
        await direct("script", {})
        assert check.finished.is_set(), "--calls 3: the third call ends the check"
    assert check.records["revalidate"][0].reported is False
