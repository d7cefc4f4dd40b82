"""The client half of the suite, as data: scripts the scripted server plays, and the scenarios judged on
what the client sent and what it reported serving.

A script is a key (the `read` tool's argument) and a list of steps. In each step the client under test
makes one call, `read({"key": <key>})`, as the partition the step names, and then reports what its
caller got (the `report` tool). The scripted server answers the step's requests with the step's planned
replies in order (the last one repeats), records whether each request carried a tag and which, and
attributes requests to the step that is open for that key: the one after the last reported. A step
without any request is one the client served from its cache. Nothing here does I/O; the server is
`mcpcache.check.scripted`, a reference driver `mcpcache.check.drive`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpcache.check.core import (
    BLOCK,
    CALL,
    DELTA_CLIENT,
    KEY_CLIENT,
    PARTITIONS,
    STALE_CLIENT,
    UNMATCHED,
    Judged,
    Kind,
    Rule,
    Scenario,
)
from mcpcache.check.wire import claims_not_modified, short
from mcpcache.delta import FORMAT, diff
from mcpcache.etag import answer_digest, content_tag
from mcpcache.protocol import DELTA_KEY, META_KEY, STALE_IF_ERROR_KEY, parse_etag, weak_equal

TOOL = "read"
WRITE_TOOL = "write"
"""A tool with no annotations whose answer carries no cache block: a call to it is a write to a client."""
KEYED_TOOL = "read_keyed"
"""A document tool whose tools/list declaration names its key arguments malformedly (both fields)."""
NONCE = "nonce"
KIND = "check.doc"
EDITION_KEY = "io.github.mcpcache/check.edition"
"""A `_meta` key of the answers: a client that serves its stored copy after not-modified keeps it."""
FOREIGN_TAG = 'W/"mcpcache-check-a-tag-the-client-never-held"'

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "key": {"type": "string"}, "text": {"type": "string"}},
    "required": ["kind"],
}
"""Only `kind` is required, so a not-modified stub passes a stock client's schema check: whether a client
serves one is up to the client, not caught by its SDK."""

TagChoice = Literal["own", "foreign", "none", "malformed"]
ReplyKind = Literal["full", "not-modified", "error", "delta", "corrupt-delta", "forced-delta", "jsonrpc-error", "ack"]
DELTA_KINDS: tuple[ReplyKind, ...] = ("delta", "corrupt-delta", "forced-delta")
CORRUPTION = " (a corrupt delta made this text)"
"""What the ops of a corrupt delta add to the new edition's text; its digest names the true edition."""


@dataclass(frozen=True)
class Reply:
    """What the scripted server answers to one request.

    The delta kinds (docs/protocol.md section 11) are a delta reply from edition `base` to `edition`, in
    format json-patch+splice/1: "delta" an honest one; "corrupt-delta" ops that make another text than the
    one the digest names (a client that skips the digest check serves it); both only to a request that
    accepts the format, every other request getting `edition`'s full answer as an honest server would send.
    "forced-delta" is an honest delta sent whatever the request asked for (unasked)."""

    kind: ReplyKind = "full"
    edition: int = 1
    """Which edition of the document a full answer (and a not-modified reply's own tag) is about."""
    ttl_ms: object = 0
    scope: object = "private"
    tag: TagChoice = "own"
    """The tag in the block: the edition's own, one the client never held, none, or a malformed one."""
    marked_error: bool = False
    """A not-modified reply that also says isError."""
    base: int = 1
    """The edition a delta reply's ops start from (its base is that edition's tag)."""
    stale_if_error_ms: int | None = None
    """A full answer's `staleIfErrorMs` (docs/seps/stale-serving.md); None: no window."""


@dataclass(frozen=True)
class Step:
    replies: tuple[Reply, ...]
    partition: str = "a"
    tool: str = TOOL
    extra: tuple[tuple[str, object], ...] = ()
    """Arguments of the call beside `key`."""

    def arguments(self, key: str) -> dict[str, object]:
        return {"key": key, **dict(self.extra)}


@dataclass(frozen=True)
class Script:
    key: str
    steps: tuple[Step, ...]


# -- the answers the server sends (pure, so the judges can rebuild them) ---------------------------


