"""`mcpcache check` against servers: mcpcache's own (FastMCP and the SDK's MCPServer) conform, and a
deliberately broken server fails each scenario it breaks (tests/check/quirky.py), in memory.

Each broken server breaks one rule; the test asserts that scenario's verdict and what its detail says,
so every required scenario is shown able to fail. The honest variant of the same hand-written server
passes every scenario, so a failure is the quirk's doing, not the harness's.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastmcp import FastMCP
from mcp.client._memory import InMemoryTransport

from mcpcache.check.core import Report, Verdict
from mcpcache.check.probe import CheckOptions, Target, check_server
from mcpcache.check.selection import ToolCall
from mcpcache.check.suite import SERVER_SCENARIOS

from .ours import build_ours
from .quirky import BUMP_ARGS, EDIT_ARGS, READ_ARGS, Quirks, build_quirky

pytestmark = pytest.mark.anyio

READ = ToolCall("read", READ_ARGS)
EDIT = ToolCall("edit", EDIT_ARGS)
BUMP = ToolCall("bump", BUMP_ARGS)


async def check(server: Any, *calls: ToolCall, mutations: tuple[ToolCall, ...] = (), era: Any = "auto") -> Report:
    # InMemoryTransport takes an MCPServer or a low-level Server; FastMCP's is its private _mcp_server.
    lowlevel = server._mcp_server if isinstance(server, FastMCP) else server
    target = Target.of("in memory", lambda: InMemoryTransport(lowlevel))
    return await check_server(target, CheckOptions(calls=calls, mutations=mutations, era=era))


def verdicts(report: Report, tool: str = "read") -> dict[str, Verdict]:
    subject = next(s for s in report.subjects if s.name == tool)
    return {v.scenario: v for v in subject.verdicts}


def statuses(report: Report, tool: str = "read") -> dict[str, str]:
    return {name: v.status for name, v in verdicts(report, tool).items()}


# -- servers that conform --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fastmcp", "sdk"])
@pytest.mark.parametrize("checked", [True, False], ids=["full-answer", "refused-stub"])
async def test_a_stub_the_output_schema_refuses_is_a_failure(kind: Any, checked: bool) -> None:
    """doc_model's schema requires more than `kind`. A server that sends the full answer to its current
    tag passes; one that sends the stub anyway (a MUST NOT of docs/protocol.md section 4) fails."""
    from fixture_servers.catalog import build

    report = await check(build(kind, stubs_checked=checked), ToolCall("doc_model", {"key": "k"}))
    found = verdicts(report, "doc_model")
    if checked:
        assert found["nm-schema"].status == "pass", found["nm-schema"]
        assert found["not-modified"].status == "pass", found["not-modified"]
        assert found["weak-compare"].status == "pass", found["weak-compare"]
        assert report.counts()["fail"] == 0
    else:
        assert found["nm-schema"].status == "fail", found["nm-schema"]
        assert "MUST NOT" in found["nm-schema"].detail
        assert not report.ok


EVERY_SCENARIO = {s.id for s in SERVER_SCENARIOS}
NOT_DECLARED = {"stale-windows": "n/a", "key-declaration": "n/a"}
"""The follow-ups' server rows for a tool that grants no stale window and declares no key arguments."""


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_the_hand_written_server_without_quirks_passes_every_scenario(era: Any) -> None:
    # No --tool: `read` is chosen because it is read-only and its first answer carries a block, and it
    # is called with the example its input schema gives. An edit, then a change of `_meta` alone: one run
    # exercises the mutation rule and the `_meta` one.
    both = await check(build_quirky(), mutations=(EDIT, BUMP), era=era)
    assert [s.name for s in both.subjects] == ["read"]
    assert both.subjects[0].arguments == READ_ARGS
    assert {name for name, _ in both.skipped} == {"edit", "bump"}, "tools that write are never called unasked"
    # It sends no deltas (they are optional): the delta row has nothing to judge.
    expected = {**dict.fromkeys(EVERY_SCENARIO, "pass"), **NOT_DECLARED, "wire": "info", "delta": "n/a"}
    assert statuses(both) == expected
    assert (both.ok, both.unexercised()) == (True, [])

    bumped = await check(build_quirky(), READ, mutations=(BUMP,), era=era)
    assert statuses(bumped)["meta"] == "pass"
    assert statuses(bumped)["mutation"] == "n/a", "only _meta changed: the meta row judges it"


