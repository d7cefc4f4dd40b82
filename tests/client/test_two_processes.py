"""Two OS processes of one user share a real SQLite file or a real Redis namespace, on real clocks.

A versioned-documents server (tests/client/versioned.py) runs in its own process over streamable HTTP on
127.0.0.1 (one for the module; each test reads and edits documents named after its own store namespace)
and logs every change and every answer. For each store, two worker processes (tests/client/versioned_worker.py,
one wrapping a `fastmcp.Client`, one an `mcp.Client`) each hold a `ToolCache` of partition alice on the
shared store and call concurrently for a few seconds with a 200 ms ttl: reads (some refreshing, some
answered late on purpose so answers land out of order), edits through the cache, and edits on the stock
client around the cache (behind every cache's back). Each logs what every call returned and
when (`time.time()`, the clock the caches and the server read too).

The model, checked across both logs and the server's: a read returning version v is correct if
- its own request was answered with v, or v was the server's version at some moment while the call was
  open (within 50 ms: the server's and the worker's clock readings are taken in different processes), or
- an answer of v returned (to the call whose request it answered) at most ttl before the read was sent,
  plus 50 ms when that call was in the other process, and no edit by this process changed the server
  after that answer read v and returned before the read was sent (read-your-writes: no tolerance). An
  edit by the other process, or around the cache, is behind this process's back: it may be missed until
  the ttl runs out.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mcpcache.processes import free_port, stop_process, wait_until_listening

from .versioned import text_of

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
SERVE = HERE / "versioned_serve.py"
WORKER = HERE / "versioned_worker.py"
TTL_MS = 200
TTL_S = TTL_MS / 1000
SLACK_S = 0.05
SECONDS = 5.0
WORKERS = (("one", "fastmcp"), ("two", "mcp"))


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Served:
    """The server process, started once for the module; the first test to need it waits for it."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def url(self) -> str:
        wait_until_listening(self.process, self.port, 120.0, "the versioned server")
        return f"http://127.0.0.1:{self.port}/mcp"

    def entries(self, namespace: str) -> list[dict[str, Any]]:
        """What the server logged about one test's documents (each test names its own)."""
        return [entry for entry in read_lines(self.log) if entry["doc"].startswith(f"{namespace}-")]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    log = tmp_path_factory.mktemp("versioned") / "server.jsonl"
    port = free_port()
    command = [sys.executable, str(SERVE), str(log), str(TTL_MS), str(port)]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        yield Served(process, port, log)
    finally:
        stop_process(process)


@dataclass
class Layout:
    """One store shared by a pair of workers: a SQLite file or a Redis namespace."""

    kind: str
    location: str
    namespace: str
    folder: Path
    """Where its workers write their logs."""
    processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)


@contextlib.contextmanager
def started(layouts: list[Layout]) -> Iterator[list[Layout]]:
    """Every layout's two workers, started (they import while the server starts); stopped by PID at the end."""
    try:
        for layout in layouts:
            layout.folder.mkdir()
            for seed, (name, client_kind) in enumerate(WORKERS):
                command = [sys.executable, str(WORKER), layout.kind, layout.location, layout.namespace, name]
                command += [client_kind, str(SECONDS), str(seed), str(layout.folder / f"{name}.jsonl")]
                layout.processes[name] = subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
        yield layouts
    finally:
        for layout in layouts:
            for process in layout.processes.values():
                stop_process(process)  # type: ignore[arg-type]


def tell(process: subprocess.Popen[str], line: str) -> None:
    assert process.stdin is not None
    process.stdin.write(line + "\n")
    process.stdin.flush()


def run(layouts: list[Layout], url: str) -> dict[str, dict[str, Any]]:
    """Give every worker the server, let them connect, start them all together; per layout, each worker's
    log and summary."""
    every = [(f"{layout.kind}/{name}", process) for layout in layouts for name, process in layout.processes.items()]
    for _, process in every:
        tell(process, url)
    for who, process in every:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            stop_process(process)  # type: ignore[arg-type]
            raise AssertionError(f"worker {who} did not start: {process.communicate()[1]}")
    for _, process in every:
        tell(process, "go")
    summaries: dict[str, Any] = {}
    for who, process in every:
        stdout, stderr = process.communicate(timeout=SECONDS + 60)
        assert process.returncode == 0, f"worker {who} failed:\n{stderr}"
        summaries[who] = json.loads(stdout.strip().splitlines()[-1])
    return {
        layout.kind: {
            "logs": {name: read_lines(layout.folder / f"{name}.jsonl") for name in layout.processes},
            "summaries": {name: summaries[f"{layout.kind}/{name}"] for name in layout.processes},
        }
        for layout in layouts
    }