def document(key: str, edition: int, partition: str) -> dict[str, Any]:
    return {"kind": KIND, "key": key, "text": f"{key}: edition {edition}, for partition {partition}"}


def full_parts(key: str, edition: int, partition: str) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """(content, structuredContent, _meta without the block) of a full answer."""
    structured = document(key, edition, partition)
    content = [{"type": "text", "text": structured["text"]}]
    return content, structured, {EDITION_KEY: edition}


def own_tag(key: str, edition: int, partition: str, meta_key: str = META_KEY) -> str:
    content, structured, meta = full_parts(key, edition, partition)
    return content_tag(content, structured, meta, meta_key=meta_key)


def delta_document(key: str, edition: int, partition: str, *, corrupt: bool = False) -> dict[str, Any]:
    """The document a delta's ops point into (`mcpcache.delta`) of an edition's full answer."""
    content, structured, meta = full_parts(key, edition, partition)
    if corrupt:
        structured = {**structured, "text": structured["text"] + CORRUPTION}
        content = [{"type": "text", "text": structured["text"]}]
    return {"content": content, "structuredContent": structured, "_meta": meta}


def delta_block(key: str, partition: str, reply: Reply, meta_key: str = META_KEY) -> dict[str, Any]:
    """The `delta` field of a delta reply (base, format, ops, digest of the new edition's full answer)."""
    target = delta_document(key, reply.edition, partition, corrupt=reply.kind == "corrupt-delta")
    ops = diff(delta_document(key, reply.base, partition), target, max_bytes=1 << 20)
    content, structured, meta = full_parts(key, reply.edition, partition)
    return {
        "base": own_tag(key, reply.base, partition, meta_key),
        "format": FORMAT,
        "ops": ops,
        "digest": answer_digest(content, structured, meta, meta_key=meta_key),
    }


def planned_result(
    key: str, partition: str, reply: Reply, meta_key: str = META_KEY, *, accepts_delta: bool = True
) -> dict[str, Any]:
    """The result JSON the scripted server sends for `reply` (without the envelope the SDK adds).
    `accepts_delta`: whether the request listed json-patch+splice/1 under `acceptDelta` (a "delta" or
    "corrupt-delta" reply is then sent as planned; otherwise the full answer goes)."""
    tags: dict[TagChoice, object] = {
        "own": own_tag(key, reply.edition, partition, meta_key),
        "foreign": FOREIGN_TAG,
        "none": None,
        "malformed": "not a tag",
    }
    if reply.kind == "ack":
        return {"content": [{"type": "text", "text": f"{key}: written"}], "isError": False}
    block: dict[str, Any] = {"ttlMs": reply.ttl_ms, "cacheScope": reply.scope}
    if tags[reply.tag] is not None:
        block["etag"] = tags[reply.tag]
    if reply.stale_if_error_ms is not None:
        block[STALE_IF_ERROR_KEY] = reply.stale_if_error_ms
    if reply.kind == "error":
        text = f"{key}: refused (an error that carries a cache block)"
        return {"content": [{"type": "text", "text": text}], "isError": True, "_meta": {meta_key: block}}
    if reply.kind in DELTA_KINDS and (accepts_delta or reply.kind == "forced-delta"):
        block[DELTA_KEY] = delta_block(key, partition, reply, meta_key)
        return {"content": [], "structuredContent": {"kind": KIND}, "isError": False, "_meta": {meta_key: block}}
    if reply.kind == "not-modified":
        block["notModified"] = True
        return {
            "content": [],
            "structuredContent": {"kind": KIND},
            "isError": reply.marked_error,
            "_meta": {meta_key: block},
        }
    content, structured, meta = full_parts(key, reply.edition, partition)
    return {"content": content, "structuredContent": structured, "isError": False, "_meta": {**meta, meta_key: block}}


# -- what the server records ------------------------------------------------------------------------


@dataclass
class StepRecord:
    """One step as the scripted server saw it."""

    sent_tags: list[object] = field(default_factory=list)
    """Per request of this step: the etag the request's block carried (None: no tag sent)."""
    accepted: list[bool] = field(default_factory=list)
    """Per request of this step: whether it listed json-patch+splice/1 under `acceptDelta`."""
    replies: list[Reply] = field(default_factory=list)
    reported: bool = False
    served: Mapping[str, Any] | None = None
    error: str | None = None
    skipped: bool = False


