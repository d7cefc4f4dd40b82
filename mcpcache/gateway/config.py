"""The gateway's configuration: a TOML file (or a few command-line options) read into checked settings.

Everything here is pure: reading text, validating it, naming the line of a mistake. A bad file is one
`ConfigError` whose message names the file, the line and the key of every problem, e.g.
`gateway.toml, line 12: upstreams.notebooks.tools.read_notebook.ttl_ms: must be an integer number of
milliseconds`. Nothing starts until the whole file is good.

The reference for every key, with an example, is docs/gateway.md.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from mcpcache.client.policy import DEFAULT_MAX_ANSWER_BYTES
from mcpcache.gateway.toml_lines import TomlLines
from mcpcache.key_arguments import KeyArguments
from mcpcache.protocol import MAX_TTL_MS, META_KEY, Scope
from mcpcache.server.history import DEFAULT_HISTORY_BYTES
from mcpcache.stores.redis_shards import CLUSTER_SCHEMES, REDIS_URL_FORMS, SINGLE_SCHEMES

__all__ = [
    "AuthSettings",
    "ConfigError",
    "GatewayConfig",
    "JWTSettings",
    "ServeSettings",
    "StaticToken",
    "StoreSettings",
    "ToolSettings",
    "UpstreamSettings",
    "load_config",
    "parse_config",
    "parse_tool_option",
    "quick_config",
    "with_overrides",
]

DEFAULT_PORT = 8765
DEFAULT_DECODED_BYTES = 16 * 1024 * 1024
DEFAULT_PARTITIONS = 64
DEFAULT_STORE_NAMESPACE = "mcpcache-gateway"

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names where (file, line, key) and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolSettings(_Strict):
    """How the gateway treats one upstream tool's answers (docs/gateway.md, `[upstreams.NAME.tools.TOOL]`)."""

    ttl_ms: int | None = Field(default=None, ge=0, le=MAX_TTL_MS, strict=True)
    """How long an answer is fresh. None: what the upstream's own cache block says, else 0."""
    scope: Scope = "private"
    """public: the answer holds nothing narrowed by who asked, so it may be shared across callers."""
    etag: bool = True
    """Stamp a tag and answer not-modified to a caller that sends the current one."""
    kind: str | None = None
    """The `kind` a not-modified reply names when the answer has none of its own."""
    deltas: bool = True
    """Send a caller that holds an older answer the change only (a delta reply), when it asks for one and
    the store's history holds its answer. False: this tool's answers are never kept in the history."""
    stale_while_revalidate_ms: int | None = Field(default=None, ge=0, le=MAX_TTL_MS, strict=True)
    """How long after freshness ends a caller's cache may serve the answer at once while it revalidates in the
    background. None: what the upstream's own cache block says, else none."""
    stale_if_error_ms: int | None = Field(default=None, ge=0, le=MAX_TTL_MS, strict=True)
    """How long after freshness ends a caller's cache may serve the answer when the gateway cannot answer
    (unreachable, timing out, a JSON-RPC error). None: what the upstream's own cache block says, else none."""
    key_arguments: list[str] | None = None
    """The top-level arguments that name the answer (others, a request id say, never change it): the gateway's
    keys use only these, and its tools/list declares them (`keyArguments`) to callers. None: every argument."""
    ignore_arguments: list[str] | None = None
    """The top-level arguments that never change the answer (`ignoreArguments`); the other way of saying it."""

    @field_validator("key_arguments", "ignore_arguments")
    @classmethod
    def _argument_names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not name for name in value):
            raise ValueError("argument names must not be empty")
        return value

    @model_validator(mode="after")
    def _one_key_rule(self) -> ToolSettings:
        if self.key_arguments is not None and self.ignore_arguments is not None:
            raise ValueError("give key_arguments or ignore_arguments, not both")
        return self

    def key_rule(self) -> KeyArguments | None:
        """Which arguments name the answer; None: every argument."""
        if self.key_arguments is not None:
            return KeyArguments.keep(self.key_arguments)
        if self.ignore_arguments:
            return KeyArguments.drop(self.ignore_arguments)
        return None


