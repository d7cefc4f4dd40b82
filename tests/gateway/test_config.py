"""The gateway's configuration: the documented example loads, and every mistake is named by line and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcpcache.cli import app
from mcpcache.gateway.config import (
    ConfigError,
    StoreSettings,
    ToolSettings,
    load_config,
    parse_config,
    parse_tool_option,
    quick_config,
    with_overrides,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"
UPSTREAM = '[upstreams.nb]\nurl = "http://127.0.0.1:8000/mcp"\n'


def documented_example() -> str:
    """The TOML example of docs/gateway.md (the first ```toml block)."""
    match = re.search(r"```toml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert match is not None, "docs/gateway.md has no ```toml example"
    return match.group(1)


def test_the_documented_example_loads() -> None:
    config = parse_config(documented_example(), environ={"NOTEBOOKS_TOKEN": "t", "ALICE_TOKEN": "a"})
    assert config.store is not None
    assert config.store.redis is not None
    assert config.store.max_answer_bytes == 64 * 1024 * 1024
    assert config.auth.kind == "static"
    declared = {up.public_name(tool) for up in config.upstreams.values() for tool in up.tools}
    assert "read_notebook" in declared


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            UPSTREAM + '\n[upstreams.nb.tools.read_notebook]\nttl_ms = "5s"\n',
            "g.toml, line 5: upstreams.nb.tools.read_notebook.ttl_ms: must be an integer number of milliseconds "
            "between 0 and 86400000 (24 h) (got '5s')",
        ),
        (
            UPSTREAM + "\n[upstreams.nb.tools.read_notebook]\nttl_ms = 5000\ntll = 3\n",
            "g.toml, line 6: upstreams.nb.tools.read_notebook.tll: unknown key",
        ),
        (
            UPSTREAM + "\n[upstreams.nb.tools.read_notebook]\nscope = 'shared'\n",
            "g.toml, line 5: upstreams.nb.tools.read_notebook.scope: Input should be 'private' or 'public' "
            "(got 'shared')",
        ),
        (
            '[gateway]\nport = 8000\n\n[upstreams.nb]\nurl = "http://a/mcp"\ncommand = ["srv"]\n',
            "g.toml, line 4: upstreams.nb: give exactly one of url (streamable HTTP) and command (stdio)",
        ),
        ("[gateway]\nport = 8000\n", "g.toml: upstreams: missing (required)"),
        (
            UPSTREAM + '\n[store]\nredis = "redis://127.0.0.1:6379"\nsqlite = "x.db"\n',
            "g.toml, line 4: store: give exactly one of redis, sqlite and memory = true",
        ),
        (
            UPSTREAM + "\n[store]\nmemory = true\nmax_answer_bytes = 0\n",
            "g.toml, line 6: store.max_answer_bytes: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            UPSTREAM + '\n[store]\nmemory = true\nmax_answer_bytes = "64MB"\n',
            "g.toml, line 6: store.max_answer_bytes: must be an integer (got '64MB')",
        ),
        (
            UPSTREAM + '\n[auth]\nkind = "static"\n',
            'g.toml, line 4: auth: kind = "static" needs at least one [[auth.tokens]]',
        ),
        (
            UPSTREAM + '[upstreams.nb.tools."read notebook"]\nttl_ms = 1\n[upstreams.other]\ncommand = ["x"]\n'
            '[upstreams.other.tools."read notebook"]\n',
            "g.toml, line 7: upstreams.other.tools.\"read notebook\": tool 'read notebook' is also declared by "
            "upstream 'nb'; give one of them a namespace",
        ),
    ],
)
def test_a_mistake_is_named_by_line_and_key(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "g.toml", environ={})
    assert str(raised.value) == expected


def test_bad_toml_names_its_line() -> None:
    with pytest.raises(ConfigError, match=r"^g.toml: not valid TOML: .*line 3"):
        parse_config(UPSTREAM + "ttl_ms = = 3\n", "g.toml")


def test_a_secret_named_by_an_unset_variable_is_a_startup_error() -> None:
    text = UPSTREAM + '\n[auth]\nkind = "static"\n\n[[auth.tokens]]\ntoken_env = "GW_NOPE"\nclient_id = "alice"\n'
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "g.toml", environ={})
    assert str(raised.value) == "g.toml, line 8: auth.tokens[0].token_env: environment variable GW_NOPE is not set"
    assert parse_config(text, "g.toml", environ={"GW_NOPE": "s3cret"}).auth.tokens[0].client_id == "alice"


