"""Delta replies: a changed answer sent as the change. The format, for implementers in any language, is
written down in `mcpcache.delta.spec`; `diff` computes ops, `apply` replays them."""

from mcpcache.delta.applying import apply
from mcpcache.delta.diffing import diff
from mcpcache.delta.documents import answer_document, document_of, result_of
from mcpcache.delta.spec import FORMAT, MAX_INSERTED_BYTES, MAX_OPS, MAX_REWRITTEN, DeltaError
from mcpcache.delta.tree import TREE_DIGEST_PREFIX, TREE_FORMAT, tree_digest

FORMATS: tuple[str, ...] = (TREE_FORMAT, FORMAT)
"""The formats mcpcache sends and applies, in its order of preference: the tree digest's first."""

__all__ = [
    "FORMAT",
    "FORMATS",
    "MAX_INSERTED_BYTES",
    "MAX_OPS",
    "MAX_REWRITTEN",
    "TREE_DIGEST_PREFIX",
    "TREE_FORMAT",
    "DeltaError",
    "answer_document",
    "apply",
    "diff",
    "document_of",
    "result_of",
    "tree_digest",
]
