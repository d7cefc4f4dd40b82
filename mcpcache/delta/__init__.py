"""Delta replies: a changed answer sent as the change. The format, for implementers in any language, is
written down in `mcpcache.delta.spec`; `diff` computes ops, `apply` replays them."""

from mcpcache.delta.applying import apply
from mcpcache.delta.diffing import diff
from mcpcache.delta.documents import answer_document, document_of, result_of
from mcpcache.delta.spec import FORMAT, MAX_INSERTED_BYTES, MAX_OPS, MAX_REWRITTEN, DeltaError

__all__ = [
    "FORMAT",
    "MAX_INSERTED_BYTES",
    "MAX_OPS",
    "MAX_REWRITTEN",
    "DeltaError",
    "answer_document",
    "apply",
    "diff",
    "document_of",
    "result_of",
]
