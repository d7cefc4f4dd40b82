"""How many o200k tokens a model pays to read (or write) a text.

Counted with the `bpe-openai` package, which ships the o200k vocabulary, so counting never touches the
network. Where the tokenizer cannot be loaded the count is an estimate (UTF-8 bytes / 4), and says so:
a figure that might be a guess is labelled as one.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from dataclasses import dataclass
from typing import Any, Literal

logger = logging.getLogger("mcpcache.tokens")

ENCODING = "o200k_base"
_CHUNK_CHARS = 50_000
"""The tokenizer refuses outputs over 200k tokens. A token covers at least one UTF-8 byte and a character
is at most 4 bytes, so 50k characters can never give more than 200k tokens, whatever the script."""
_BREAK = re.compile(r"\s")

Method = Literal["o200k", "estimate"]


@dataclass(frozen=True)
class TokenCount:
    count: int
    method: Method
    """"o200k": counted with the o200k tokenizer; "estimate": UTF-8 bytes / 4, the tokenizer was missing."""

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "method": self.method}


@functools.cache
def _encoder() -> Any:
    try:
        with warnings.catch_warnings():
            # Importing bpe-openai reads its vocabularies with importlib.resources.open_binary, deprecated
            # since 3.11. The warning is about that package, not the caller's code; passed on, it would also
            # turn into an error under `-W error` and leave every count an estimate.
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            return bpe_openai.get_encoding(ENCODING)
    except Exception:
        logger.warning("o200k tokenizer unavailable; token counts are estimates", exc_info=True)
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
