"""Re-read views (issue 22): an answer the model already read is shown as "unchanged" or as what changed.

The issue's "done when": a scripted model (no LLM) reads only the text of the tool messages. It keeps
what each view shows it, applies changed views to the earlier result they name (with its own reading of
the documented change format, not the library's), and after every view what it holds, and what the URI
the view names resolves to, must be exactly the server's current answer. Real parts throughout: the demo
server (FastMCP, with mcpcache's middleware), a real `ToolCache` on a SQLite file, and the references on
MemoryStore, a SQLite file and a real redis-server.
"""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import pytest
from fastmcp import FastMCP

from mcpcache.client import ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.refs import References, ShownMemory, call_for_model
from mcpcache.refs.view import envelope_of, payload_of
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import MemoryStore, SQLiteStore
from mcpcache.stores.items import Item

from .conftest import Harness

pytestmark = pytest.mark.anyio

URI = re.compile(r"mcp\+cache://[A-Za-z0-9_-]{1,64}/[A-Za-z0-9_-]{11}")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[([0-9]+)\]|\[(\"(?:[^\"\\]|\\.)*\")\]")


def _steps(name: str) -> list[str | int]:
    """A change's NAME as a path into the view, read as docs/references.md describes it."""
    rest = name if name.startswith("[") else "." + name
    steps: list[str | int] = []
    at = 0
    while at < len(rest):
        found = _STEP.match(rest, at)
        assert found is not None, f"unreadable name {name!r}"
        member, index, quoted = found.groups()
        steps.append(member if member is not None else int(index) if index is not None else json.loads(quoted))
        at = found.end()
    return steps


def _replace_lines(text: str, ranges: list[dict[str, Any]]) -> str:
    lines = text.split("\n")
    lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    for hunk in reversed(ranges):  # numbered in the text before the change: the last range first
        lines[hunk["from"] - 1 : hunk["to"]] = [hunk["with"]]
    return "".join(lines)


def apply_as_a_model_would(view: dict[str, Any], changes: list[dict[str, Any]]) -> dict[str, Any]:
    view = copy.deepcopy(view)
    for change in changes:
        verb = next(iter(change))
        *path, last = _steps(change[verb])
        parent: Any = view
        for step in path:
            parent = parent[step]
        if verb == "set":
            parent[last] = change["to"]
        elif verb == "insert":
            parent.insert(last, change["value"])
        elif verb == "remove":
            del parent[last]
        else:
            assert verb == "edit"
            parent[last] = _replace_lines(parent[last], change["replace_lines"])
    return view


class ScriptedModel:
    """Holds, per result it was shown (by its `_cache_uri`), the view of it it can put together."""

    def __init__(self) -> None:
        self.held: dict[str, dict[str, Any]] = {}

    def read(self, tool_message: str) -> tuple[str | None, dict[str, Any]]:
        """The reference a tool message names (None for a small answer, shown whole without one) and the
        whole answer's view the model now holds for it."""
        message = json.loads(tool_message)
        if "_cache_uri" not in message:
            return None, message
        uri = message.pop("_cache_uri")
        if "_unchanged" in message:
            assert set(message) == {"_unchanged"}
            assert len(tool_message) <= 300
            assert uri in self.held, "unchanged since a result this model never read"
        elif "_changed" in message:
            since = URI.findall(message["_changed"])
            assert len(since) == 1
            assert since[0] in self.held, "changes against a result this model never read"
            self.held[uri] = apply_as_a_model_would(self.held[since[0]], message["_changes"])
        else:
            self.held[uri] = message
        return uri, self.held[uri]


def whole_view(answer: Any) -> dict[str, Any]:
    """A full view of `answer` without its reference: what the model should hold."""
    return json.loads(json.dumps(envelope_of(answer, None)))


def _source(rng: random.Random, step: int) -> str:
    kind = rng.choice(["ascii", "unicode", "long", "empty", "lines"])
    if kind == "ascii":
        return f"x_{step} = {rng.randint(0, 99)}"
    if kind == "unicode":
        return f"# régler le café ☕ {step}\nπ = 3.14159  # 中文 🧪\n"
    if kind == "long":
        return "\n".join(f"row_{step}_{i} = {i} * {rng.randint(1, 9)}" for i in range(rng.randint(40, 120)))
    if kind == "empty":
        return ""
    return "\n".join(f"line {i}" for i in range(rng.randint(2, 6)))


@pytest.mark.slow
async def test_a_scripted_model_always_holds_the_servers_current_answer(harness: Harness, tmp_path: Path) -> None:
    rng = random.Random(22)
    folder = tmp_path / "notebooks"
    folder.mkdir()
    generate_notebook_of_size(folder / "nb.ipynb", 100_000, seed=7)
    memory = ShownMemory()
    refs = harness.refs(shown=memory)
    cache = ToolCache(SQLiteStore(tmp_path / "tools.db"))
    model = ScriptedModel()
    kinds: dict[str, int] = {"full": 0, "unchanged": 0, "changed": 0}
    # ttl 0: every read asks the server, so what the cache returns is the server's current answer.
    async with fastmcp.Client(build_demo_server(folder, ttl_ms=0)) as client:
        notebook = cache.wrap(client)
        cells = (await client.call_tool_mcp("read_notebook", {"path": "nb.ipynb"})).structured_content["cell_count"]
        for step in range(40):
            roll = rng.random()
            if roll < 0.35:
                edit = {"path": "nb.ipynb", "index": rng.randrange(cells), "source": _source(rng, step)}
                edited = await call_for_model(notebook, "edit_cell", edit, references=refs)
                assert edited.called
                assert model.read(json.dumps(edited.envelope))[0] is None  # a small answer: shown whole
                continue
            if roll < 0.4:
                memory.forget(refs.conversation_id)  # the host compacted the conversation
            tool, arguments = ("read_notebook", {"path": "nb.ipynb"})
            if roll > 0.85:
                tool, arguments = ("read_cell", {"path": "nb.ipynb", "index": rng.randrange(3)})
            called = await call_for_model(notebook, tool, arguments, references=refs)
            assert called.view is not None
            kinds[called.view.kind] += 1
            uri, held = model.read(called.view.text())
            current = (await client.call_tool_mcp(tool, arguments)).structured_content
            assert held == whole_view(current)
            if uri is not None:
                assert await refs.load(uri) == current  # the reference the view names resolves, to the answer
    assert kinds["full"] >= 2
    assert kinds["unchanged"] >= 3
    assert kinds["changed"] >= 3


def text_server(folder: Path) -> FastMCP:
    """A FastMCP server whose tool answers a text file's contents as plain text (no structured content)."""
    server = FastMCP("files")

    @server.tool(output_schema=None)
    def read_text(name: str) -> str:
        """A text file, whole."""
        return (folder / name).read_text(encoding="utf-8")

    install(server, ToolPolicies({"read_text": CachePolicy(ttl_ms=0)}))
    return server


async def test_a_long_text_is_shown_as_its_changed_lines(harness: Harness, tmp_path: Path) -> None:
    rng = random.Random(5)
    lines = [f"{i:04d} the quick brown fox jumps over the lazy dog, çà et là\n" for i in range(400)]
    (tmp_path / "log.txt").write_text("".join(lines), encoding="utf-8")
    refs = harness.refs(shown=ShownMemory())
    cache = ToolCache(SQLiteStore(tmp_path / "tools.db"))
    model = ScriptedModel()
    edits = 0
    async with fastmcp.Client(text_server(tmp_path)) as client:
        files = cache.wrap(client)
        for step in range(12):
            if step % 3 == 1:
                for _ in range(rng.randint(1, 3)):
                    at = rng.randrange(len(lines))
                    lines[at : at + rng.randint(0, 2)] = [f"changed at step {step} ✓\n"] * rng.randint(0, 2)
                if rng.random() < 0.5:
                    lines.append("a last line without a newline")
                (tmp_path / "log.txt").write_text("".join(lines), encoding="utf-8")
                lines = (tmp_path / "log.txt").read_text(encoding="utf-8").splitlines(keepends=True)
            called = await call_for_model(files, "read_text", {"name": "log.txt"}, references=refs)
            assert called.view is not None
            text = called.view.text()
            if called.view.kind == "changed":
                edits += 1
                assert '"edit":"result"' in text
                assert len(text) < 2000  # a few lines, not the 25 KB text
            _, held = model.read(text)
            assert held == {"result": "".join(lines)}
    assert edits >= 3


# -- honesty ------------------------------------------------------------------------------------------


def notebookish(cells: int = 60, source: str = "x = 1") -> dict[str, Any]:
    return {
        "kind": "notebook.read",
        "cells": [
            {"index": i, "source": source if i == 3 else f"print({i})", "outputs": ["o" * 80]} for i in range(cells)
        ],
    }


async def read(refs: References, answer: Any, tag: str | None, **source: Any) -> tuple[str, dict[str, Any]]:
    view = await refs.for_model(answer, server="s", tool="read", arguments=source or {"path": "a"}, tag=tag)
    return view.kind, json.loads(view.text())


async def test_unchanged_needs_the_same_tag(harness: Harness) -> None:
    refs = harness.refs(shown=ShownMemory())
    kind, _ = await read(refs, notebookish(), 'W/"v1"')
    assert kind == "full"
    kind, message = await read(refs, notebookish(), 'W/"v1"')
    assert kind == "unchanged"
    assert len(json.dumps(message, separators=(",", ":"))) <= 300
    # The same answer under another tag: never "unchanged"; a changed view saying nothing changed.
    kind, message = await read(refs, notebookish(), 'W/"v2"')
    assert kind == "changed"
    assert message["_changes"] == []
    # A server that keeps its tag but changes its answer is not believed: the bytes are compared too.
    kind, message = await read(refs, notebookish(source="y = 2"), 'W/"v2"')
    assert kind == "changed"
    assert message["_changes"] == [{"set": "cells[3].source", "to": "y = 2"}]


async def test_an_answer_with_no_tag_is_always_shown_whole(harness: Harness) -> None:
    refs = harness.refs(shown=ShownMemory())
    for _ in range(3):
        kind, message = await read(refs, notebookish(), None)
        assert kind == "full"
        assert len(message["cells"]) == 60
    # After an untagged read, a tagged one builds on nothing: the model's last copy was untagged.
    assert (await read(refs, notebookish(), 'W"x"'))[0] == "full"  # malformed: compared as the host's own label
    assert (await read(refs, notebookish(), 'W"x"'))[0] == "unchanged"
    assert (await read(refs, notebookish(), None))[0] == "full"
    assert (await read(refs, notebookish(), 'W"x"'))[0] == "full"


async def test_views_never_cross_conversations(harness: Harness) -> None:
    memory = ShownMemory()
    # Two ids whose URI segments are the same (a/b and a_b): only the exact id counts.
    alice = harness.refs("a/b", shown=memory)
    bob = alice.for_conversation("a_b")
    assert bob.shown is memory
    kind, first = await read(alice, notebookish(), 'W"1"')
    assert kind == "full"
    # Bob was never shown it: he gets it whole, under his own reference, not "unchanged since Alice's".
    kind, message = await read(bob, notebookish(), 'W"1"')
    assert kind == "full"
    assert message["_cache_uri"] != first["_cache_uri"]
    # Nor a diff against Alice's copy when it changes.
    await read(alice, notebookish(), 'W"1"')
    kind, message = await read(bob, notebookish(source="z"), 'W"2"')
    assert kind == "changed"
    assert first["_cache_uri"] not in json.dumps(message)
    # The same key in a third conversation sharing the store: first sight.
    carol = alice.for_conversation("carol")
    assert (await read(carol, notebookish(source="z"), 'W"2"'))[0] == "full"
    # Alice's memory of the old answer is hers alone: her next view is against her own copy.
    kind, message = await read(alice, notebookish(source="z"), 'W"2"')
    assert kind == "changed"
    assert first["_cache_uri"] in message["_changed"]


async def test_forgetting_and_bounds(harness: Harness) -> None:
    memory = ShownMemory(max_turns=3, max_age_s=600, clock=harness.clock)
    refs = harness.refs(shown=memory)
    assert (await read(refs, notebookish(), 'W"1"'))[0] == "full"
    assert (await read(refs, notebookish(), 'W"1"'))[0] == "unchanged"
    assert memory.forget(refs.conversation_id) == 1
    assert (await read(refs, notebookish(), 'W"1"'))[0] == "full"  # the conversation id reused after forgetting
    assert (await read(refs, notebookish(), 'W"1"'))[0] == "unchanged"
    assert memory.forget() == 1
    assert (await read(refs, notebookish(), 'W"1"'))[0] == "full"
    # Turns: counted from the full view (changed views build on it), every tool result counts.
    assert (await read(refs, notebookish(source="a"), 'W"2"'))[0] == "changed"
    assert (await read(refs, {"small": True}, None, path="other"))[0] == "full"
    assert (await read(refs, notebookish(source="a"), 'W"2"'))[0] == "unchanged"
    assert (await read(refs, notebookish(source="a"), 'W"2"'))[0] == "full"  # 4 turns after its full view
    # Time, on the host's clock.
    harness.clock.advance(601)
    assert (await read(refs, notebookish(source="a"), 'W"2"'))[0] == "full"
    assert (await read(refs, notebookish(source="a"), 'W"2"'))[0] == "unchanged"


async def test_remembering_is_off_by_default(harness: Harness) -> None:
    refs = harness.refs()
    assert refs.shown is None
    assert (await read(refs, notebookish(), 'W"1"'))[0] == "full"
    assert (await read(refs, notebookish(), 'W"1"'))[0] == "full"


# -- bad input ----------------------------------------------------------------------------------------


async def test_a_huge_change_is_shown_whole(harness: Harness) -> None:
    refs = harness.refs(shown=ShownMemory())
    await read(refs, notebookish(), 'W"1"')
    everything = notebookish()
    for cell in everything["cells"]:
        cell["outputs"] = ["p" * 80]
    kind, message = await read(refs, everything, 'W"2"')
    assert kind == "full"
    assert message["cells"][5]["outputs"] == ["p" * 80]
    # Many small changed views add up: past half of the full view, the model gets it whole again.
    kinds = []
    for step in range(40):
        answer = copy.deepcopy(everything)
        answer["cells"][step % 60]["outputs"] = [f"{step}" * 200]
        kinds.append((await read(refs, answer, f'W"s{step}"'))[0])
    assert "changed" in kinds
    assert kinds.count("full") >= 1


async def test_a_change_of_shape_is_shown_whole(harness: Harness) -> None:
    refs = harness.refs(shown=ShownMemory())
    rows = [{"i": i, "v": "x" * 60} for i in range(100)]
    assert (await read(refs, rows, 'W"1"'))[0] == "full"
    kind, message = await read(refs, {"rows": rows}, 'W"2"')  # list to object
    assert kind == "full"
    assert message["rows"] == rows
    kind, message = await read(refs, {"rows": rows, "result": 1}, 'W"3"')  # now shown under `result`
    assert kind == "full"
    kind, message = await read(refs, "text " * 2000, 'W"4"')  # object to text
    assert kind == "full"
    assert message["result"] == "text " * 2000


async def test_non_ascii_and_odd_member_names(harness: Harness, tmp_path: Path) -> None:
    refs = harness.refs(shown=ShownMemory())
    model = ScriptedModel()
    answer: dict[str, Any] = {
        "naïve key": {"a.b": ["x" * 100] * 40, "": "empty name", "3": "digit name", 'quo"te': "q"},
        "données": [{"nom": "café ☕", "🧪": i} for i in range(50)],
    }
    model.read((await refs.for_model(answer, server="s", tool="t", tag='W"0"')).text())
    for step in range(1, 8):
        answer = copy.deepcopy(answer)
        if step % 2:
            answer["naïve key"]["a.b"][step] = f"ünïcödé {step} 中文"
            answer["naïve key"][""] = f"still empty name {step}"
        else:
            answer["données"].insert(step, {"nom": "nouveau ✓", "🧪": -step})
            del answer["naïve key"]['quo"te']
            answer["naïve key"]['quo"te'] = step
        view = await refs.for_model(answer, server="s", tool="t", tag=f'W"{step}"')
        assert view.kind == "changed"
        _, held = model.read(view.text())
        assert held == whole_view(answer)


async def test_binary_blocks(harness: Harness) -> None:
    import base64

    import mcp_types as mt

    refs = harness.refs(shown=ShownMemory())
    model = ScriptedModel()

    def result(seed: int) -> mt.CallToolResult:
        image = base64.b64encode(bytes((seed + i) % 256 for i in range(6000))).decode()
        return mt.CallToolResult(
            content=[
                mt.TextContent(type="text", text="a chart"),
                mt.ImageContent(type="image", data=image, mime_type="image/png"),
            ],
            _meta={"io.modelcontextprotocol/cache": {"etag": f'W/"{seed}"'}},
        )

    kinds = []
    for seed in (1, 1, 2, 2):
        view = await refs.for_model(result(seed), server="s", tool="chart")
        kinds.append(view.kind)
        _, held = model.read(view.text())
        assert held == whole_view(payload_of(result(seed)).value)
    assert kinds == ["full", "unchanged", "full", "unchanged"]  # every byte of the image changed: whole


async def test_an_unusable_tag_or_result_never_raises(harness: Harness) -> None:
    refs = harness.refs(shown=ShownMemory())
    for tag in ("", "x" * 10_000, 'W/"ok"'):
        view = await refs.for_model(notebookish(), server="s", tool="t", tag=tag)
        assert view.kind == "full"
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    view = await refs.for_model(cyclic, server="s", tool="t", tag='W/"ok"')
    assert view.uri is None  # whole, as without a memory, and forgotten
    assert (await refs.for_model(notebookish(), server="s", tool="t", tag='W/"ok"')).kind == "full"
    # Arguments with no JSON form: not remembered, always whole.
    odd = {"x": object()}
    for _ in range(2):
        assert (await refs.for_model(notebookish(), server="s", tool="t", arguments=odd, tag='W/"ok"')).kind == "full"


async def test_a_view_names_only_references_that_resolve(harness: Harness) -> None:
    refs = harness.refs(shown=ShownMemory())
    await read(refs, notebookish(), 'W"1"')
    # The stored earlier result is gone (the host cleared the conversation's payloads): no view builds on it.
    await refs.clear_conversation()
    kind, message = await read(refs, notebookish(), 'W"1"')
    assert kind == "full"
    assert await refs.load(message["_cache_uri"]) == notebookish()
    await refs.clear_conversation()
    kind, message = await read(refs, notebookish(source="new"), 'W"2"')
    assert kind == "full"
    # A conversation cap so small that storing the new answer evicts the old one: whole again.
    tight = harness.refs("tight", shown=ShownMemory(), max_conversation_bytes=9000)
    kind, _ = await read(tight, notebookish(), 'W"1"')
    kind, message = await read(tight, notebookish(source="new"), 'W"2"')
    assert kind == "full"
    assert await tight.load(message["_cache_uri"]) == notebookish(source="new")


# -- at the same time -----------------------------------------------------------------------------------


class HeldStore(MemoryStore):
    """A real MemoryStore whose loads can be held at a gate, or made to fail, while a test acts meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: anyio.Event | None = None
        self.waiting = anyio.Event()
        self.failing = False

    async def load(self, key: str) -> Item | None:
        if self.failing:
            raise OSError("the store is down")
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        return await super().load(key)


@pytest.mark.parametrize("answer_changes", [False, True], ids=["unchanged", "changed"])
async def test_forgetting_while_a_view_is_made_makes_it_whole(answer_changes: bool) -> None:
    store = HeldStore()
    memory = ShownMemory()
    refs = References(store, conversation_id="c", shown=memory)
    await read(refs, notebookish(), 'W/"1"')
    store.gate = anyio.Event()
    views: list[str] = []

    async def reread() -> None:
        again = notebookish(source="changed") if answer_changes else notebookish()
        views.append((await read(refs, again, 'W/"2"' if answer_changes else 'W/"1"'))[0])

    async with anyio.create_task_group() as tg:
        tg.start_soon(reread)
        await store.waiting.wait()  # the view is being made: the earlier answer is being read back
        memory.forget("c")  # the host compacted the conversation meanwhile
        store.gate.set()
    assert views == ["full"]
    assert (await read(refs, notebookish(source="changed") if answer_changes else notebookish(), None))[0] == "full"


async def test_concurrent_rereads_in_one_conversation_stay_consistent(harness: Harness) -> None:
    refs = harness.refs(shown=ShownMemory())
    model = ScriptedModel()
    answers = {f"v{n}": notebookish(source=f"version {n}") for n in range(3)}
    model.read((await refs.for_model(answers["v0"], server="s", tool="read", tag='W/"v0"')).text())
    shown: list[tuple[str, str]] = []  # (tag, tool message) in the order the views were made

    async def call(tag: str) -> None:
        view = await refs.for_model(answers[tag], server="s", tool="read", tag=f'W/"{tag}"')
        shown.append((tag, view.text()))

    for wave in range(4):
        async with anyio.create_task_group() as tg:
            for n in range(6):
                tg.start_soon(call, f"v{(wave + n) % 3}")
    assert len(shown) == 24
    for tag, message in shown:  # the host puts each tool message in the context as its call returns
        _, held = model.read(message)
        assert held == whole_view(answers[tag])


async def test_a_failing_store_gives_the_whole_answer_not_an_exception() -> None:
    store = HeldStore()
    memory = ShownMemory()
    refs = References(store, conversation_id="c", shown=memory)
    await read(refs, notebookish(), 'W/"1"')
    store.failing = True  # reading the earlier answer back fails: no unchanged view can be vouched for
    kind, message = await read(refs, notebookish(), 'W/"1"')
    assert kind == "full"
    assert message["cells"] == notebookish()["cells"]
    kind, message = await read(refs, notebookish(source="b"), 'W/"2"')
    assert kind == "full"
    store.failing = False
    assert (await read(refs, notebookish(source="b"), 'W/"2"'))[0] == "unchanged"


# -- the benchmark and the proxy --------------------------------------------------------------------------


@pytest.mark.slow
async def test_the_rereads_benchmark_meets_the_issues_bar() -> None:
    from mcpcache.bench.rereads import run

    figures = await run()
    assert figures["reads"] >= 10
    assert figures["edits"] >= 2
    assert 90_000 <= figures["notebook_bytes"] <= 110_000
    assert figures["edits_seen"] is True
    assert figures["views_match"] is True
    assert figures["mcpcache_tokens"] <= 0.15 * figures["naive_tokens"]
    assert figures["views"] == {
        "full": 1,
        "changed": figures["edits"],
        "unchanged": figures["reads"] - 1 - figures["edits"],
    }


def test_the_proxy_flag_turns_the_memory_on(tmp_path: Path) -> None:
    from mcpcache.proxy.server import references_for
    from mcpcache.proxy.settings import ProxySettings, RefsSettings, StdioUpstream

    store = MemoryStore()
    upstream = StdioUpstream("true", ())
    off = references_for(ProxySettings(upstream, refs=RefsSettings("c")), store)
    assert off is not None
    assert off.shown is None
    on = references_for(ProxySettings(upstream, refs=RefsSettings("c", remember_turns=20)), store)
    assert on is not None
    assert on.shown is not None
    assert on.shown.max_turns == 20


def test_the_proxy_flag_needs_references() -> None:
    from typer.testing import CliRunner

    from mcpcache.cli.app import app

    result = CliRunner().invoke(app, ["proxy", "--remember-shown", "5", "--", "true"])
    assert result.exit_code == 2
    assert "--remember-shown needs --refs" in result.output


@pytest.mark.parametrize("tool", ["read", "t" * 1000, '"' * 200, "ü" * 300, "a\nb\x00c"])
async def test_an_unchanged_view_is_at_most_300_characters(harness: Harness, tool: str) -> None:
    refs = harness.refs("c" * 100, shown=ShownMemory())  # a 64-character segment in every URI
    for kind in ("full", "unchanged"):
        view = await refs.for_model(notebookish(), server="s", tool=tool, tag='W/"1"')
        assert view.kind == kind
    assert len(view.text()) <= 300
    assert view.envelope["_cache_uri"] == str(view.since)
