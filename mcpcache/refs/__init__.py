"""Results by reference: `mcp+cache://` URIs a model passes instead of the data (docs/protocol.md section 6)."""

from mcpcache.refs.calls import ModelCall, call_for_model
from mcpcache.refs.references import (
    Missing,
    PayloadTooLarge,
    References,
    Resolution,
    ResolutionError,
    Source,
    StoredReference,
)
from mcpcache.refs.schema import with_uri_arguments
from mcpcache.refs.shown import ShownMemory
from mcpcache.refs.uri import CacheUri, UriError, mint, parse
from mcpcache.refs.view import ModelView

__all__ = [
    "CacheUri",
    "Missing",
    "ModelCall",
    "ModelView",
    "PayloadTooLarge",
    "References",
    "Resolution",
    "ResolutionError",
    "ShownMemory",
    "Source",
    "StoredReference",
    "UriError",
    "call_for_model",
    "mint",
    "parse",
    "with_uri_arguments",
]
