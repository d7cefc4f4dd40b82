"""`mcpcache proxy`: the client cache (and results by reference) for a host that cannot be changed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mcpcache.cli.app import app, say


@app.command("proxy", context_settings={"allow_interspersed_args": False})
def proxy(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="-- COMMAND [ARGS]...", help="The upstream server's command, after `--` (or give --url)."
        ),
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", metavar="URL", help="A streamable HTTP upstream instead of a command.")
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", metavar="'NAME: VALUE'", help="An HTTP header for --url (repeatable)."),
    ] = None,
    store: Annotated[
        Path | None,
        typer.Option(
            "--store", metavar="PATH", help="A SQLite file for answers (default: tools.db in the cache folder)."
        ),
    ] = None,
    redis: Annotated[
        str | None, typer.Option("--redis", metavar="URL", help="Keep answers in Redis instead of SQLite.")
    ] = None,
    refs: Annotated[
        bool, typer.Option("--refs", help="Large results reach the model by reference (mcp+cache:// URIs).")
    ] = False,
    partition: Annotated[
        str | None,
        typer.Option(
            "--partition",
            metavar="NAME",
            help="Whose answers these are (default: a digest of the credentials: the URL's userinfo and --header "
            "values, or a stdio upstream's environment).",
        ),
    ] = None,
    conversation: Annotated[
        str | None,
        typer.Option(
            "--conversation",
            metavar="ID",
            help="With --refs: the conversation references belong to (default: one per proxy run). Proxies "
            "that share a store and this id resolve each other's references.",
        ),
    ] = None,
    server_id: Annotated[
        str | None,
        typer.Option("--server-id", metavar="NAME", help="Name the upstream in cache keys instead of its endpoint."),
    ] = None,
    trust_annotations: Annotated[
        bool,
        typer.Option(
            "--trust-annotations",
            help=(
                "Believe the upstream's readOnlyHint and idempotentHint: only calls to tools not marked read-only"
                " end freshness, and a lost call of a read-only or idempotent tool is sent once more."
            ),
        ),
    ] = False,
    view_bytes: Annotated[
        int,
        typer.Option(
            "--view-bytes", metavar="N", help="With --refs: results from this size are shown as views.", min=256
        ),
    ] = 4096,
    remember_shown: Annotated[
        int,
        typer.Option(
            "--remember-shown",
            metavar="N",
            help="With --refs: a result the model already read is shown as 'unchanged' or as its changes, for N "
            "tool results after it was shown whole. Only if the host never drops or compacts tool results "
            "from the model's context within N: the proxy cannot see that happen.",
            min=0,
        ),
    ] = 0,
    upstream_era: Annotated[
        str,
        typer.Option(
            "--upstream-era",
            metavar="ERA",
            help="The era of the session opened at start: legacy (the initialize handshake) or auto (2026-07-28 if "
            "the server offers it). Hosts are then served in their own era either way.",
        ),
    ] = "legacy",
    quiet: Annotated[
        bool, typer.Option("--quiet", help="Log only warnings (default: one line per tool call).")
    ] = False,
) -> None:
    """Serve one MCP server to a host over stdio, with every tool call through mcpcache's tool cache.

    \b
      mcpcache proxy -- npx -y some-mcp-server
      mcpcache proxy --refs --url https://host/mcp --header 'Authorization: Bearer ...'
    """
    import os

    import anyio

    from mcpcache.client.settings import CacheSettings
    from mcpcache.proxy.server import UpstreamUnavailable, configure_logging, serve
    from mcpcache.proxy.settings import (
        ProxySettings,
        RefsSettings,
        SettingsError,
        default_partition,
        new_conversation_id,
        store_choice,
        upstream_from,
    )

    try:
        upstream = upstream_from(command or [], url, header or [], os.getcwd())
        if upstream_era not in ("legacy", "auto"):
            raise SettingsError("--upstream-era must be legacy or auto")
        if conversation is not None and not refs:
            raise SettingsError("--conversation needs --refs")
        if remember_shown and not refs:
            raise SettingsError("--remember-shown needs --refs")
        settings = ProxySettings(
            upstream=upstream,
            store=store_choice(store, redis),
            partition=partition if partition is not None else default_partition(upstream, os.environ),
            refs=RefsSettings(conversation or new_conversation_id(), view_bytes, view_bytes, remember_shown)
            if refs
            else None,
            server_id=server_id,
            cache=CacheSettings(trusted=trust_annotations),
            upstream_era="auto" if upstream_era == "auto" else "legacy",
        )
        if settings.store.sqlite_path is None and settings.store.redis_url is None:
            from mcpcache.stores.opening import CacheFolderError, cache_dir

            try:
                cache_dir()  # the default store's folder: refused here, in one line, before anything starts
            except CacheFolderError as exc:
                raise SettingsError(f"{exc} (or give --store PATH)") from None
    except SettingsError as exc:
        say(f"mcpcache proxy: {exc}")
        raise typer.Exit(2) from None
    configure_logging(verbose=not quiet)
    try:
        anyio.run(serve, settings)
    except UpstreamUnavailable as exc:
        say(f"mcpcache proxy: {exc}")
        raise typer.Exit(1) from None