class UpstreamSettings(_Strict):
    """One server behind the gateway: a URL (streamable HTTP) or a command (stdio), and its declared tools."""

    url: str | None = None
    command: list[str] | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    """stdio only: the environment of the command (None: the MCP SDK's default one)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP only: headers the gateway sends upstream (its own credentials, say)."""
    headers_env: dict[str, str] = Field(default_factory=dict)
    """HTTP only: headers whose values are read from environment variables, header -> variable name."""
    namespace: str | None = None
    """Prefix for the upstream's tools, prompts and resources (`NS_tool`), needed when two upstreams share names."""
    forward_headers: bool = False
    """HTTP only: send each caller's HTTP headers (its Authorization included) upstream with the call."""
    trust_upstream_tags: bool = Field(default=True, strict=True)
    """false: the gateway validates with its own tags only: it never forwards a tag to this upstream and
    never takes the upstream's tag or not-modified reply for the answer's; it hashes every answer itself
    (content, structured content and `_meta`). For an upstream whose tags do not cover everything its
    answers carry (docs/gateway.md, "Upstreams that already stamp")."""
    tools: dict[str, ToolSettings] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0]):
            raise ValueError('must name a program, e.g. command = ["python", "-m", "my_server"]')
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]+", value):
            raise ValueError("must be letters, digits, '_' or '-'")
        return value

    @model_validator(mode="after")
    def _one_endpoint(self) -> UpstreamSettings:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of url (streamable HTTP) and command (stdio)")
        if self.url is not None and (self.cwd is not None or self.env is not None):
            raise ValueError("cwd and env are for a command (stdio) upstream, not a url")
        if self.command is not None and (self.headers or self.headers_env or self.forward_headers):
            raise ValueError("headers, headers_env and forward_headers are for a url (HTTP) upstream, not a command")
        return self

    def public_name(self, tool: str) -> str:
        """The name callers of the gateway use for `tool` (FastMCP's namespace prefix)."""
        return f"{self.namespace}_{tool}" if self.namespace else tool


