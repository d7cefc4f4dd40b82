"""What an answer's document is, and back: what a delta's ops point into (`mcpcache.delta.spec`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcp_types import CallToolResult
from pydantic import BaseModel, ValidationError

from mcpcache.delta.equality import kind_of
from mcpcache.delta.spec import DOCUMENT_KEYS, DeltaError
from mcpcache.etag import meta_without_block, wire_content
from mcpcache.protocol import META_KEY


def document_of(result: CallToolResult, meta_key: str = META_KEY) -> dict[str, Any]:
    """The document of an answer: what a delta's ops point into (see the module docstring)."""
    return answer_document(result.content, result.structured_content, result.meta, meta_key)


def answer_document(
    content: Iterable[BaseModel | Mapping[str, Any]],
    structured_content: Any,
    meta: Mapping[str, Any] | None,
    meta_key: str = META_KEY,
) -> dict[str, Any]:
    """`document_of` from an answer's three fields, for a caller that holds them apart (a server adapter's
    own result type) and would otherwise build a `CallToolResult` only to take it apart again."""
    document: dict[str, Any] = {"content": wire_content(content)}
    if structured_content is not None:
        document["structuredContent"] = structured_content
    rest = meta_without_block(meta, meta_key)
    if rest is not None:
        document["_meta"] = rest
    return document


def result_of(document: Mapping[str, Any]) -> CallToolResult:
    """The answer a document describes (no cache block, `isError` false). Raises DeltaError when the
    document is not one: a key other than the three, no content array, or content the SDK rejects."""
    if not isinstance(document, Mapping):
        raise DeltaError(f"a document is a JSON object, not {kind_of(document)}")
    unknown = document.keys() - DOCUMENT_KEYS
    if unknown:
        raise DeltaError(f"a document has only content, structuredContent and _meta, not {sorted(unknown)}")
    if not isinstance(document.get("content"), list):
        raise DeltaError("a document's content must be an array of content blocks")
    try:
        return CallToolResult.model_validate(dict(document))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "/".join(str(part) for part in first["loc"])
        raise DeltaError(f"the document is not an answer: {where}: {first['msg']}") from None
