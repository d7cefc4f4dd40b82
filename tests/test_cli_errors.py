"""The `mcpcache` command refuses bad arguments and missing files in one line on stderr, exit 2, before it
writes or serves anything; its help shows what each command does without typer's `<bool>` noise."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpcache.__main__ import main as command


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        command(list(arguments))
    captured = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0), captured.out, captured.err


def assert_one_line(capsys: pytest.CaptureFixture[str], *arguments: str, says: str) -> None:
    code, out, err = run(capsys, *arguments)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1, err
    assert err.endswith("\n"), err
    assert "Traceback" not in err
    assert says in err, err


@pytest.fixture
def listening() -> Iterator[int]:
    """A port another server is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--http", "99999"], "mcpcache demo-server: Invalid value for --http: 99999 is not a port (1 to 65535)"),
        (["--http", "0"], "0 is not a port"),
        (["--http", "eighty"], "Invalid value for '--http'"),
        (["--generate", "0"], "Invalid value for --generate: must be at least 1"),
        (["--ttl-ms", "-1"], "Invalid value for --ttl-ms"),
        (["--validator", "--no-revalidation"], "--validator needs mcpcache"),
        (["--htp", "8000"], "No such option: --htp"),
    ],
)
def test_demo_server_refuses_bad_arguments_before_writing_or_serving(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, arguments: list[str], says: str
) -> None:
    # --generate would write a notebook: a bad argument anywhere stops it.
    generate = [] if "--generate" in arguments else ["--generate", "2"]
    assert_one_line(capsys, "demo-server", "--dir", str(tmp_path), *generate, *arguments, says=says)
    assert list(tmp_path.iterdir()) == []


def test_demo_server_refuses_a_port_in_use_and_a_missing_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, listening: int
) -> None:
    assert_one_line(
        capsys,
        "demo-server",
        "--dir",
        str(tmp_path),
        "--http",
        str(listening),
        says=f"127.0.0.1:{listening} is in use (another server is listening there)",
    )
    assert_one_line(capsys, "demo-server", "--dir", str(tmp_path / "nope"), says="not a folder")


def test_gateway_refuses_a_port_in_use_in_one_line_before_saying_it_serves(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, listening: int
) -> None:
    says = f"mcpcache gateway: 127.0.0.1:{listening} is in use (another server is listening there); choose another"
    assert_one_line(capsys, "gateway", "--upstream", "http://127.0.0.1:9/mcp", "--port", str(listening), says=says)
    config = tmp_path / "gateway.toml"
    config.write_text(f'[gateway]\nport = {listening}\n\n[upstreams.nb]\nurl = "http://127.0.0.1:9/mcp"\n')
    assert_one_line(capsys, "gateway", "--config", str(config), says=says)


def test_bench_refuses_missing_and_malformed_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing, malformed, foreign = tmp_path / "missing.json", tmp_path / "malformed.json", tmp_path / "foreign.json"
    malformed.write_text('{"raw": [')
    foreign.write_text(json.dumps({"hello": "world"}))
    assert_one_line(capsys, "bench", "--report", str(missing), says=f"{missing}: cannot read it (no such file")
    assert_one_line(capsys, "bench", "--report", str(malformed), says=f"{malformed}: not JSON")
    assert_one_line(capsys, "bench", "--report", str(foreign), says="not a bench.json")
    assert_one_line(capsys, "bench", "--compare", str(missing), str(foreign), says="cannot read it")
    assert_one_line(capsys, "bench", "--compare", str(foreign), says="requires 2 arguments")
    assert_one_line(capsys, "bench", "--sizes", "3XB", says="cannot read '3XB' as a size")
    assert_one_line(capsys, "nope", says="No such command 'nope'")
    assert sorted(tmp_path.iterdir()) == sorted([malformed, foreign])


@pytest.mark.parametrize(
    "arguments",
    [[], ["demo-server"], ["bench"], ["check"], ["gateway"], ["proxy"], ["cache", "ls"], ["cache", "clear"]],
)
def test_help_names_every_value_and_shows_no_type_placeholders(
    capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    code, out, _ = run(capsys, *arguments, "--help")
    assert code == 0
    assert "Usage: mcpcache" in out
    for placeholder in ("<bool>", "<str>", "<int>", "<float>", "<path>"):
        assert placeholder not in out, f"{placeholder} in mcpcache {' '.join(arguments)} --help"


def test_demo_server_help_names_its_tools_its_ttl_and_the_plain_fastmcp_mode(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = run(capsys, "demo-server", "--help")
    text = " ".join(out.replace("│", " ").split())  # the help is drawn in boxes and wrapped
    for name in ("list_notebooks", "read_notebook(path)", "read_cell(path, index)", "edit_cell(path, index, source)"):
        assert name in text
    assert "fresh for --ttl-ms (5 s by default)" in text
    assert "--ttl-ms MS" in text
    assert "--no-revalidation Plain FastMCP, without mcpcache" in text
    assert "--validator" in text
