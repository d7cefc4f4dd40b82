"""`mcpcache gateway`: the server half of mcpcache in front of MCP servers that never heard of it."""

from __future__ import annotations

import importlib.util
import ipaddress
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from mcpcache.cli.app import app, port_problem, say

if TYPE_CHECKING:
    from mcpcache.gateway.app import Gateway, Upstream
    from mcpcache.gateway.config import ServeSettings, UpstreamSettings


@app.command("gateway", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def gateway(
    ctx: typer.Context,
    config: Annotated[
        Path | None, typer.Option("--config", metavar="FILE", help="The gateway's TOML configuration.")
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream",
            metavar="URL",
            help="For a first try without a file: one upstream, a URL, or `--upstream -- COMMAND...` for stdio.",
        ),
    ] = None,
    tool: Annotated[
        list[str] | None,
        typer.Option(
            "--tool",
            metavar="NAME=TTL_MS",
            help="Declare a tool (with --upstream); add :public, :notag, :nodelta, "
            ":stale_while_revalidate_ms=MS or :stale_if_error_ms=MS.",
        ),
    ] = None,
    redis: Annotated[
        str | None, typer.Option("--redis", metavar="URL", help="Share one Redis store with other replicas.")
    ] = None,
    require_store: Annotated[
        bool,
        typer.Option(
            "--require-store",
            help="Exit (2) if the store does not answer at start, instead of serving without it until it does.",
        ),
    ] = False,
    host: Annotated[
        str | None, typer.Option("--host", metavar="HOST", help="Listen address (default 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", metavar="PORT", help="Listen port (default 8765; 0: any free port).")
    ] = None,
) -> None:
    """Serve upstream MCP servers over streamable HTTP, stamping tags and answering not-modified for the
    tools the configuration declares (docs/gateway.md)."""
    from mcpcache.gateway.config import ConfigError, load_config, quick_config, with_overrides

    # Click ends options at `--`: `--upstream -- python -m server` leaves "--" as the option's value.
    command = list(ctx.args)
    if upstream == "--":
        upstream = None
    try:
        if command and command[0].startswith("-") and not (upstream is None and config is None):
            raise ConfigError(f"unknown option {command[0]}")
        if config is not None:
            if upstream is not None or command or tool:
                raise ConfigError("--config names the upstreams and tools: drop --upstream, --tool and any command")
            settings = load_config(config)
        elif upstream is not None or command:
            if upstream is not None and command:
                raise ConfigError(f"give one upstream, a URL or a command after --, not both (got {' '.join(command)})")
            settings = quick_config(url=upstream, command=command or None, tools=tool or [])
        else:
            raise ConfigError("name the upstreams: --config FILE, or --upstream URL, or --upstream -- COMMAND...")
        settings = with_overrides(settings, redis=redis, host=host, port=port, require_store=require_store)
    except ConfigError as exc:
        print(f"mcpcache gateway: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None

    from mcpcache.gateway.app import build_gateway, open_store
    from mcpcache.gateway.outages import StoreOutages, install_logging
    from mcpcache.gateway.reach import reach_upstreams
    from mcpcache.processes import free_port

    serve = settings.gateway
    if serve.http == "httptools" and not _importable("httptools"):
        print('mcpcache gateway: [gateway] http = "httptools" needs httptools: pip install httptools', file=sys.stderr)
        raise typer.Exit(2)
    bound = serve.port or free_port()
    # Before anything is said or started: uvicorn finds a taken port only after the banner and startup.
    busy = port_problem(bound, serve.host)
    if busy is not None:
        print(f"mcpcache gateway: {serve.host}:{bound} is {busy}; choose another with --port", file=sys.stderr)
        raise typer.Exit(2)
    try:
        shared = open_store(settings.store) if settings.store is not None else None
        gateway = build_gateway(settings, store=shared, hold_upstream_stderr=True)
    except (OSError, ValueError) as exc:  # an unreadable key file, say: one line, nothing started
        print(f"mcpcache gateway: cannot start: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    declared = [
        f"{up.public_name(name)} ({t.ttl_ms if t.ttl_ms is not None else 'upstream'} ms, {t.scope})"
        for up in settings.upstreams.values()
        for name, t in up.tools.items()
    ]
    store_text = "none (tags and not-modified only)"
    if settings.store is not None:
        store_text = settings.store.redis or settings.store.sqlite or "memory (this process only)"
    # One line per store outage (and one when it is over), never a traceback: see mcpcache/gateway/outages.py.
    outages = StoreOutages(shared, _shown_store(store_text), say) if shared is not None else None
    install_logging(outages)

    async def serve_when_reached() -> int:
        try:
            if gateway.store is not None:
                await gateway.store.prepare()  # a cluster's client learns the cluster before the first caller
            failed = await reach_upstreams(gateway.upstreams)
            if failed:
                print(f"mcpcache gateway: {'; '.join(_unreachable(up, why) for up, why in failed)}", file=sys.stderr)
                return 2
            why = await outages.probe() if outages is not None else None
            if why is not None and settings.store is not None and settings.store.required:
                shown = _shown_store(store_text)
                text = f"the store {shown} is unreachable ({why}), and the store is required: not starting"
                print(f"mcpcache gateway: {text}", file=sys.stderr)
                return 2
            if why is not None and outages is not None:
                outages.went_down(why)
            say(f"mcpcache gateway: serving http://{serve.host}:{bound}{serve.path}")
            say(f"  upstreams: {'; '.join(f'{up.name}: {_shown(up.settings)}' for up in gateway.upstreams)}")
            say(f"  declared: {', '.join(declared) or 'none (every tool passes through untouched)'}")
            say(f"  store: {store_text}; auth: {settings.auth.kind}")
            # In this event loop: a stdio upstream's process and session, started above, serve the calls.
            async with anyio.create_task_group() as watching:
                if outages is not None:
                    watching.start_soon(outages.watch)
                await _serve(gateway, serve, bound)
                watching.cancel_scope.cancel()
            return 0
        finally:
            await gateway.aclose()

    code = anyio.run(serve_when_reached)
    if code:
        raise typer.Exit(code)


async def _serve(gateway: Gateway, serve: ServeSettings, port: int) -> None:
    """The gateway over streamable HTTP until it is stopped: what FastMCP's `run_http_async` does, with the
    event store that makes callers' SSE streams resumable (which `run_http_async` does not pass on)."""
    import fastmcp
    import uvicorn

    from mcpcache.gateway.app import KEEP_ALIVE_S
    from mcpcache.gateway.resume import resumable_streams

    # None leaves FastMCP's own setting (FASTMCP_JSON_RESPONSE) in charge, as before the key existed.
    json_response = serve.json_response or fastmcp.settings.json_response
    # Host and Origin checked on a loopback bind (DNS rebinding), and on any bind for named hosts; on a
    # loopback bind the address itself is allowed too, as FastMCP's run_http_async allows it.
    allowed = list(serve.allowed_hosts) or None
    if allowed is None:
        configured = fastmcp.settings.http_allowed_hosts
        allowed = [*(configured or []), serve.host] if _loopback(serve.host) else configured
    app = gateway.server.http_app(
        path=serve.path,
        json_response=json_response,
        host_origin_protection="auto",
        allowed_hosts=allowed,
        # Callers' SSE streams numbered, primed with `retry`, and resumable with Last-Event-ID.
        **resumable_streams(json_response=json_response),
    )
    config = uvicorn.Config(
        app,
        host=serve.host,
        port=port,
        timeout_keep_alive=KEEP_ALIVE_S,
        http=serve.http,
        access_log=serve.access_log,
        timeout_graceful_shutdown=2,
        lifespan="on",
        log_level=fastmcp.settings.log_level.lower(),
    )
    await uvicorn.Server(config).serve()


def _loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _shown_store(text: str) -> str:
    """A store's URL without credentials (userinfo, the query) to print. Not `shown_url`: a cluster URL names
    several hosts (`redis+cluster://a:1,b:2/0`), which no URL parser takes for one netloc."""
    if "://" not in text:
        return text
    scheme, _, rest = text.partition("://")
    rest, query, _ = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}://{netloc.rpartition('@')[2]}{slash}{path}" + ("?…" if query else "")


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def _shown(settings: UpstreamSettings) -> str:
    from mcpcache.client.identity import shown_url

    return shown_url(settings.url) if settings.url else " ".join(settings.command or [])


def _unreachable(upstream: Upstream, why: str) -> str:
    """One upstream that did not answer at start, in words, with what to do about a missing module."""
    text = f"upstream '{upstream.name}' ({_shown(upstream.settings)}) {why}"
    if upstream.settings.command and "No module named" in why:
        text += (
            f"; the command runs with the gateway's PATH: give its interpreter by full path "
            f"(mcpcache's is {sys.executable})"
        )
    return text