async def test_it_never_says_conforms_while_a_required_rule_went_unexercised() -> None:
    """Without a change of `_meta` alone, the `_meta` rule (a MUST) is never tried on a tool whose answers
    carry `_meta` of their own; without any mutating call, neither is the mutation rule. The outcome is
    "incomplete" (exit status 3), and the closing line names each rule and what would exercise it."""
    from mcpcache.check.render import outcome_line

    edited = await check(build_quirky(), READ, mutations=(EDIT,))
    assert edited.counts()["fail"] == 0
    assert (edited.outcome, edited.exit_status) == ("incomplete", 3)
    assert [scenario for scenario, _ in edited.unexercised()] == ["meta"]
    line, _ = outcome_line(edited)
    assert line.startswith("incomplete: nothing failed (")
    assert "not exercised: meta (needs a mutating call that changes only the `_meta` of an answer" in line
    assert "conforms" not in line

    # A mutating call that changed only `_meta`: the closing line says the one given did not change the
    # content, rather than asking for a mutating call as if none had been named.
    bumped = await check(build_quirky(), READ, mutations=(BUMP,))
    line, _ = outcome_line(bumped)
    assert [scenario for scenario, _ in bumped.unexercised()] == ["mutation"]
    assert "(the --mutate calls given did not)" in line

    unmutated = await check(build_quirky(), READ)
    line, _ = outcome_line(unmutated)
    assert [scenario for scenario, _ in unmutated.unexercised()] == ["mutation", "meta", "delta"]
    assert "mutation (needs a mutating call that changes what the probed tools read" in line
    assert "conforms" not in line


@pytest.mark.parametrize("kind", ["fastmcp", "sdk"])
async def test_mcpcaches_own_servers_conform(kind: Any) -> None:
    report = await check(build_ours(kind), READ, ToolCall("read_rev", READ_ARGS), mutations=(EDIT, BUMP))
    assert report.ok, report.to_json()
    read = statuses(report, "read")
    # EDIT replaces the whole text with a short one: a delta would not be smaller than half the answer.
    # `read` answers no `_meta` of its own: the `_meta` rule has nothing to protect there (read_rev has).
    expected = {**dict.fromkeys(EVERY_SCENARIO, "pass"), **NOT_DECLARED, "meta": "n/a", "wire": "info"}
    assert read == {**expected, "delta": "n/a"}
    assert statuses(report, "read_rev")["meta"] == "pass"
    rev = statuses(report, "read_rev")
    # read_rev builds its own result with a `_meta` revision; edit and bump change both text and revision.
    assert rev["mutation"] == "pass"
    assert rev["nm-schema"] == "n/a" if kind == "sdk" else rev["nm-schema"] in ("pass", "n/a")
    assert "fail" not in rev.values()

    # bump alone changes only the revision: the tag must change, and it does.
    only_meta = await check(build_ours(kind), ToolCall("read_rev", READ_ARGS), mutations=(BUMP,))
    assert statuses(only_meta, "read_rev")["meta"] == "pass", verdicts(only_meta, "read_rev")["meta"]


async def test_a_server_that_sends_deltas_passes_the_delta_scenarios() -> None:
    report = await check(build_quirky(Quirks(deltas=True)), READ, mutations=(EDIT,))
    expected = {**dict.fromkeys(EVERY_SCENARIO, "pass"), **NOT_DECLARED, "meta": "n/a", "wire": "info"}
    assert statuses(report) == expected
    assert "rebuilds the full answer; the digest matches" in verdicts(report)["delta"].detail


@pytest.mark.parametrize("kind", ["fastmcp", "sdk"])
async def test_mcpcaches_own_servers_send_deltas_that_pass(kind: Any) -> None:
    small_edit = {"key": "k", "text": "k: first edition\n" + "lorem ipsum " * 339 + "lorem ipsvm "}
    report = await check(build_ours(kind), READ, mutations=(ToolCall("edit", small_edit),))
    read = statuses(report, "read")
    assert (read["delta"], read["delta-asked"], read["delta-base"]) == ("pass", "pass", "pass"), verdicts(report)