class StoreSettings(_Strict):
    """The store replicas share (`[store]`); without one the gateway only stamps tags and answers not-modified."""

    redis: str | None = None
    sqlite: str | None = None
    memory: bool = False
    namespace: str = DEFAULT_STORE_NAMESPACE
    decoded_bytes: int = Field(default=DEFAULT_DECODED_BYTES, ge=0, strict=True)
    """Bytes of stored answers each live partition keeps decoded in memory in front of the store."""
    partitions: int = Field(default=DEFAULT_PARTITIONS, ge=1, strict=True)
    """How many callers' partitions a process keeps ready at once (least recently used go first)."""
    max_answer_bytes: int = Field(default=DEFAULT_MAX_ANSWER_BYTES, ge=1, strict=True)
    """The largest answer kept, in stored bytes; a larger one is passed to the caller and not stored."""
    delta_history_bytes: int = Field(default=DEFAULT_HISTORY_BYTES, ge=0, strict=True)
    """The bound of the answers kept in the store to send deltas against (all replicas together); 0: none
    kept, no delta replies."""
    required: bool = Field(default=False, strict=True)
    """Refuse to start (exit 2) when the store does not answer at start, instead of serving without it."""

    @field_validator("redis")
    @classmethod
    def _redis(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith((*SINGLE_SCHEMES, *CLUSTER_SCHEMES)):
            raise ValueError(f"must be {REDIS_URL_FORMS}")
        return value

    @field_validator("namespace")
    @classmethod
    def _store_namespace(cls, value: str) -> str:
        if not value or "{" in value or "}" in value:
            raise ValueError("must be non-empty and free of braces")
        return value

    @model_validator(mode="after")
    def _one_store(self) -> StoreSettings:
        chosen = [name for name, on in (("redis", self.redis), ("sqlite", self.sqlite), ("memory", self.memory)) if on]
        if len(chosen) != 1:
            raise ValueError("give exactly one of redis, sqlite and memory = true")
        return self


class StaticToken(_Strict):
    """A bearer token the gateway accepts, and whom it stands for (for tests and small deployments)."""

    token: str | None = None
    token_env: str | None = None
    client_id: str
    subject: str | None = None
    scopes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_token(self) -> StaticToken:
        if (self.token is None) == (self.token_env is None):
            raise ValueError("give exactly one of token and token_env")
        return self


class JWTSettings(_Strict):
    """A JWT verifier: signed tokens from an identity provider (FastMCP's `JWTVerifier`)."""

    jwks_uri: str | None = None
    public_key: str | None = None
    public_key_file: str | None = None
    issuer: str | None = None
    audience: str | None = None
    algorithm: str | None = None

    @model_validator(mode="after")
    def _one_key(self) -> JWTSettings:
        keys = [k for k in (self.jwks_uri, self.public_key, self.public_key_file) if k is not None]
        if len(keys) != 1:
            raise ValueError("give exactly one of jwks_uri, public_key and public_key_file")
        return self


class AuthSettings(_Strict):
    """Who may call the gateway, and how their private answers are kept apart (`[auth]`)."""

    kind: Literal["none", "static", "jwt"] = "none"
    partition_by: Literal["principal", "token"] = "principal"
    """principal: one partition per verified identity (issuer, subject, client id, scopes); token: one per token."""
    required_scopes: list[str] = Field(default_factory=list)
    tokens: list[StaticToken] = Field(default_factory=list)
    jwt: JWTSettings | None = None

    @model_validator(mode="after")
    def _matching(self) -> AuthSettings:
        if self.kind == "static" and not self.tokens:
            raise ValueError('kind = "static" needs at least one [[auth.tokens]]')
        if self.kind != "static" and self.tokens:
            raise ValueError('[[auth.tokens]] are only read with kind = "static"')
        if self.kind == "jwt" and self.jwt is None:
            raise ValueError('kind = "jwt" needs an [auth.jwt] table')
        if self.kind != "jwt" and self.jwt is not None:
            raise ValueError('[auth.jwt] is only read with kind = "jwt"')
        return self


class ServeSettings(_Strict):
    """Where the gateway listens (`[gateway]`)."""

    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, strict=True)
    """0: any free port (the one chosen is printed)."""
    path: str = "/mcp"
    name: str = "mcpcache-gateway"
    instructions: str | None = None
    """What the gateway tells callers' models about itself (upstreams' own instructions are not forwarded)."""
    meta_key: str = META_KEY
    json_response: bool = Field(default=False, strict=True)
    """Answer every request with one JSON body instead of an event stream: less CPU per call, but no progress
    notification and no request of the upstream's (sampling, elicitation) reaches the caller during a call."""
    http: Literal["auto", "h11", "httptools"] = "auto"
    """uvicorn's HTTP/1.1 parser: "auto" takes httptools (in C, installed with mcpcache[cli]) when it can be
    imported, else h11 (pure Python): a few tenths of a millisecond of CPU per request between them."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names callers may reach the gateway by besides its own address and localhost (a name a reverse
    proxy in front of it passes on, say): any other Host, or an Origin of another site, is refused (421/403)
    on a loopback bind, which is what stops a web page from reaching it by DNS rebinding. When set, Host
    is checked on any bind. Ports are not compared; "*.example.com" names the subdomains."""
    access_log: bool = Field(default=False, strict=True)
    """uvicorn's line per request on stderr ("POST /mcp 200"): off unless asked for, since writing it costs
    about 7 % of a replica's CPU per fresh hit, half of what the cache's own work takes (a fresh hit's
    cache outcome is logged at DEBUG)."""

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value


