"""The re-read scenario (`model_rereads`): an agent reads the same notebook again and again while it changes.

A coding agent re-reads what it works on: the notebook, after each cell it edits, and again before the next
step. Every read costs the model the tokens of what it is shown. Here the demo server (in process, with
mcpcache's middleware) serves a notebook of about 100 KB; one `ToolCache` and one conversation's
`References` with a `ShownMemory` sit in front of it, as a host would have them. The agent reads it
`reads` times, with a one-cell edit (through the same cached client) before every `edit_every`-th read.

Counted, in o200k tokens of the view's JSON text: `naive_tokens`, the full view at every read (what
`References` without a memory shows: the whole answer and its `_cache_uri`; each distinct text counted
once), and `mcpcache_tokens`, the views the memory shows (a full view first, then "unchanged" or the
changes). `edits_seen` is true when
the first view after every edit carries the edited source. The answers the views add up to are checked
against the server's too (`views_match`): a view that saves tokens by being wrong would not count.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import fastmcp

from mcpcache.client import ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.refs import References, ShownMemory
from mcpcache.refs.changes import apply_changes
from mcpcache.refs.view import CHANGES_FIELD, envelope_of, json_bytes, payload_of
from mcpcache.stores import MemoryStore
from mcpcache.tokens import count_tokens

NOTEBOOK_BYTES = 100_000
READS = 12
EDIT_EVERY = 3
SEED = 42
TOOL = "read_notebook"


def _carries(value: Any, text: str) -> bool:
    """Whether any string in `value` (a view's envelope) holds `text`."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and text in item:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _edit_source(number: int) -> str:
    return f"# edited between reads ({number})\nsubtotal_{number} = df['revenue'].sum() * {number}\n"


async def run(
    *,
    reads: int = READS,
    edit_every: int = EDIT_EVERY,
    notebook_bytes: int = NOTEBOOK_BYTES,
    seed: int = SEED,
    notebook: Path | None = None,
) -> dict[str, Any]:
    """The scenario on a copy of `notebook` (default: one of `notebook_bytes` generated from `seed`)."""
    naive_tokens = mcpcache_tokens = 0
    counted: dict[str, int] = {}
    kinds = {"full": 0, "unchanged": 0, "changed": 0}
    edits: list[dict[str, Any]] = []
    views_match = True
    with tempfile.TemporaryDirectory() as folder:
        name = "notebook.ipynb"
        if notebook is not None:
            shutil.copyfile(notebook, Path(folder) / name)
        else:
            generate_notebook_of_size(Path(folder) / name, notebook_bytes, seed=seed)
        size = (Path(folder) / name).stat().st_size
        cache = ToolCache(MemoryStore())
        remembering = References(MemoryStore(), conversation_id="bench-rereads", shown=ShownMemory())
        async with fastmcp.Client(build_demo_server(folder)) as client:
            cached = cache.wrap(client)
            arguments = {"path": name}
            held: Any = None  # the answer the model can put together from the views so far
            pending: str | None = None
            code_cells: list[int] = []
            for read in range(reads):
                if read and edit_every and read % edit_every == 0 and code_cells:
                    pending = _edit_source(len(edits) + 1)
                    index = code_cells[(len(edits) * 7 + 3) % len(code_cells)]
                    edit = {**arguments, "index": index, "source": pending}
                    await cached.call_raw("edit_cell", edit)
                    edits.append({"before_read": read, "cell": index, "seen": False})
                call = await cached.call_raw(TOOL, arguments)
                server = cached.server_id
                view = await remembering.for_model(call.result, server=server, tool=TOOL, arguments=arguments)
                answer = payload_of(call.result).value
                # Today's view of this answer (References without a memory): the answer and its reference.
                full_text = json_bytes(envelope_of(answer, view.uri)).decode()
                if full_text not in counted:
                    counted[full_text] = count_tokens(full_text).count
                naive_tokens += counted[full_text]
                mcpcache_tokens += count_tokens(view.text()).count
                kinds[view.kind] += 1
                if not code_cells:
                    code_cells = [cell["index"] for cell in answer["cells"] if cell.get("cell_type") == "code"]
                if pending is not None:
                    edits[-1]["seen"] = _carries(view.envelope, pending)
                    pending = None
                if view.kind == "full":
                    held = answer
                elif view.kind == "changed":
                    held = apply_changes(held, view.envelope[CHANGES_FIELD])
                views_match = views_match and held == answer
            full_view_bytes = len(full_text.encode())
    return {
        "notebook_bytes": size,
        "full_view_bytes": full_view_bytes,
        "reads": reads,
        "edits": len(edits),
        "naive_tokens": naive_tokens,
        "mcpcache_tokens": mcpcache_tokens,
        "share": mcpcache_tokens / naive_tokens if naive_tokens else None,
        "edits_seen": bool(edits) and all(edit["seen"] for edit in edits),
        "views": kinds,
        "views_match": views_match,
        "edit_log": edits,
        "token_method": count_tokens("x").method,
    }
