"""What a proxy command line means, and the translation rules between host and upstream (no processes)."""

from __future__ import annotations

from pathlib import Path

import mcp_types as mt
import pytest
from typer.testing import CliRunner

from mcpcache.cli import app
from mcpcache.protocol import META_KEY
from mcpcache.proxy.settings import (
    HttpUpstream,
    SettingsError,
    StdioUpstream,
    default_partition,
    forwarded_meta,
    model_result,
    parse_header,
    passes_whole,
    store_choice,
    upstream_from,
)


def test_a_command_after_the_separator_is_a_stdio_upstream() -> None:
    upstream = upstream_from(["npx", "-y", "server", "--flag"], None, [], "/work")
    assert upstream == StdioUpstream("npx", ("-y", "server", "--flag"), "/work")


def test_a_url_is_an_http_upstream_with_its_headers() -> None:
    upstream = upstream_from([], "https://host/mcp", ["Authorization: Bearer abc", "X-Team:  blue "], None)
    assert upstream == HttpUpstream("https://host/mcp", (("Authorization", "Bearer abc"), ("X-Team", "blue")))


@pytest.mark.parametrize(
    ("command", "url", "headers", "message"),
    [
        ([], None, [], "name the upstream server"),
        (["x"], "http://h/mcp", [], "either --url or a command"),
        (["x"], None, ["A: b"], "--header needs --url"),
        ([" "], None, [], "command is empty"),
        ([], "ftp://h/mcp", [], "http:// or https://"),
        ([], "http:///mcp", [], "http:// or https://"),
        ([], "http://h/mcp", ["no colon"], "'Name: value'"),
        ([], "http://h/mcp", [": value"], "'Name: value'"),
        ([], "http://h/mcp", ["Bad Name: v"], "not a valid HTTP header name"),
        ([], "http://h/mcp", ["A: b\r\nInjected: yes"], "line break"),
    ],
)
def test_a_command_line_that_cannot_run_is_refused_in_one_line(
    command: list[str], url: str | None, headers: list[str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message) as refused:
        upstream_from(command, url, headers, None)
    assert "\n" not in str(refused.value)


def test_a_refused_header_is_not_echoed_whole() -> None:
    secret = "Bearer " + "s" * 500
    with pytest.raises(SettingsError) as refused:
        parse_header("Authorization " + secret)  # no colon: the whole thing would be the name
    assert len(str(refused.value)) < 200


def test_one_store_at_most() -> None:
    assert store_choice(Path("a.db"), None).sqlite_path == Path("a.db")
    with pytest.raises(SettingsError, match="at most one"):
        store_choice(Path("a.db"), "redis://localhost")
    with pytest.raises(SettingsError, match="redis://"):
        store_choice(None, "http://localhost")
    cluster = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"
    assert store_choice(None, cluster).redis_url == cluster
    with pytest.raises(SettingsError, match=r"redis\+cluster://"):
        store_choice(None, "cluster://127.0.0.1:7000")


def test_answers_fetched_with_different_credentials_live_in_different_partitions() -> None:
    env = {"PATH": "/bin"}
    alice = HttpUpstream("https://h/mcp", (("Authorization", "Bearer alice"),))
    bob = HttpUpstream("https://h/mcp", (("Authorization", "Bearer bob"),))
    assert default_partition(alice, env) != default_partition(bob, env)
    assert default_partition(alice, env) == default_partition(
        HttpUpstream("https://h/mcp", (("authorization", "Bearer alice"),)), env
    )
    assert "alice" not in default_partition(alice, env)  # a digest, never the credential
    assert default_partition(HttpUpstream("https://h/mcp"), env) == ""
    # The URL's userinfo is a credential too: httpx sends it as basic auth.
    in_url = [default_partition(HttpUpstream(f"https://{who}@h/mcp"), env) for who in ("alice:pw-a", "bob:pw-b")]
    assert in_url[0] != in_url[1]
    assert "" not in in_url
    assert all("pw-" not in partition for partition in in_url)
    # A stdio server takes its tokens from its environment.
    stdio = StdioUpstream("x", ())
    assert default_partition(stdio, {"TOKEN": "a"}) != default_partition(stdio, {"TOKEN": "b"})
    assert default_partition(stdio, {"TOKEN": "a"}) == default_partition(stdio, {"TOKEN": "a"})
    assert "a" not in default_partition(stdio, {"TOKEN": "a"}).partition(":")[0]


def test_the_host_meta_goes_upstream_without_its_connection_progress_and_cache_keys() -> None:
    meta = {
        mt.PROTOCOL_VERSION_META_KEY: "2026-07-28",
        mt.CLIENT_INFO_META_KEY: {"name": "host"},
        mt.CLIENT_CAPABILITIES_META_KEY: {},
        "progressToken": 7,
        META_KEY: {"etag": 'W/"00000000000000000000000000000000"'},
        "traceparent": "00-abc-def-01",
        "io.modelcontextprotocol/logLevel": "info",
    }
    assert forwarded_meta(meta) == {"traceparent": "00-abc-def-01", "io.modelcontextprotocol/logLevel": "info"}
    assert forwarded_meta({"progressToken": 1}) is None
    assert forwarded_meta(None) is None


def test_errors_and_pictures_are_shown_to_the_model_as_upstream_sent_them() -> None:
    text = mt.TextContent(type="text", text="{}")
    image = mt.ImageContent(type="image", data="AAAA", mime_type="image/png")
    assert not passes_whole(mt.CallToolResult(content=[text]))
    assert passes_whole(mt.CallToolResult(content=[text], is_error=True))
    assert passes_whole(mt.CallToolResult(content=[text, image]))


def test_a_view_reaches_the_host_as_text_and_structured_content() -> None:
    envelope = {"rows": "<elided ...>", "_cache_uri": "mcp+cache://c/AAAAAAAAAAA"}
    result = model_result(envelope, '{"rows": "<elided ...>"}', {META_KEY: {"ttlMs": 5}}, is_error=False)
    assert result.structured_content == envelope
    assert [block.text for block in result.content if isinstance(block, mt.TextContent)] == ['{"rows": "<elided ...>"}']
    assert result.meta == {META_KEY: {"ttlMs": 5}}


def test_the_command_refuses_bad_input_before_starting_anything() -> None:
    runner = CliRunner()
    cases = [
        (["proxy"], "name the upstream server"),
        (["proxy", "--store", "a.db", "--redis", "redis://x", "--", "srv"], "at most one"),
        (["proxy", "--conversation", "c", "--", "srv"], "--conversation needs --refs"),
        (["proxy", "--url", "http://h/mcp", "--header", "oops"], "'Name: value'"),
    ]
    for args, message in cases:
        outcome = runner.invoke(app, args)
        assert outcome.exit_code == 2, (args, outcome.output)
        assert message in outcome.output


def test_an_upstream_that_cannot_start_is_one_line_and_exit_1(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-server")
    outcome = CliRunner().invoke(app, ["proxy", "--quiet", "--store", str(tmp_path / "p.db"), "--", missing])
    assert outcome.exit_code == 1, outcome.output
    lines = [line for line in outcome.output.splitlines() if line.startswith("mcpcache proxy:")]
    assert len(lines) == 1
    assert "could not connect to the upstream server" in lines[0]
