"""Moved: the decisions are in `mcpcache.server.decisions`, the driver in `mcpcache.server.revalidator`.

Kept for one version so that code importing from here keeps working.
"""

from mcpcache.server.decisions import (
    AfterBody,
    Answer,
    AnswerNotModified,
    BeforeBody,
    BelowTagging,
    NotAnAnswer,
    RunBody,
    SendAsIs,
    SkipBody,
    Stamp,
    decide_after_body,
    decide_before_body,
    decide_block,
    needs_content_tag,
    not_modified_kind,
    validator_matches,
)
from mcpcache.server.revalidator import NotModified, Outcome, PassThrough, Revalidator, ServerStats, Stamped, ToolCall

__all__ = [
    "AfterBody",
    "Answer",
    "AnswerNotModified",
    "BeforeBody",
    "BelowTagging",
    "NotAnAnswer",
    "NotModified",
    "Outcome",
    "PassThrough",
    "Revalidator",
    "RunBody",
    "SendAsIs",
    "ServerStats",
    "SkipBody",
    "Stamp",
    "Stamped",
    "ToolCall",
    "decide_after_body",
    "decide_before_body",
    "decide_block",
    "needs_content_tag",
    "not_modified_kind",
    "validator_matches",
]