class GatewayConfig(_Strict):
    gateway: ServeSettings = Field(default_factory=ServeSettings)
    store: StoreSettings | None = None
    auth: AuthSettings = Field(default_factory=AuthSettings)
    upstreams: dict[str, UpstreamSettings]

    @field_validator("upstreams")
    @classmethod
    def _some(cls, value: dict[str, UpstreamSettings]) -> dict[str, UpstreamSettings]:
        if not value:
            raise ValueError('name at least one upstream, e.g. [upstreams.notebooks] url = "http://..."')
        for name in value:
            if not _NAME.fullmatch(name):
                raise ValueError(f"upstream name {name!r}: use letters, digits, '_', '.' or '-'")
        return value

    def clashes(self) -> list[tuple[tuple[str, ...], str]]:
        """Declared tools that two upstreams would both offer under one name: (where, why) for each."""
        seen: dict[str, str] = {}
        found: list[tuple[tuple[str, ...], str]] = []
        for upstream_name, upstream in self.upstreams.items():
            for tool in upstream.tools:
                public = upstream.public_name(tool)
                if public in seen:
                    why = f"tool {public!r} is also declared by upstream {seen[public]!r}; give one of them a namespace"
                    found.append((("upstreams", upstream_name, "tools", tool), why))
                seen.setdefault(public, upstream_name)
        return found


# Reading a file ---------------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read and check a TOML file; ConfigError names the line and key of every problem."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the configuration ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not UTF-8 text") from None
    return parse_config(text, str(source), environ)


def parse_config(text: str, source: str = "gateway.toml", environ: Mapping[str, str] | None = None) -> GatewayConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(error, TomlLines(text), source) for error in exc.errors()]
        raise ConfigError("\n".join(problems)) from None
    lines = TomlLines(text)
    clashes = [_at(lines, source, where, why) for where, why in config.clashes()]
    if clashes:
        raise ConfigError("\n".join(clashes))
    _check_environment(config, lines, source, os.environ if environ is None else environ)
    return config


def _check_environment(config: GatewayConfig, lines: TomlLines, source: str, environ: Mapping[str, str]) -> None:
    """Every variable the file names must be set: a missing secret is a startup error, not a 401 later."""
    problems: list[str] = []
    for name, upstream in config.upstreams.items():
        for header, variable in upstream.headers_env.items():
            if variable not in environ:
                where: tuple[int | str, ...] = ("upstreams", name, "headers_env", header)
                problems.append(_at(lines, source, where, f"environment variable {variable} is not set"))
    for index, token in enumerate(config.auth.tokens):
        if token.token_env is not None and not environ.get(token.token_env):
            missing = f"environment variable {token.token_env} is not set"
            problems.append(_at(lines, source, ("auth", "tokens", index, "token_env"), missing))
    if problems:
        raise ConfigError("\n".join(problems))