@dataclass(frozen=True)
class ScriptRecord:
    script: Script
    steps: Sequence[StepRecord]
    meta_key: str = META_KEY

    def step(self, index: int) -> StepRecord:
        return self.steps[index]

    def tag(self, edition: int, partition: str = "a") -> str:
        return own_tag(self.script.key, edition, partition, self.meta_key)


# -- judges ----------------------------------------------------------------------------------------


def _not_reported(record: ScriptRecord, *steps: int) -> Judged | None:
    for index in steps:
        step = record.step(index)
        if step.skipped:
            partition = record.script.steps[index].partition
            return Judged.untried(
                f"the driver skipped step {index + 1} (partition {partition})",
                f"a driver that plays every step, partition {partition} included",
            )
        if not step.reported:
            return Judged.untried(
                f"step {index + 1} was never reported (the client disconnected first?)",
                "a client that stays connected until every step is reported",
            )
    return None


def _served_problem(record: ScriptRecord, index: int, edition: int, partition: str = "a") -> str | None:
    """Why what step `index` served is not the full answer of `edition` for `partition` (None: it is)."""
    step = record.step(index)
    if step.error is not None:
        return f"step {index + 1}: the call raised: {short(step.error, 80)}"
    served = step.served or {}
    served_block = (served.get("_meta") or {}).get(record.meta_key)
    if isinstance(served_block, Mapping) and DELTA_KEY in served_block:
        return f"step {index + 1}: served the delta reply's stub as the answer"
    if claims_not_modified(served, record.meta_key) or served.get("content") == []:
        return f"step {index + 1}: served the not-modified stub as the answer"
    if served.get("isError") is True:
        return f"step {index + 1}: served an error ({short(served.get('content'), 60)})"
    content, structured, meta = full_parts(record.script.key, edition, partition)
    if served.get("structuredContent") != structured or served.get("content") != content:
        got = served.get("structuredContent")
        text = got.get("text") if isinstance(got, Mapping) else got
        if isinstance(text, str) and text.endswith(CORRUPTION):
            return f"step {index + 1}: served what a corrupt delta made (its digest was not checked)"
        return f"step {index + 1}: served {short(text, 70)}, not edition {edition} for partition {partition}"
    served_meta = served.get("_meta") if isinstance(served.get("_meta"), Mapping) else {}
    if served_meta.get(EDITION_KEY) != meta[EDITION_KEY]:  # type: ignore[union-attr]
        return f"step {index + 1}: served the answer without its own _meta key {EDITION_KEY}"
    return None


def _requests(record: ScriptRecord, index: int) -> list[object]:
    return record.step(index).sent_tags


def _tag_words(tag: object) -> str:
    return "no tag" if tag is None else f"tag {short(tag, 60)}"


def judge_sends_tag(record: ScriptRecord) -> Judged:
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    expected = record.tag(1)
    sent = _requests(record, 1)
    if not sent:
        return Judged.broken("step 2 sent no request: a ttlMs 0 answer was served without revalidating")
    if weak_equal(sent[0], expected):
        return Judged.ok(f"sent {expected} back")
    return Judged.broken(f"sent {_tag_words(sent[0])}, not the tag it held ({expected})")


def judge_serves_copy(record: ScriptRecord) -> Judged:
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    sent = _requests(record, 1)
    if not sent or not weak_equal(sent[0], record.tag(1)):
        return Judged.not_applicable("the client did not revalidate with its tag (see sends-tag)")
    if len(sent) > 1:
        return Judged.broken("asked again after a matching not-modified reply (the stored copy was not served)")
    problem = _served_problem(record, 1, edition=1)
    served_block = ((record.step(1).served or {}).get("_meta") or {}).get(record.meta_key)
    if problem is None and isinstance(served_block, Mapping) and served_block.get("notModified") not in (None, False):
        problem = "step 2: the served copy still says notModified"
    return Judged.broken(problem) if problem else Judged.ok("served its stored copy, its own _meta kept")


