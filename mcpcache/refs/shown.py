"""What each conversation's model was last shown of each tool's answer: the memory behind re-read views.

docs/references.md, "Re-reads". When a model asks again for an answer it already read, `References.for_model`
can show it "unchanged since that result" or only what changed, instead of the whole answer again. That
is honest only while the earlier view is still in the model's context, and only the host knows what its
context holds: this memory remembers what the host showed, and forgets when the host says so (`forget`)
or when a bound passes (a number of turns, an age). A forgotten entry costs tokens, never correctness:
the model then gets the whole answer, as on a first read.

Pure: no I/O, time from an injected clock, every decision a typed value with a reason. Kept in the
process, never in a store: a host that restarts starts from first reads, which is always right.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import xxhash

from mcpcache.refs.uri import CacheUri

DEFAULT_MAX_ENTRIES = 10_000
"""Remembered answers across all conversations; past it the least recently used go (they cost a full view)."""


@dataclass(frozen=True)
class Shown:
    """What the model holds of one tool's answer (one server + tool + arguments) in one conversation."""

    tag: str
    """The tag of the answer the model holds now (after any changes it was shown)."""
    uri: CacheUri
    """The stored whole of that answer."""
    turn: int
    """The conversation's turn of the full view the model's copy starts from. Changed views build on it, so
    the bound counts from it, not from the last change."""
    at: float
    """The time of that full view (the memory's clock)."""
    changes_bytes: int = 0
    """Bytes of changed views shown on top of that full view since."""
    shortened: bool = False
    """That full view was shortened (members replaced by markers): the model holds markers, not those
    members, so no change can be shown on top of it (an unchanged view still can)."""


@dataclass(frozen=True)
class NotShown:
    """No earlier view to build on: the model gets the full view."""

    reason: str


@dataclass(frozen=True)
class Seen:
    shown: Shown
    epoch: int
    """How many times the memory had been told to forget when this was recalled (see `ShownMemory.intact`)."""


Recall = NotShown | Seen


