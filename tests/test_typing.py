"""`ToolCache.wrap()` is typed per client, so mypy catches a misspelt `cache_mode=` (tests/typed/views.py).

mypy runs on the snippet with the project's own configuration and cache folder, the ones the package's
`mypy` run uses: whichever of the two runs first pays for reading the SDKs' types, the other reuses them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEWS = ROOT / "tests" / "typed" / "views.py"


def test_mypy_reads_the_views_as_their_clients_and_catches_wrong_keywords() -> None:
    expected = {
        (number, match.group(1))
        for number, line in enumerate(VIEWS.read_text().splitlines(), 1)
        if (match := re.search(r"# error: ([\w-]+)$", line))
    }
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(VIEWS)],
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    reported = {
        (int(number), code)
        for number, code in re.findall(r"^[^:\n]*views\.py:(\d+): error: .*\[([\w-]+)\]$", run.stdout, re.MULTILINE)
    }
    assert reported == expected, run.stdout + run.stderr