def judge_replaces(record: ScriptRecord) -> Judged:
    if (skip := _not_reported(record, 0, 1, 2, 3)) is not None:
        return skip
    problems = []
    if (problem := _served_problem(record, 2, edition=2)) is not None:
        problems.append(problem)
    sent = _requests(record, 3)
    if not sent:
        problems.append("step 4 sent no request")
    elif not weak_equal(sent[0], record.tag(2)):
        problems.append(f"step 4 sent {_tag_words(sent[0])}, not the new answer's tag {record.tag(2)}")
    elif (problem := _served_problem(record, 3, edition=2)) is not None:
        problems.append(problem)
    return (
        Judged.broken("; ".join(problems))
        if problems
        else Judged.ok("the changed answer replaced the entry; its tag was sent next")
    )


def judge_unmatched(record: ScriptRecord) -> Judged:
    """The last step's first reply was a not-modified the client cannot match; its later replies are the
    full answer of the script's last edition."""
    last = len(record.steps) - 1
    if (skip := _not_reported(record, *range(len(record.steps)))) is not None:
        return skip
    edition = record.script.steps[last].replies[-1].edition
    sent = _requests(record, last)
    if not sent:
        return Judged.not_applicable("no request in the step: the client served its copy without asking")
    problem = _served_problem(record, last, edition=edition)
    if problem is not None:
        return Judged.broken(problem)
    if len(sent) < 2:
        return Judged.broken("served the full answer without asking again? (one request only)")
    if sent[-1] is not None:
        return Judged.broken(f"the repeat still carried {_tag_words(sent[-1])}")
    return Judged.ok(f"not served; asked again without a tag ({len(sent)} requests) and served the full answer")


def judge_corrupt_delta(record: ScriptRecord) -> Judged:
    """Step 2's first reply is a corrupt delta (when the request accepted deltas), its later ones edition 2."""
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    step = record.step(1)
    if not step.accepted or not step.accepted[0]:
        return Judged.not_applicable("the client does not accept json-patch+splice/1 deltas: it got the full answer")
    problem = _served_problem(record, 1, edition=2)
    if problem is not None:
        return Judged.broken(problem)
    if len(step.sent_tags) < 2:
        return Judged.broken("served edition 2 after one request, though the only reply was a corrupt delta?")
    if step.sent_tags[-1] is not None or step.accepted[-1]:
        return Judged.broken("the repeat still carried a tag or acceptDelta")
    return Judged.ok("the corrupt delta was not served: asked again without a tag and served edition 2")


def judge_delta_applied(record: ScriptRecord) -> Judged:
    """Step 2's reply is an honest delta from edition 1 to 2 (when the request accepted deltas)."""
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    step = record.step(1)
    if not step.accepted or not step.accepted[0]:
        return Judged.not_applicable("the client does not accept json-patch+splice/1 deltas: it got the full answer")
    if not weak_equal(step.sent_tags[0], record.tag(1)):
        return Judged.broken(f"accepted deltas but sent {_tag_words(step.sent_tags[0])}, not edition 1's tag")
    problem = _served_problem(record, 1, edition=2)
    if problem is not None:
        return Judged.broken(problem)
    if len(step.sent_tags) > 1:
        return Judged.broken("asked again in full after an honest delta against the answer it held")
    return Judged.ok("patched its copy of edition 1 into edition 2, after one request")


def judge_error_not_stored(record: ScriptRecord) -> Judged:
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    sent = _requests(record, 1)
    if not sent:
        return Judged.broken("step 2 sent no request: the error (with a cache block) was served from the cache")
    if sent[0] is not None:
        return Judged.broken(f"step 2 sent {_tag_words(sent[0])}: the error's tag was kept")
    problem = _served_problem(record, 1, edition=1)
    return Judged.broken(problem) if problem else Judged.ok("the error was not stored; the next call went out untagged")


def judge_fresh(record: ScriptRecord) -> Judged:
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    sent = _requests(record, 1)
    problem = _served_problem(record, 1, edition=1)
    if problem is not None:
        return Judged.broken(problem)
    if sent:
        return Judged.broken(f"asked again within ttlMs ({_tag_words(sent[0])})")
    return Judged.ok("served within ttlMs without a request")


