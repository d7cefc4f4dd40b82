"""A cache folder that cannot be used: one line and exit 2 from the command, a miss and one warning in the
library, never a traceback and never a failed call.

The folder is made unusable the way a user makes it so: `MCPCACHE_DIR` names a file. (As root, which CI
is, a read-only folder is still writable, so the file stands for every kind of unusable folder: the check
and the message are the same.)
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import fastmcp
import pytest
from test_cli_errors import assert_one_line

from mcpcache import ToolCache
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy


@pytest.fixture
def unusable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "not-a-folder"
    folder.write_text("a file where the cache folder should be")
    monkeypatch.setenv("MCPCACHE_DIR", str(folder))
    return folder


@pytest.mark.parametrize(
    "arguments", [["cache", "ls"], ["cache", "stats"], ["cache", "clear"], ["proxy", "--", "python", "-c", "pass"]]
)
def test_the_command_refuses_an_unusable_cache_folder_in_one_line(
    arguments: list[str], unusable: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_one_line(capsys, *arguments, says=f"MCPCACHE_DIR={unusable} cannot be used as a folder")


def counted_server(runs: list[int]) -> fastmcp.FastMCP:
    server: fastmcp.FastMCP = fastmcp.FastMCP("counted")

    @server.tool
    def read(key: str) -> dict[str, object]:
        runs.append(1)
        return {"key": key, "run": len(runs)}

    install(server, {"read": CachePolicy(ttl_ms=60_000)})
    return server


@pytest.mark.anyio
async def test_the_library_takes_an_unusable_cache_folder_for_a_miss_with_one_warning(
    unusable: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcpcache")
    runs: list[int] = []
    async with ToolCache() as cache, fastmcp.Client(counted_server(runs)) as client:
        view = cache.wrap(client)
        calls = [await view.call_mcp("read", {"key": "k"}) for _ in range(3)]
    assert [call.result.structured_content["run"] for call in calls] == [1, 2, 3]  # type: ignore[index]
    assert [call.outcome.status for call in calls] == ["miss"] * 3
    for call in calls:  # the real reason, not "the store holds a newer answer"
        assert call.outcome.reason.startswith(
            f"miss: the store failed (CacheFolderError: MCPCACHE_DIR={unusable} cannot be used as a folder"
        )
        assert call.outcome.reason.endswith("; not stored")
    assert cache.stats.store_failures == 6  # a lookup and a save per call
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1, [record.getMessage() for record in warnings]
    assert "cannot be used as a folder" in warnings[0].getMessage()
    assert len(caplog.text.splitlines()) == 1
    assert await anyio.Path(unusable).is_file(), "nothing was written in place of the user's file"
