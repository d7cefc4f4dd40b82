"""The real jupyter-mcp-server and the Jupyter server behind it, started on 127.0.0.1 for a test session.

Shared by the interoperability tests (tests/client/test_jupyter_interop.py) and the conformance check's
(tests/check/test_jupyter_check.py) through the session fixture `jupyter_stack` (tests/conftest.py), so
the stack starts once. Needs the interop extra (`pip install jupyter-mcp-server==2.2.4`); the modules
that use it skip, or under CI=true fail, without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from mcpcache.processes import accepts, stop_process

from .transports import http_servers

INSTALL = "pip install jupyter-mcp-server==2.2.4"


def require_jupyter_mcp_server() -> None:
    """Skip the calling test module when jupyter-mcp-server is missing; under CI=true, fail it instead."""
    try:
        pytest.importorskip("jupyter_mcp_server", reason=f"jupyter-mcp-server is not installed ({INSTALL})")
    except pytest.skip.Exception:
        if os.environ.get("CI") == "true":
            pytest.fail(
                f"jupyter-mcp-server is not installed ({INSTALL}); CI must run the interop tests", pytrace=False
            )
        raise


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class JupyterStack:
    url: str
    notebook: Path


@contextlib.contextmanager
def jupyter_stack_in(root: Path) -> Iterator[JupyterStack]:
    """`jupyter server` (collaboration on, the UI extensions off) and `jupyter-mcp-server` in
    streamable-HTTP mode pointed at it, with `a.ipynb` enrolled as "default" and no kernel."""
    notebooks, config, data, runtime = (root / name for name in ("notebooks", "config", "data", "runtime"))
    for folder in (notebooks, config, data, runtime):
        folder.mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("x = 1\nprint(x)"), nbformat.v4.new_markdown_cell("# Title")]
    nbformat.write(notebook, notebooks / "a.ipynb")
    off = ("jupyterlab", "jupyter_lsp", "jupyter_mcp_server", "notebook_shim", "jupyter_server_terminals")
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": dict.fromkeys(off, False)}})
    )
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_DATA_DIR": str(data),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "IPYTHONDIR": str(root / "ipython"),
    }
    token = secrets.token_hex(16)
    jupyter_port = _free_port()
    jupyter = [
        sys.executable, "-m", "jupyter_server", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={jupyter_port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={notebooks}",
        "--ServerApp.open_browser=False", "--allow-root",
    ]  # fmt: skip
    mcp_server = [
        sys.executable, "-m", "jupyter_mcp_server", "start", "--transport", "streamable-http",
        "--jupyter-url", f"http://127.0.0.1:{jupyter_port}", "--jupyter-token", token,
        "--document-id", "a.ipynb", "--start-new-code-sandbox", "false", "--insecure-mcp-noauth", "--port",
    ]  # fmt: skip
    log_path = root / "servers.log"
    with log_path.open("wb") as log:
        jupyter_process = subprocess.Popen(
            jupyter, env=env, cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )  # cwd: it keeps its document store (.jupyter_ystore.db) there
        try:
            _wait_for_port(jupyter_process, jupyter_port, log_path)
            with http_servers([mcp_server], log=log) as (url,):
                yield JupyterStack(url, notebooks / "a.ipynb")
        finally:
            stop_process(jupyter_process, timeout_s=15)


def _wait_for_port(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 60  # a readiness wait, not a timing assertion
    while not accepts(port):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"jupyter server did not start:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(0.05)