def judge_partitions(record: ScriptRecord) -> Judged:
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    other = record.script.steps[1].partition
    sent = _requests(record, 1)
    problem = _served_problem(record, 1, edition=1, partition=other)
    if not sent:
        return Judged.broken(
            f"partition {other} was served partition {record.script.steps[0].partition}'s answer from the cache"
        )
    if problem is not None:
        return Judged.broken(problem)
    if sent[0] is not None:
        return Judged.broken(f"partition {other} sent {_tag_words(sent[0])}, another partition's tag")
    return Judged.ok(f"partition {other} asked for and got its own answer")


def judge_tolerant(record: ScriptRecord) -> Judged:
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    problems = [p for p in (_served_problem(record, 0, 1), _served_problem(record, 1, 1)) if p is not None]
    for tag in _requests(record, 1):
        if tag is not None and parse_etag(tag) is None:
            problems.append(f"sent the malformed tag {short(tag)} back")
    return (
        Judged.broken("; ".join(problems))
        if problems
        else Judged.ok("the answer was served; nothing malformed was sent back")
    )


def judge_stale_if_error(record: ScriptRecord) -> Judged:
    """Step 2 revalidates an answer granted a stale-if-error window and gets a JSON-RPC error."""
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    if not _requests(record, 1):
        return Judged.broken("step 2 sent no request: a ttlMs 0 answer was served without revalidating")
    problem = _served_problem(record, 1, edition=1)
    if problem is None:
        return Judged.ok("the server failed with a JSON-RPC error; the stored answer was served within its window")
    return Judged.broken(f"{problem} (a client MAY serve the stored answer within staleIfErrorMs)")


def judge_stale_after_write(record: ScriptRecord) -> Judged:
    """Step 2 is a write through the client; step 3's revalidation gets a JSON-RPC error."""
    if (skip := _not_reported(record, 0, 1, 2)) is not None:
        return skip
    if not _requests(record, 1):
        return Judged.broken("the write in step 2 never reached the server")
    step = record.step(2)
    if not step.sent_tags:
        return Judged.broken("step 3 sent no request after the write: the entry was served as if fresh")
    if step.error is not None:
        return Judged.ok("after the write, the server's failure reached the caller; nothing stale was served")
    served = step.served or {}
    if served.get("isError") is True:
        return Judged.ok("after the write, the caller got an error; nothing stale was served")
    if _served_problem(record, 2, edition=1) is None:
        return Judged.broken(
            "served the answer stored before the write in place of the failure: a caller must read its writes"
        )
    return Judged.broken(f"step 3 served something else: {short(served, 80)}")


def judge_key_malformed(record: ScriptRecord) -> Judged:
    """Steps 1 and 2 differ only in the `nonce` argument of a tool whose key-arguments declaration is
    malformed; the first answer is fresh for ten minutes."""
    if (skip := _not_reported(record, 0, 1)) is not None:
        return skip
    if not _requests(record, 1):
        return Judged.broken(
            f"step 2 ({NONCE} 2) was served step 1's answer ({NONCE} 1) without a request: a malformed declaration "
            "must leave the client keying on every argument"
        )
    problem = _served_problem(record, 1, edition=1)
    return Judged.broken(problem) if problem else Judged.ok("keyed on every argument: the second call went out")


# -- the scripts and the scenarios -----------------------------------------------------------------

FULL = Reply()
NOT_MODIFIED = Reply(kind="not-modified")
EDITION_2 = Reply(edition=2)

REVALIDATE = Script(
    "revalidate",
    (
        Step((FULL,)),
        Step((NOT_MODIFIED,)),
        Step((Reply(edition=2),)),
        Step((Reply(kind="not-modified", edition=2),)),
    ),
)


def _unmatched(key: str, first: Reply, *, stored: bool = True) -> Script:
    steps = (Step((FULL,)),) if stored else ()
    return Script(key, (*steps, Step((first, Reply(edition=2 if stored else 1)))))


@dataclass(frozen=True)
class ClientScenario:
    """A scenario of the client check: a script and the judge of its record."""

    scenario: Scenario[ScriptRecord]
    script: Script