def judge(calls: dict[str, list[dict[str, Any]]], server: list[dict[str, Any]]) -> list[str]:
    """Why each wrong read is wrong (empty: every read is correct under the model)."""
    changes = [entry for entry in server if entry["event"] == "change"]
    answers = [entry for entry in server if entry["event"] == "answer"]
    held_from: dict[tuple[str, int], float] = {}
    held_until: dict[tuple[str, int], float] = {}
    for change in changes:
        held_from[(change["doc"], change["version"])] = change["at"]
        held_until[(change["doc"], change["version"] - 1)] = change["at"]
    changed_by = {change["rid"]: change["seq"] for change in changes if change["rid"] is not None}
    returned = {call["rid"]: (name, call["returned"]) for name, log in calls.items() for call in log}
    answered: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for answer in answers:
        answered.setdefault((answer["doc"], answer["version"]), []).append(answer)
    own_answers: dict[str, set[int]] = {}
    for answer in answers:
        own_answers.setdefault(answer["rid"], set()).add(answer["version"])

    wrong: list[str] = []
    for name, log in calls.items():
        edits = [call for call in log if call["kind"] == "edit"]
        for read in (call for call in log if call["kind"] == "read"):
            why = content_problem(read)
            version = read["version"]
            if why is None and version not in own_answers.get(read["rid"], set()):
                start = held_from.get((read["doc"], version), -math.inf)
                until = held_until.get((read["doc"], version), math.inf)
                current = start <= read["returned"] + SLACK_S and until > read["sent"] - SLACK_S
                if not current and not still_fresh(name, read, answered, returned, edits, changed_by):
                    why = f"v{version} was not current during the call, and no answer of it was still fresh"
            if why is not None:
                wrong.append(f"{name} {read['rid']} {read['mode']} {read['doc']} ({read['status']}): {why}")
    return wrong


def content_problem(read: dict[str, Any]) -> str | None:
    if read["is_error"]:
        return f"error result: {read['texts']}"
    version = read["version"]
    if (read["answered_doc"], read["who"]) != (read["doc"], "alice") or not isinstance(version, int):
        return f"answer for another call or partition: {read}"
    if (read["meta_version"], read["meta_who"]) != (version, "alice"):
        return f"_meta (version {read['meta_version']}) does not belong to the content (version {version})"
    if read["texts"] != [text_of(read["doc"], version, "alice")]:
        return f"content {read['texts']} does not belong to version {version}"
    return None


def still_fresh(
    name: str,
    read: dict[str, Any],
    answered: dict[tuple[str, int], list[dict[str, Any]]],
    returned: dict[str, tuple[str, float]],
    edits: list[dict[str, Any]],
    changed_by: dict[str, int],
) -> bool:
    """Whether some answer of the read's version was still fresh for this process when the read was sent."""
    before = [edit["rid"] for edit in edits if edit["returned"] < read["sent"]]
    own_changes = [changed_by[rid] for rid in before if rid in changed_by]
    for answer in answered.get((read["doc"], read["version"]), []):
        if answer["who"] != "alice" or answer["rid"] not in returned:
            continue
        caller, at = returned[answer["rid"]]
        slack = 0.0 if caller == name else SLACK_S
        if read["sent"] >= at + TTL_S + slack:
            continue  # expired before this read was sent
        if any(seq > answer["seq"] for seq in own_changes):
            continue  # this process changed the server after that answer, and knew it before reading
        return True
    return False


def check(layout: Layout, ran: dict[str, Any], server: list[dict[str, Any]], seconds: float) -> list[str]:
    """Report one layout's run; what is wrong with it (empty: nothing)."""
    calls, summaries = ran["logs"], ran["summaries"]
    wrong = judge(calls, server)
    reads = [call for log in calls.values() for call in log if call["kind"] == "read"]
    edits = [call for log in calls.values() for call in log if call["kind"] in ("edit", "behind")]
    outcomes = Counter("coalesced" if read["coalesced"] else read["status"] for read in reads)
    print(
        f"\n[two processes / {layout.kind}] operations={len(reads) + len(edits)} "
        f"per_worker={ {name: len(log) for name, log in calls.items()} } reads={len(reads)} "
        f"edits_through_caches={sum(1 for e in edits if e['kind'] == 'edit')} "
        f"edits_behind={sum(1 for e in edits if e['kind'] == 'behind')} "
        f"server_answers={sum(1 for e in server if e['event'] == 'answer')} outcomes={dict(outcomes)} "
        f"store_failures={[s['store_failures'] for s in summaries.values()]} wrong_reads={len(wrong)} "
        f"seconds={seconds:.1f}"
    )
    problems = [f"wrong read: {line}" for line in wrong]
    for line in problems[:20]:
        print("  WRONG", line)
    problems += [f"failed edit: {edit}" for edit in edits if edit["is_error"]]
    # The run exercised what it is about: hits, revalidations, and both kinds of edit from both processes.
    if not (outcomes["fresh_hit"] and outcomes["revalidated"]):
        problems.append(f"no fresh hit or no revalidation: {dict(outcomes)}")
    for kind_of_edit in ("edit", "behind"):
        if not all(any(call["kind"] == kind_of_edit for call in log) for log in calls.values()):
            problems.append(f"a worker made no {kind_of_edit!r} edit")
    return problems


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_two_processes_on_one_store_serve_only_what_the_model_allows(
    kind: str, served: Served, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    location = str(tmp_path / "shared.db") if kind == "sqlite" else request.getfixturevalue("redis_url")
    layout = Layout(kind, location, f"two-{kind}-{uuid.uuid4().hex[:8]}", tmp_path / kind)
    began = time.monotonic()
    with started([layout]):
        ran = run([layout], served.url())
    assert check(layout, ran[kind], served.entries(layout.namespace), time.monotonic() - began) == []