# -- the gateway -----------------------------------------------------------------------------------
async def test_the_gateway_conforms(tmp_path: Any) -> None:
    """`mcpcache gateway` in front of the demo server without mcpcache (it stamps nothing itself): the
    gateway's tags and not-modified replies pass every required scenario, mutation included."""
    from fastmcp.server.providers.proxy import ProxyClient

    from mcpcache.demo.notebooks import generate_notebook
    from mcpcache.demo.server import build_demo_server
    from mcpcache.gateway.app import Upstream, assemble_gateway
    from mcpcache.gateway.config import GatewayConfig, ToolSettings, UpstreamSettings

    generate_notebook(tmp_path / "nb.ipynb", 4, seed=3)
    upstream = build_demo_server(tmp_path, revalidation=False)
    settings = UpstreamSettings(url="http://upstream.invalid/mcp", tools={"read_notebook": ToolSettings(ttl_ms=0)})
    base: ProxyClient[Any] = ProxyClient(upstream)
    gateway = assemble_gateway(
        GatewayConfig(upstreams={"up": settings}),
        [Upstream("up", settings, "test:upstream", base.new, None)],
        store=None,
        auth=None,
    )
    report = await check(
        gateway,
        ToolCall("read_notebook", {"path": "nb.ipynb"}),
        mutations=(ToolCall("edit_cell", {"path": "nb.ipynb", "index": 0, "source": "changed"}),),
    )
    assert report.ok, report.to_json()
    read = statuses(report, "read_notebook")
    assert read["mutation"] == "pass"
    assert read["not-modified"] == "pass"
    assert read["nm-schema"] == "pass"  # the demo's read_notebook has an output schema
    assert "fail" not in read.values()


async def test_the_gateway_with_a_store_sends_deltas_that_pass(tmp_path: Any) -> None:
    """With a store, the gateway keeps a history of what it sent, and answers the check's old tag with a
    delta computed against it, though the upstream never heard of mcpcache."""
    from fastmcp.server.providers.proxy import ProxyClient

    from mcpcache.demo.notebooks import generate_notebook
    from mcpcache.demo.server import build_demo_server
    from mcpcache.gateway.app import Upstream, assemble_gateway
    from mcpcache.gateway.config import GatewayConfig, StoreSettings, ToolSettings, UpstreamSettings
    from mcpcache.stores import MemoryStore

    generate_notebook(tmp_path / "nb.ipynb", 8, seed=3)
    upstream = build_demo_server(tmp_path, revalidation=False)
    # public: the check connects without a credential, and the store keeps private answers only per caller.
    tools = {"read_notebook": ToolSettings(ttl_ms=0, scope="public")}
    settings = UpstreamSettings(url="http://upstream.invalid/mcp", tools=tools)
    base: ProxyClient[Any] = ProxyClient(upstream)
    gateway = assemble_gateway(
        GatewayConfig(upstreams={"up": settings}, store=StoreSettings(memory=True)),
        [Upstream("up", settings, "test:upstream", base.new, None)],
        store=MemoryStore(),
        auth=None,
    )
    report = await check(
        gateway,
        ToolCall("read_notebook", {"path": "nb.ipynb"}),
        mutations=(ToolCall("edit_cell", {"path": "nb.ipynb", "index": 0, "source": "changed"}),),
    )
    assert report.ok, report.to_json()
    read = statuses(report, "read_notebook")
    assert (read["delta"], read["delta-asked"], read["delta-base"]) == ("pass", "pass", "pass"), verdicts(
        report, "read_notebook"
    )
    assert "rebuilds the full answer; the tree digest matches" in verdicts(report, "read_notebook")["delta"].detail


# -- servers that break one rule each --------------------------------------------------------------