def _scenario(
    id: str,
    title: str,
    rule: Rule,
    kind: Kind,
    script: Script,
    judge: Callable[[ScriptRecord], Judged],
    expects: str,
) -> ClientScenario:
    return ClientScenario(Scenario(id, title, rule, kind, judge, expects=expects), script)


CLIENT_SCENARIOS: tuple[ClientScenario, ...] = (
    _scenario(
        "sends-tag",
        "A stale answer is revalidated with its tag",
        CALL,
        "required",
        REVALIDATE,
        judge_sends_tag,
        expects="step 2's request carries, in `_meta[\"io.modelcontextprotocol/cache\"].etag`, the tag of step 1's "
        "answer (`ttlMs` 0: stale at once)",
    ),
    _scenario(
        "serves-copy",
        "Not-modified serves the stored copy",
        CALL,
        "required",
        REVALIDATE,
        judge_serves_copy,
        expects="step 2's caller gets step 1's full answer, its own `_meta` keys kept and no `notModified`, after one "
        "request",
    ),
    _scenario(
        "replaces",
        "A changed answer replaces the entry",
        CALL,
        "required",
        REVALIDATE,
        judge_replaces,
        expects="step 3's caller gets edition 2; step 4's request carries edition 2's tag, and its caller gets "
        "edition 2",
    ),
    _scenario(
        "unmatched-tag",
        "A not-modified naming another tag is never served",
        UNMATCHED,
        "required",
        _unmatched("unmatched-tag", Reply(kind="not-modified", tag="foreign")),
        judge_unmatched,
        expects="the not-modified reply naming a tag the client never held is not served: the client asks again "
        "without a tag and its caller gets edition 2",
    ),
    _scenario(
        "unmatched-untagged",
        "A not-modified naming no tag is never served",
        UNMATCHED,
        "required",
        _unmatched("unmatched-untagged", Reply(kind="not-modified", tag="none")),
        judge_unmatched,
        expects="the not-modified reply with no tag is not served: the client asks again without a tag and its caller "
        "gets edition 2",
    ),
    _scenario(
        "unmatched-error",
        "A not-modified marked as an error is never served",
        UNMATCHED,
        "required",
        _unmatched("unmatched-error", Reply(kind="not-modified", marked_error=True)),
        judge_unmatched,
        expects="the not-modified reply marked `isError` is not served: the client asks again without a tag and its "
        "caller gets edition 2",
    ),
    _scenario(
        "unmatched-no-entry",
        "A not-modified to an ordinary call is never served",
        UNMATCHED,
        "required",
        _unmatched("unmatched-no-entry", NOT_MODIFIED, stored=False),
        judge_unmatched,
        expects="a not-modified reply to a call that sent no tag is not served: the client asks again and its caller "
        "gets edition 1",
    ),
    _scenario(
        "delta-applied",
        "A delta reply patches the stored answer",
        DELTA_CLIENT,
        "recommended",
        Script("delta-applied", (Step((FULL,)), Step((Reply(kind="delta", edition=2), EDITION_2)))),
        judge_delta_applied,
        expects="a client that lists json-patch+splice/1 under `acceptDelta` with edition 1's tag applies step 2's "
        "delta to its copy of edition 1 and its caller gets edition 2, after one request (n/a for a client that "
        "takes no deltas: it is sent the full answer)",
    ),
    _scenario(
        "delta-corrupt",
        "A corrupt delta is never served",
        DELTA_CLIENT,
        "required",
        Script("delta-corrupt", (Step((FULL,)), Step((Reply(kind="corrupt-delta", edition=2), EDITION_2)))),
        judge_corrupt_delta,
        expects="step 2's delta applies but makes another answer than the one its digest names: the client does not "
        "serve it, asks again without a tag and without `acceptDelta`, and its caller gets edition 2 (n/a for a "
        "client that takes no deltas)",
    ),
    _scenario(
        "delta-unasked",
        "A delta to an ordinary call is never served",
        DELTA_CLIENT,
        "required",
        _unmatched("delta-unasked", Reply(kind="forced-delta", edition=2), stored=False),
        judge_unmatched,
        expects="a delta reply to a call that sent no tag (and so named no base) is not served: the client asks "
        "again and its caller gets edition 1",
    ),
    _scenario(
        "error",
        "An error is never stored, even with a cache block",
        CALL,
        "required",
        Script("error", (Step((Reply(kind="error", ttl_ms=600_000, scope="public"),)), Step((FULL,)))),
        judge_error_not_stored,
        expects="step 1's error is not stored: step 2 sends a request without a tag, and its caller gets the full "
        "answer",
    ),
    _scenario(
        "fresh",
        "A fresh answer is served without a request",
        CALL,
        "recommended",
        Script("fresh", (Step((Reply(ttl_ms=600_000),)), Step((FULL,)))),
        judge_fresh,
        expects="step 2 sends no request (the answer is fresh for ten minutes), and its caller gets step 1's answer",
    ),
    _scenario(
        "partitions",
        "A private answer is never served to another partition",
        PARTITIONS,
        "required",
        Script("partitions", (Step((Reply(ttl_ms=600_000),)), Step((FULL,), partition="b"))),
        judge_partitions,
        expects="partition b's call sends a request without a tag and gets partition b's answer, never partition a's "
        "private one",
    ),
    _scenario(
        "unknown-scope",
        "An unknown cacheScope is read as private",
        PARTITIONS,
        "required",
        Script("unknown-scope", (Step((Reply(ttl_ms=600_000, scope="session"),)), Step((FULL,), partition="b"))),
        judge_partitions,
        expects='the same as partitions, for `cacheScope: "session"`, which a client reads as private',
    ),
    _scenario(
        "malformed-block",
        "A malformed block is read tolerantly",
        BLOCK,
        "required",
        Script("malformed-block", (Step((Reply(ttl_ms="5000", tag="malformed"),)), Step((FULL,)))),
        judge_tolerant,
        expects="both calls' callers get the full answer, and no request carries the malformed tag",
    ),
    _scenario(
        "stale-if-error",
        "An answer is served stale when the server fails, within its window",
        STALE_CLIENT,
        "recommended",
        Script(
            "stale-if-error",
            (Step((Reply(stale_if_error_ms=600_000),)), Step((Reply(kind="jsonrpc-error"),))),
        ),
        judge_stale_if_error,
        expects="step 1's answer grants `staleIfErrorMs: 600000` with `ttlMs: 0`; step 2's request is answered "
        "with a JSON-RPC error, and its caller gets step 1's answer (a client MAY serve it; one that serves none "
        "is warned)",
    ),
    _scenario(
        "stale-after-write",
        "An answer a write made stale is never served stale",
        STALE_CLIENT,
        "required",
        Script(
            "stale-after-write",
            (
                Step((Reply(stale_if_error_ms=600_000),)),
                Step((Reply(kind="ack"),), tool=WRITE_TOOL),
                Step((Reply(kind="jsonrpc-error"),)),
            ),
        ),
        judge_stale_after_write,
        expects="step 1's answer grants `staleIfErrorMs: 600000`; step 2 calls the `write` tool (no annotations, "
        "no cache block in its answer) through the client; step 3's request is answered with a JSON-RPC error, "
        "and its caller gets that failure (or an error result), never step 1's answer",
    ),
    _scenario(
        "key-malformed",
        "A malformed key-arguments declaration leaves every argument in the key",
        KEY_CLIENT,
        "required",
        Script(
            "key-malformed",
            (
                Step((Reply(ttl_ms=600_000),), tool=KEYED_TOOL, extra=((NONCE, "1"),)),
                Step((FULL,), tool=KEYED_TOOL, extra=((NONCE, "2"),)),
            ),
        ),
        judge_key_malformed,
        expects=f"`{KEYED_TOOL}` declares both `keyArguments` and `ignoreArguments` (malformed); step 1's answer is "
        f"fresh for ten minutes; step 2 differs only in `{NONCE}` and must send a request",
    ),
)


def scripts() -> tuple[Script, ...]:
    """Every script once, in the order the scenarios first name them."""
    seen: dict[str, Script] = {}
    for item in CLIENT_SCENARIOS:
        seen.setdefault(item.script.key, item.script)
    return tuple(seen.values())