def source_key(server: str, tool: str, arguments: Mapping[str, Any] | None) -> str | None:
    """A short key for server + tool + arguments (arguments in sorted-key JSON), or None when the arguments
    have no JSON form (such a call is simply not remembered)."""
    try:
        args = orjson.dumps(dict(arguments or {}), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except Exception:
        try:
            args = json.dumps(dict(arguments or {}), sort_keys=True, ensure_ascii=True, default=str).encode()
        except Exception:
            return None
    digest = xxhash.xxh3_128()
    for part in (server.encode("utf-8", "surrogatepass"), tool.encode("utf-8", "surrogatepass"), args):
        digest.update(len(part).to_bytes(8, "big"))  # length-prefixed: no two sources share a byte stream
        digest.update(part)
    return digest.hexdigest()


@dataclass
class _Conversation:
    turn: int = 0
    entries: OrderedDict[str, Shown] = field(default_factory=OrderedDict)


class ShownMemory:
    """Per conversation, per server + tool + arguments: the answer (by tag) the model was last shown.

    max_turns: an earlier view is built on only while fewer than this many more tool results have been
        shown in its conversation since its full view (a turn is one `for_model` call, or one call
        `References.resolve` refused); None: no bound.
    max_age_s: ... and only while its full view is younger than this (by `clock`); None: no bound.
    max_entries: remembered answers across all conversations, least recently used dropped first.

    One memory can serve many conversations (`References.for_conversation` shares it); entries are kept
    apart by the exact conversation id, never by the URI's cosmetic segment. Safe to share across threads.
    """

    def __init__(
        self,
        *,
        max_turns: int | None = None,
        max_age_s: float | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1):
            raise ValueError("max_turns must be a positive int or None")
        if max_age_s is not None and not max_age_s > 0:
            raise ValueError("max_age_s must be positive or None")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError("max_entries must be a positive int")
        self.max_turns = max_turns
        self.max_age_s = max_age_s
        self.max_entries = max_entries
        self.clock = clock
        self._conversations: OrderedDict[str, _Conversation] = OrderedDict()
        self._count = 0
        self._forgotten = 0
        self._high = 0
        """The highest turn handed out in any conversation: a conversation (re)created starts counting
        from it, so a view drawn before a forget (or an eviction) of its conversation never counts as
        newer than the results shown after it."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def next_turn(self, conversation_id: str) -> int:
        """Count one more tool result shown in the conversation; its turn number."""
        with self._lock:
            conversation = self._conversations.get(conversation_id)
            if conversation is None:
                conversation = self._conversations[conversation_id] = _Conversation(turn=self._high)
            self._conversations.move_to_end(conversation_id)
            conversation.turn += 1
            self._high = max(self._high, conversation.turn)
            return conversation.turn

    def recall(self, conversation_id: str, key: str, turn: int) -> Recall:
        """The earlier view of this answer the model can still be assumed to hold, at `turn`."""
        with self._lock:
            conversation = self._conversations.get(conversation_id)
            shown = conversation.entries.get(key) if conversation is not None else None
            if conversation is None or shown is None:
                return NotShown("not shown in this conversation (or forgotten)")
            if self.max_turns is not None and turn - shown.turn > self.max_turns:
                self._drop(conversation_id, conversation, key)
                return NotShown(f"shown {turn - shown.turn} turns ago; a view is built on for {self.max_turns}")
            age = self.clock() - shown.at
            if self.max_age_s is not None and age > self.max_age_s:
                self._drop(conversation_id, conversation, key)
                return NotShown(f"shown {age:.0f} s ago; a view is built on for {self.max_age_s:g} s")
            conversation.entries.move_to_end(key)
            self._conversations.move_to_end(conversation_id)
            return Seen(shown, self._forgotten)

    def intact(self, seen: Seen) -> bool:
        """Whether nothing was forgotten since `seen` was recalled. A view that builds on an earlier one is
        made across awaits; the host may forget meanwhile (its context was compacted), and then the view
        must not be shown. Any forget counts, of any conversation: rare, and a full view is always right."""
        with self._lock:
            return self._forgotten == seen.epoch

    def remember_full(
        self, conversation_id: str, key: str, tag: str, uri: CacheUri, turn: int, *, shortened: bool = False
    ) -> None:
        """The model was shown the whole answer `tag`, stored at `uri`, at `turn` (`shortened`: with markers)."""
        self._put(conversation_id, key, Shown(tag, uri, turn, self.clock(), shortened=shortened))

    def remember_changes(self, conversation_id: str, key: str, base: Shown, tag: str, uri: CacheUri, size: int) -> None:
        """The model was shown `size` bytes of changes turning `base` into the answer `tag`, stored at `uri`."""
        self._put(conversation_id, key, replace(base, tag=tag, uri=uri, changes_bytes=base.changes_bytes + size))

    def drop(self, conversation_id: str, key: str) -> None:
        """The model was shown something this memory cannot build on (a small, untagged or error answer)."""
        with self._lock:
            conversation = self._conversations.get(conversation_id)
            if conversation is not None:
                self._drop(conversation_id, conversation, key)

    def forget(self, conversation_id: str | None = None) -> int:
        """Forget what one conversation was shown (None: every conversation); how many entries went.

        Call it whenever the model's context loses what it was shown: a compaction, a truncation, a fork,
        a cleared chat, a conversation id used again for another conversation.
        """
        with self._lock:
            self._forgotten += 1
            if conversation_id is None:
                dropped = self._count
                self._conversations.clear()
                self._count = 0
                return dropped
            conversation = self._conversations.pop(conversation_id, None)
            if conversation is None:
                return 0
            self._count -= len(conversation.entries)
            return len(conversation.entries)

    def _put(self, conversation_id: str, key: str, shown: Shown) -> None:
        with self._lock:
            conversation = self._conversations.get(conversation_id)
            if conversation is None:
                # Forgotten between this view's turn and now: the view is still shown, so it is remembered,
                # at the turn it was made. The fresh counter starts at the highest turn handed out, at or
                # above that one, which only shortens its life; so does one a parallel call started after
                # the forget (a counter restarted from 0 would have let it outlive `max_turns`).
                conversation = self._conversations[conversation_id] = _Conversation(turn=self._high)
            if key not in conversation.entries:
                self._count += 1
            conversation.entries[key] = shown
            conversation.entries.move_to_end(key)
            self._conversations.move_to_end(conversation_id)
            while self._count > self.max_entries:
                oldest_id, oldest = next(iter(self._conversations.items()))
                if not oldest.entries:
                    del self._conversations[oldest_id]
                    continue
                oldest.entries.popitem(last=False)
                self._count -= 1
                if not oldest.entries:
                    del self._conversations[oldest_id]

    def _drop(self, conversation_id: str, conversation: _Conversation, key: str) -> None:
        if conversation.entries.pop(key, None) is not None:
            self._count -= 1