def test_several_mistakes_are_all_named(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(UPSTREAM + "bogus = 1\n[gateway]\nport = -1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    lines = str(raised.value).splitlines()
    assert lines == [
        f"{path}, line 5: gateway.port: Input should be greater than or equal to 0 (got -1)",
        f"{path}, line 3: upstreams.nb.bogus: unknown key",
    ]


def test_the_one_command_options() -> None:
    assert parse_tool_option("read_notebook=5000") == ("read_notebook", ToolSettings(ttl_ms=5000))
    assert parse_tool_option("items=60000:public:notag") == (
        "items",
        ToolSettings(ttl_ms=60000, scope="public", etag=False),
    )
    assert parse_tool_option("read_notebook=0:nodelta") == ("read_notebook", ToolSettings(ttl_ms=0, deltas=False))
    for bad, why in [("x", "NAME=TTL_MS"), ("x=soon", "not a whole number"), ("x=1:shared", "unknown flag")]:
        with pytest.raises(ConfigError, match=why):
            parse_tool_option(bad)
    config = quick_config(url="http://127.0.0.1:9/mcp", command=None, tools=["read_notebook=5000"])
    assert config.upstreams["upstream"].tools["read_notebook"].ttl_ms == 5000
    shared = with_overrides(config, redis="redis://127.0.0.1:6379/0", port=0)
    assert shared.store is not None
    assert shared.store.redis == "redis://127.0.0.1:6379/0"
    assert shared.gateway.port == 0
    with pytest.raises(ConfigError, match="--redis"):
        with_overrides(config, redis="http://nope")
    cluster = "rediss+cluster://127.0.0.1:7000,127.0.0.1:7001"
    assert with_overrides(config, redis=cluster).store.redis == cluster  # type: ignore[union-attr]
    in_file = parse_config(UPSTREAM + f'\n[store]\nredis = "{cluster}"\n')
    assert in_file.store is not None
    assert in_file.store.redis == cluster


def test_the_one_command_options_set_the_stale_windows_as_the_toml_keys_do() -> None:
    """Issue 23: `--tool` had no way to the stale windows the TOML has; the flags are named as its keys."""
    name, settings = parse_tool_option("read_notebook=5000:stale_while_revalidate_ms=30000:stale_if_error_ms=600000")
    assert (name, settings) == (
        "read_notebook",
        ToolSettings(ttl_ms=5000, stale_while_revalidate_ms=30000, stale_if_error_ms=600000),
    )
    assert parse_tool_option("items=0:public:stale_if_error_ms=0")[1].stale_if_error_ms == 0
    for bad, why in [
        ("x=1:stale_if_error_ms=soon", "not a whole number"),
        ("x=1:stale_if_error_ms=-1", "stale windows must be between 0"),
        ("x=1:stale_while_revalidate_ms=99999999999", "stale windows must be between 0"),
        ("x=1:stale=5", "unknown flag"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_tool_option(bad)
    config = quick_config(url="http://127.0.0.1:9/mcp", command=None, tools=["r=5:stale_if_error_ms=7"])
    assert config.upstreams["upstream"].tools["r"].stale_if_error_ms == 7


def test_the_command_prints_one_clear_line_and_starts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(UPSTREAM + "\n[upstreams.nb.tools.read_notebook]\nttl_ms = -5\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["gateway", "--config", str(path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"mcpcache gateway: {path}, line 5: upstreams.nb.tools.read_notebook.ttl_ms: must be an integer number "
        "of milliseconds between 0 and 86400000 (24 h) (got -5)"
    ]
    result = CliRunner().invoke(app, ["gateway", "--upstream", "http://127.0.0.1:9/mcp", "--tool", "read_notebook"])
    assert result.exit_code == 2
    assert "write NAME=TTL_MS" in result.output


def test_deltas_are_on_by_default_and_turned_off_per_tool_or_for_the_store() -> None:
    text = (
        "[store]\nmemory = true\ndelta_history_bytes = 0\n"
        '[upstreams.nb]\nurl = "http://127.0.0.1:8000/mcp"\n'
        "[upstreams.nb.tools.read_notebook]\nttl_ms = 0\n"
        "[upstreams.nb.tools.read_cell]\ndeltas = false\n"
    )
    config = parse_config(text)
    assert config.store is not None
    assert config.store.delta_history_bytes == 0
    tools = config.upstreams["nb"].tools
    assert tools["read_notebook"].deltas is True
    assert tools["read_cell"].deltas is False
    assert StoreSettings(memory=True).delta_history_bytes == 64 * 1024 * 1024
    with pytest.raises(ConfigError, match=r"line 3: store.delta_history_bytes: .*greater than or equal to 0"):
        parse_config(text.replace("= 0", "= -1", 1))


def test_the_command_lines_redis_keeps_the_files_other_store_settings() -> None:
    text = (
        '[store]\nsqlite = "g.db"\nnamespace = "ns"\ndelta_history_bytes = 1000\ndecoded_bytes = 5\n'
        '[upstreams.nb]\nurl = "http://127.0.0.1:8000/mcp"\n'
    )
    store = with_overrides(parse_config(text), redis="redis://127.0.0.1:6379/0").store
    assert store is not None
    assert (store.redis, store.sqlite, store.namespace) == ("redis://127.0.0.1:6379/0", None, "ns")
    assert (store.delta_history_bytes, store.decoded_bytes) == (1000, 5)


def test_a_store_can_be_required_in_the_file_or_on_the_command_line_and_only_a_store() -> None:
    text = '[store]\nredis = "redis://127.0.0.1:6379/0"\nrequired = true\n' + UPSTREAM
    store = parse_config(text).store
    assert store is not None
    assert store.required
    config = quick_config(url="http://127.0.0.1:9/mcp", command=None, tools=[])
    required = with_overrides(config, redis="redis://127.0.0.1:6379/0", require_store=True).store
    assert required is not None
    assert required.required
    optional = with_overrides(config, redis="redis://127.0.0.1:6379/0").store
    assert optional is not None
    assert not optional.required
    with pytest.raises(ConfigError, match="--require-store: there is no store to require"):
        with_overrides(config, require_store=True)
    with pytest.raises(ConfigError):
        parse_config('[store]\nmemory = true\nrequired = "yes"\n' + UPSTREAM)
