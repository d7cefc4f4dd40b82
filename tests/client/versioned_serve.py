"""Serve the versioned documents (tests/client/versioned.py) over streamable HTTP, logging every change and
every answer as a JSON line: `python versioned_serve.py <log path> <ttl ms> <port>`.

Started by tests/client/test_two_processes.py through `support.transports.http_servers` (which appends the
port); the server's clock is the real one (`time.time()`), the clock its callers read too.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.versioned import Versions, build_versioned


def main(log_path: str, ttl_ms: str, port: str) -> None:
    # One JSON line per event, flushed at once: the log is complete whenever the server is stopped.
    log = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (open for the process's life)

    def record(entry: dict[str, Any]) -> None:
        log.write(json.dumps(entry) + "\n")

    server = build_versioned(Versions(time.time, record), int(ttl_ms))
    server.run(transport="http", host="127.0.0.1", port=int(port), show_banner=False, log_level="warning")  # type: ignore[call-arg]


if __name__ == "__main__":
    main(*sys.argv[1:4])
