"""The core install: what works without any extra, what a missing extra says, and where files go.

Building a fresh virtual environment is too slow for the suite, so the lean install is played by a child
process that refuses to import the extras' packages (tests/support/lean.py); everything it does use is
real: an MCP SDK server with the revalidation extension, an `mcp.Client` over memory streams, a ToolCache
and References on memory stores.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import platformdirs
import pytest

import mcpcache
from mcpcache.__main__ import main as command
from mcpcache.extras import MissingExtra, install_command, needs
from mcpcache.stores import opening

LEAN = Path(__file__).resolve().parent / "support" / "lean.py"
sys.path.insert(0, str(LEAN.parent))
from lean import OPTIONAL  # noqa: E402


def lean(refused: tuple[str, ...], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LEAN), ",".join(refused), *arguments], capture_output=True, text=True, timeout=120
    )


def test_the_client_the_sdk_server_half_and_references_need_no_extra() -> None:
    done = lean(OPTIONAL, "sdk")
    assert done.returncode == 0, done.stderr
    assert "sdk: miss, revalidated, by reference; the tool ran 3 times" in done.stdout
    assert f"redis: mcpcache: the Redis store needs the redis extra: {install_command('redis')}" in done.stdout
    assert "optional modules imported: []" in done.stdout
    # Counted four times without the tokenizer: said once, in one line, with no traceback.
    assert done.stderr == (
        f"token counts are estimates (UTF-8 bytes / 4): the o200k tokenizer needs the tokens extra: "
        f"{install_command('tokens')}\n"
    )


@pytest.mark.parametrize(
    ("refused", "arguments", "line"),
    [
        (("typer",), ["--version"], f"mcpcache: the mcpcache command needs the cli extra: {install_command('cli')}"),
        (("rich",), ["--help"], f"mcpcache: the mcpcache command needs the cli extra: {install_command('cli')}"),
        (("fastmcp",), ["demo-server"], f"mcpcache: the demo server needs the cli extra: {install_command('cli')}"),
        (("matplotlib",), ["bench"], f"mcpcache: the benchmark needs the bench extra: {install_command('bench')}"),
    ],
)
def test_a_command_without_its_extra_says_which_in_one_line(
    refused: tuple[str, ...], arguments: list[str], line: str, tmp_path: Path
) -> None:
    done = lean(refused, "cli", *arguments, *(["--dir", str(tmp_path)] if arguments == ["demo-server"] else []))
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_extra_names_the_command_that_installs_it_from_this_clone() -> None:
    # mcpcache is not published yet: "pip install 'mcpcache[redis]'" would find nothing to install.
    clone = Path(mcpcache.__file__).resolve().parent.parent
    assert install_command("redis") == f"pip install -e '{clone}[redis]'"


def test_only_a_missing_package_of_the_extra_becomes_missing_extra() -> None:
    with pytest.raises(MissingExtra) as caught, needs("redis", "the Redis store"):
        import redis.not_a_module  # type: ignore[import-not-found]  # noqa: F401
    assert isinstance(caught.value, ImportError)
    assert str(caught.value) == f"mcpcache: the Redis store needs the redis extra: {install_command('redis')}"
    # Any other failed import is a different fault, and is not disguised as a missing extra.
    with pytest.raises(ModuleNotFoundError) as other, needs("redis", "the Redis store"):
        import not_a_redis_module  # type: ignore[import-not-found]  # noqa: F401
    assert not isinstance(other.value, MissingExtra)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        command(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"mcpcache {version('mcpcache')}\n"
    assert version("mcpcache") == mcpcache.__version__


def test_the_version_is_written_once_in_pyproject() -> None:
    """`mcpcache.__version__` and `--version` read the installed package's metadata: no second copy to forget."""
    root = Path(mcpcache.__file__).parent
    written = re.search(r'^version = "([^"]+)"$', (root.parent / "pyproject.toml").read_text(), re.MULTILINE)
    assert written is not None
    copies = [str(path) for path in root.rglob("*.py") if f'"{written.group(1)}"' in path.read_text()]
    assert copies == [], f"the version {written.group(1)} is written again in {copies}"


def test_the_cache_folder_is_the_platforms_unless_mcpcache_dir_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCPCACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert opening.cache_dir() == Path(platformdirs.user_cache_dir("mcpcache", appauthor=False))
    if sys.platform.startswith("linux"):
        assert opening.cache_dir() == tmp_path / "xdg" / "mcpcache"
    monkeypatch.setenv("MCPCACHE_DIR", str(tmp_path / "mine"))
    assert opening.cache_dir() == tmp_path / "mine"
    assert opening.default_path("tools.db") == tmp_path / "mine" / "tools.db"


def test_a_gateway_told_to_use_httptools_without_it_says_so_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[gateway]\nhttp = "httptools"\n\n[upstreams.up]\nurl = "http://127.0.0.1:9/mcp"\n', encoding="utf-8"
    )
    done = lean(("httptools",), "cli", "gateway", "--config", str(config))
    line = 'mcpcache gateway: [gateway] http = "httptools" needs httptools: pip install httptools'
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")