BROKEN: dict[str, tuple[Quirks, tuple[ToolCall, ...], str, str, str]] = {
    # name: (quirks, mutating calls, the scenario that must not hold, its status, what its detail says)
    "a negative ttlMs": (Quirks(block={"ttlMs": -5}), (), "block", "fail", "ttlMs -5 is negative"),
    "a negative stale window": (
        Quirks(block={"staleWhileRevalidateMs": -1}),
        (),
        "stale-windows",
        "fail",
        "staleWhileRevalidateMs -1 is negative",
    ),
    "a stale window that is not a number": (
        Quirks(block={"staleIfErrorMs": "10 min"}),
        (),
        "stale-windows",
        "fail",
        "staleIfErrorMs '10 min' is not an integer",
    ),
    "a key-arguments declaration with both fields": (
        Quirks(declaration={"ttlMs": 5000, "cacheScope": "private", "keyArguments": ["key"], "ignoreArguments": ["x"]}),
        (),
        "key-declaration",
        "fail",
        "both keyArguments and ignoreArguments are given",
    ),
    "an unknown scope": (Quirks(block={"cacheScope": "session"}), (), "block", "fail", "neither 'public' nor"),
    "a delta nobody asked for": (
        Quirks(deltas=True, delta_unasked=True),
        (EDIT,),
        "delta-asked",
        "fail",
        "accepted no delta format",
    ),
    "a delta against a tag never issued": (
        Quirks(deltas=True, delta_any_base=True),
        (),
        "delta-base",
        "fail",
        "a tag the server never issued",
    ),
    "a delta with a wrong digest": (
        Quirks(deltas=True, delta_wrong_digest=True),
        (EDIT,),
        "delta",
        "fail",
        "the digest of the answer built",
    ),
    "a malformed etag": (Quirks(block={"etag": "no quotes"}), (), "block", "fail", "is not an entity tag"),
    "a new tag on every call": (Quirks(tag_per_call=True), (), "same-tag", "fail", "the answers were identical"),
    "not-modified to everything": (Quirks(not_modified_always=True), (), "ordinary", "fail", "carried no tag"),
    "content kept on not-modified": (Quirks(nm_content=True), (), "not-modified", "fail", "content carries 1 block"),
    "no kind on not-modified": (Quirks(nm_kind=False), (), "not-modified", "fail", 'not {"kind": K}'),
    "not-modified without the flag": (Quirks(nm_flag=False), (), "not-modified", "fail", "answered in full"),
    "a schema that requires more than kind": (
        Quirks(strict_schema=True),
        (),
        "nm-schema",
        "fail",
        "'key' is a required property",
    ),
    "not-modified to any tag": (Quirks(compare="any-tag"), (), "other-tag", "fail", "answered not-modified"),
    "tags matched by substring": (Quirks(compare="contains"), (), "malformed-tag", "fail", "malformed-unquoted"),
    "tags compared as strings": (Quirks(compare="string"), (), "weak-compare", "warn", "compared as strings"),
    "a stamped error": (Quirks(stamp_errors=True), (), "error", "fail", "the error carries a cache block"),
    "not-modified to a failing call": (Quirks(nm_to_errors=True), (), "error", "fail", "answered not-modified"),
    "a padded not-modified reply": (Quirks(nm_padding=2000), (), "nm-size", "fail", "over 1,024 B"),
    "a tag that ignores the content": (Quirks(tag_from_key_only=True), (EDIT,), "mutation", "fail", "the tag stayed"),
    "a tag that leaves _meta out": (Quirks(tag_covers_meta=False), (BUMP,), "meta", "fail", "example.com/rev: 0 -> 1"),
}


@pytest.mark.parametrize("case", list(BROKEN))
async def test_a_broken_server_fails_the_scenario_it_breaks(case: str) -> None:
    quirks, mutations, scenario, status, detail = BROKEN[case]
    report = await check(build_quirky(quirks), READ, mutations=mutations)
    verdict = verdicts(report)[scenario]
    assert (verdict.status, verdict.kind) == (status, "required" if status == "fail" else "recommended")
    assert detail in verdict.detail, verdict.detail
    assert (report.outcome == "does not conform") is (status == "fail")


async def test_stale_windows_in_the_block_are_checked_as_durations() -> None:
    """Issue 23: the windows of docs/protocol.md section 12 are known fields (no "unknown fields" note), and
    one over 24 h is noted as clamped, as a long ttlMs is (their own row, of the stale-serving proposal)."""
    windows = {"staleWhileRevalidateMs": 30_000, "staleIfErrorMs": 100_000_000}
    found = verdicts(await check(build_quirky(Quirks(block=windows)), READ))
    assert found["block"].status == found["stale-windows"].status == "pass", found
    assert "unknown fields" not in found["block"].detail
    assert "staleIfErrorMs 100000000 is over 24 h; clients clamp it" in found["stale-windows"].detail


async def test_a_well_formed_key_arguments_declaration_passes() -> None:
    declared = {"ttlMs": 5000, "cacheScope": "private", "ignoreArguments": ["trace"]}
    verdict = verdicts(await check(build_quirky(Quirks(declaration=declared)), READ))["key-declaration"]
    assert verdict.status == "pass", verdict
    assert "not in the input schema: trace" in verdict.detail


def test_every_required_and_recommended_scenario_has_a_server_that_breaks_it() -> None:
    broken = {scenario for _, _, scenario, _, _ in BROKEN.values()}
    assert broken == {s.id for s in SERVER_SCENARIOS if s.kind != "info"}


async def test_a_tool_that_needs_arguments_nobody_gave_is_not_applicable() -> None:
    report = await check(build_ours("sdk"))  # read/read_rev need `key`; their schemas give no example
    assert report.subjects == ()
    assert dict(report.skipped)["read"].startswith("needs arguments (key)")
    assert """--tool read --args '{"key": <string>}'""" in dict(report.skipped)["read"]
    assert (report.ok, report.outcome, report.exit_status) == (False, "inconclusive", 3), "nothing was checked"
