"""How many o200k tokens a model pays to read (or write) a text.

Counted with the `bpe-openai` package, which ships the o200k vocabulary, so counting never touches the
network. Where the tokenizer cannot be loaded the count is an estimate (UTF-8 bytes / 4), and says so:
a figure that might be a guess is labelled as one.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import anyio.to_thread

from mcpcache.extras import install_command, missing_module

logger = logging.getLogger("mcpcache.tokens")

ENCODING = "o200k_base"
_CHUNK_CHARS = 8_000
"""Texts are counted in pieces of about this many characters. The tokenizer refuses outputs over 200k
tokens (a token covers at least one UTF-8 byte, a character is at most 4 bytes: 50k characters is the most
that is always safe). Smaller still, because the tokenizer holds the GIL for a whole piece: a count running
in a worker thread lets the event loop run between pieces, every few milliseconds. The count moves by at
most about a token per piece (27 in 657k tokens for a 1 MB notebook, against 3 with 50k-character pieces)."""
OFF_LOOP_CHARS = 16_384
"""`count_tokens_async` counts texts at least this long in a worker thread; shorter ones (at most a few
milliseconds of counting) inline, where a thread hop (about 100 microseconds) would cost more than it saves."""
_BREAK = re.compile(r"\s")

Method = Literal["o200k", "estimate"]


@dataclass(frozen=True)
class TokenCount:
    count: int
    method: Method
    """"o200k": counted with the o200k tokenizer; "estimate": UTF-8 bytes / 4, the tokenizer was missing."""

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "method": self.method}


_LOADING = threading.Lock()


@functools.cache
def _encoder() -> Any:
    # Counts run in worker threads too: the first ones to arrive load the tokenizer (and log) only once.
    with _LOADING:
        return _load_encoder()


@functools.cache
def _load_encoder() -> Any:
    try:
        with warnings.catch_warnings():
            # Importing bpe-openai reads its vocabularies with importlib.resources.open_binary, deprecated
            # since 3.11. The warning is about that package, not the caller's code; passed on, it would also
            # turn into an error under `-W error` and leave every count an estimate.
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            return bpe_openai.get_encoding(ENCODING)
    except Exception as exc:
        if isinstance(exc, ImportError) and missing_module(exc, "tokens"):
            # An expected setup rather than a fault: one line, once (this function's result is cached).
            logger.warning(
                "token counts are estimates (UTF-8 bytes / 4): the o200k tokenizer needs the tokens extra: %s",
                install_command("tokens"),
            )
        else:
            logger.warning("o200k tokenizer unavailable (%s: %s); token counts are estimates", type(exc).__name__, exc)
        return None


def _chunks(text: str) -> list[str]:
    # Cut just before whitespace: o200k attaches a leading space to the next word, so a cut there splits
    # no token that a whole-text encoding would have made (to within a token per chunk).
    pieces: list[str] = []
    start = 0
    while len(text) - start > _CHUNK_CHARS:
        end = start + _CHUNK_CHARS
        found = _BREAK.search(text, end - _CHUNK_CHARS // 10, end)
        cut = found.start() if found and found.start() > start else end
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def count_tokens(text: str) -> TokenCount:
    encoder = _encoder()
    if encoder is None:
        return TokenCount(len(text.encode("utf-8", "surrogatepass")) // 4, "estimate")
    try:
        return TokenCount(sum(len(encoder.encode_ordinary(piece)) for piece in _chunks(text)), "o200k")
    except Exception:
        logger.warning("o200k tokenizer failed on a text; counting an estimate", exc_info=True)
        return TokenCount(len(text.encode("utf-8", "surrogatepass")) // 4, "estimate")


def _count(text: str | bytes) -> TokenCount:
    return count_tokens(text if isinstance(text, str) else text.decode("utf-8", "surrogatepass"))


def _loaded() -> bool:
    info = getattr(_encoder, "cache_info", None)  # tests stand in a plain function for the loader
    return info is None or info().currsize > 0


async def count_tokens_async(text: str | bytes) -> TokenCount:
    """`count_tokens` for async code: a long text (or a UTF-8 body, decoded there too) is counted in a worker
    thread, so the event loop keeps running; the first count, which loads the tokenizer, too."""
    if len(text) < OFF_LOOP_CHARS and _loaded():
        return _count(text)
    # Counting is pure: a cancelled caller need not wait for the thread to finish.
    return await anyio.to_thread.run_sync(_count, text, abandon_on_cancel=True)
