"""`mcpcache check` is an application on the applications floor (docs/architecture.md): it stands on the
core and the halves, never on the measuring floor (`mcpcache.bench`) or the commands above it. It counts
its probes' bytes with the core's wire counter (`mcpcache.wire_count`), as `mcpcache bench` does."""

from __future__ import annotations

import ast
from pathlib import Path

import mcpcache.check

CHECK = Path(mcpcache.check.__file__).parent


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_check_imports_nothing_from_bench_or_the_commands() -> None:
    above = {
        (path.name, name)
        for path in CHECK.glob("*.py")
        for name in imported(path)
        if name.startswith(("mcpcache.bench", "mcpcache.cli"))
    }
    assert above == set()
    assert "mcpcache.wire_count" in imported(CHECK / "probe.py")