def _dotted(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            shown = part if _NAME.fullmatch(part) else f'"{part}"'
            out += f".{shown}" if out else shown
    return out


def _at(lines: TomlLines, source: str, loc: Sequence[int | str], message: str) -> str:
    line = lines.line_of(loc)
    where = f"{source}, line {line}" if line is not None else source
    return f"{where}: {_dotted(loc)}: {message}" if loc else f"{where}: {message}"


_FRIENDLY = {
    "extra_forbidden": "unknown key",
    "missing": "missing (required)",
    "int_type": "must be an integer",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
}


def _describe(error: ErrorDetails, lines: TomlLines, source: str) -> str:
    loc = [part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-"))]
    kind = error["type"]
    message = _FRIENDLY.get(kind) or str(error["msg"]).removeprefix("Value error, ")
    if kind in ("int_type", "greater_than_equal", "less_than_equal") and loc and str(loc[-1]).endswith("_ms"):
        message = f"must be an integer number of milliseconds between 0 and {MAX_TTL_MS} (24 h)"
    if kind == "extra_forbidden":
        return _at(lines, source, loc, message)
    if "input" in error and kind not in ("missing",) and not isinstance(error["input"], dict | list):
        message += f" (got {error['input']!r})"
    return _at(lines, source, loc, message)


_STALE_FLAGS = ("stale_while_revalidate_ms", "stale_if_error_ms")
"""The `--tool` flags that take a value, named as the TOML keys they stand for."""


def parse_tool_option(text: str) -> tuple[str, ToolSettings]:
    """`NAME=TTL_MS[:public|:private][:notag][:nodelta][:stale_while_revalidate_ms=MS][:stale_if_error_ms=MS]`,
    e.g. `read_notebook=5000` or `list_items=60000:public:stale_if_error_ms=600000`."""
    name, equals, rest = text.partition("=")
    if not equals or not name:
        raise ConfigError(f"--tool {text!r}: write NAME=TTL_MS, e.g. --tool read_notebook=5000")
    ttl_text, *flags = rest.split(":")
    try:
        ttl = int(ttl_text)
    except ValueError:
        raise ConfigError(f"--tool {text!r}: {ttl_text!r} is not a whole number of milliseconds") from None
    scope: Scope = "private"
    etag = deltas = True
    windows: dict[str, int] = {}
    for flag in flags:
        key, has_value, value = flag.partition("=")
        if has_value and key in _STALE_FLAGS:
            try:
                windows[key] = int(value)
            except ValueError:
                raise ConfigError(f"--tool {text!r}: {key} {value!r} is not a whole number of milliseconds") from None
        elif flag in ("public", "private"):
            scope = "public" if flag == "public" else "private"
        elif flag == "notag":
            etag = False
        elif flag == "nodelta":
            deltas = False
        else:
            raise ConfigError(
                f"--tool {text!r}: unknown flag {flag!r} (public, private, notag, nodelta, "
                "stale_while_revalidate_ms=MS or stale_if_error_ms=MS)"
            )
    try:
        return name, ToolSettings(ttl_ms=ttl, scope=scope, etag=etag, deltas=deltas, **windows)
    except ValidationError:
        raise ConfigError(
            f"--tool {text!r}: the ttl and the stale windows must be between 0 and {MAX_TTL_MS} ms (24 h)"
        ) from None


def quick_config(
    *,
    url: str | None,
    command: Sequence[str] | None,
    tools: Sequence[str],
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
) -> GatewayConfig:
    """The configuration of `mcpcache gateway --upstream URL --tool NAME=TTL ...` (one upstream, no auth)."""
    declared = dict(parse_tool_option(text) for text in tools)
    upstream: dict[str, Any] = {"tools": declared}
    if url is not None:
        upstream["url"] = url
    if command:
        upstream["command"] = list(command)
    try:
        return GatewayConfig.model_validate(
            {"gateway": {"host": host, "port": port}, "upstreams": {"upstream": upstream}}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"{_dotted(first['loc'])}: {str(first['msg']).removeprefix('Value error, ')}") from None


def with_overrides(
    config: GatewayConfig,
    *,
    redis: str | None = None,
    host: str | None = None,
    port: int | None = None,
    require_store: bool = False,
) -> GatewayConfig:
    """`config` with the command line's `--redis`, `--host`, `--port` and `--require-store` in place of the
    file's."""
    data = config.model_dump(exclude_unset=True)
    if redis is not None:
        # The store's location changes; its other settings (namespace, bounds) stay as the file sets them.
        kept = {key: value for key, value in data.get("store", {}).items() if key not in ("redis", "sqlite", "memory")}
        data["store"] = {**kept, "redis": redis}
    if require_store:
        if "store" not in data:
            raise ConfigError("--require-store: there is no store to require ([store] or --redis names one)")
        data["store"]["required"] = True
    gateway = data.setdefault("gateway", {})
    if host is not None:
        gateway["host"] = host
    if port is not None:
        gateway["port"] = port
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = {"store": "--redis", "gateway": "--host/--port"}.get(str(first["loc"][0]), _dotted(first["loc"]))
        raise ConfigError(f"{option}: {str(first['msg']).removeprefix('Value error, ')}") from None
