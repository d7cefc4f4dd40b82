"""What the tag and a delta's digest cost on the same answer (docs/extension.md, "Canonical forms").

The answer is the demo server's read_notebook answer for a generated notebook (the structured content
and its text block, as FastMCP sends them). For each size it times, best of N in one process:
- the tag: `content_tag` (the tag form, orjson, fed to xxh3-128);
- the digest: `answer_digest` (RFC 8785 bytes, SHA-256), which a server computes for a delta and a
  client recomputes to verify one;
- RFC 8785 bytes by the pure-Python writer alone (what `jcs` does when the answer holds a float, an
  integer beyond 2^53 or a key beyond U+FFFF), and SHA-256 of the bytes alone.

Run:  python benchmarks/digest_cost.py            (about 20 s)
      python benchmarks/digest_cost.py --quick    (a smoke run)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcpcache.bench.common import machine
from mcpcache.canonical import _write_jcs, jcs
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import NotebookFolder
from mcpcache.etag import answer_digest, content_tag

MB = 1_000_000


def best_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def answer_for(directory: Path, size: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    path = generate_notebook_of_size(directory / f"nb-{size}.ipynb", size)
    _, notebook = NotebookFolder(directory).load(path.name)
    structured = {"kind": "notebook.read", "path": path.name, "cells": notebook["cells"]}
    return [{"type": "text", "text": json.dumps(structured)}], structured


def row(content: list[dict[str, Any]], structured: dict[str, Any], runs: int) -> str:
    document = {"content": content, "meta": None, "structuredContent": structured}
    data = jcs(document)

    def writer() -> str:
        parts: list[str] = []
        _write_jcs(document, parts.append)
        return "".join(parts)

    tag = best_ms(lambda: content_tag(content, structured), runs)
    digest = best_ms(lambda: answer_digest(content, structured), runs)
    slow = best_ms(writer, runs)
    sha = best_ms(lambda: hashlib.sha256(data).hexdigest(), runs)
    return f"| {len(data) / MB:.2f} MB | {tag:.1f} ms | {digest:.1f} ms | {slow:.1f} ms | {sha:.1f} ms |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    sizes = [100_000, 1 * MB] if options.quick else [100_000, 1 * MB, 5 * MB]
    runs = 3 if options.quick else 7
    print(f"machine: {machine()}")
    print("| answer | tag (xxh3-128, tag form) | digest (SHA-256, RFC 8785) | RFC 8785 writer alone | SHA-256 alone |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            content, structured = answer_for(Path(folder), size)
            print(row(content, structured, runs))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
