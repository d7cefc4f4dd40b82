"""Turning the workers' raw measurements into the figures people read: summaries, the tables, the plots,
and the comparison of two runs.

A `bench.json` of format 2 holds every operation with the round it was made in; the reads of one round
(one per configuration, in shuffled order) are what the per-round ratios compare. A file written before
format 2 (configurations run one after the other, one transport) is still read: its reads are paired by
their index, and it is said that they were not interleaved.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import orjson
from rich import box
from rich.console import Console
from rich.table import Table

from mcpcache.bench.common import percentile
from mcpcache.bench.configs import BY_KEY

FORMAT = 2
HEADLINE_CONFIG = "mcpcache"
TRANSPORT_NAMES = {"http": "streamable HTTP (127.0.0.1)", "stdio": "stdio"}


def transport_name(transport: str, args: dict[str, Any] | None = None) -> str:
    """How titles name a transport, saying so when a run read it through a simulated link (`--link`)."""
    name = TRANSPORT_NAMES.get(transport, transport)
    link = (args or {}).get("link")
    if link and transport == "http":
        from mcpcache.bench.relay import DEFAULT_LATENCY_MS, parse_link

        try:
            name = f"HTTP over a {parse_link(link, (args or {}).get('latency_ms', DEFAULT_LATENCY_MS)).label}"
        except ValueError:
            name = f"HTTP over a simulated link ({link})"
    return name


class NotABenchFile(ValueError):
    """A file `--report` or `--compare` cannot read as a bench.json."""


def human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def size_label(label: str) -> str:
    """'5MB' -> '5 MB', as the table and the plot print a notebook size."""
    for unit in ("KB", "MB", "GB"):
        if label.upper().endswith(unit):
            return f"{label[: -len(unit)]} {unit}"
    return label


def factor(x: float | None) -> str:
    """A ratio as people say it: 9,700x, 6.4x, 1.0x."""
    if x is None:
        return "-"
    return f"{x:,.0f}x" if x >= 100 else f"{x:.1f}x"


def load(path: Path) -> dict[str, Any]:
    """A bench.json (either format), with its summaries computed again from its raw operations."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise NotABenchFile(f"{path}: cannot read it ({(exc.strerror or str(exc)).lower()})") from exc
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise NotABenchFile(f"{path}: not JSON ({exc})") from exc
    if not isinstance(document, dict) or not isinstance(document.get("raw"), list) or "args" not in document:
        raise NotABenchFile(f"{path}: not a bench.json (no raw operations and arguments in it)")
    if document.get("format", 1) > FORMAT:
        raise NotABenchFile(f"{path}: bench.json format {document['format']} is newer than this mcpcache reads")
    try:
        return resummarize(document)
    except (KeyError, TypeError, ValueError) as exc:
        raise NotABenchFile(f"{path}: a bench.json this version cannot summarize ({exc!r})") from exc


def _runs(document: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(transport, config, size, run) for every run, in either format."""
    out: list[tuple[str, str, str, dict[str, Any]]] = []
    args = document["args"]
    for result in document["raw"]:
        transport = result.get("transport") or args.get("transport", "stdio")
        if "size" in (result["runs"] or [{}])[0]:
            pairs = [(run["size"], run) for run in result["runs"]]
        else:  # format 1: one run per size of the arguments, in order
            pairs = list(zip(args["sizes"], result["runs"], strict=True))
        out.extend((transport, result["config"], size, run) for size, run in pairs)
    return out


def _reads_by_round(run: dict[str, Any]) -> dict[int, dict[str, Any]]:
    reads = [op for op in run["operations"] if op["op"] == "read"]
    return {op.get("round", index): op for index, op in enumerate(reads)}


def _edit_rounds(run: dict[str, Any]) -> set[int] | None:
    """The rounds whose read came after an edit (the edits of a round go before its reads); None for a file
    whose edits carry no round (format 1)."""
    edits = [op for op in run["operations"] if op["op"] == "edit"]
    if any("round" not in op for op in edits):
        return None
    return {op["round"] for op in edits}


def _wire(op: dict[str, Any]) -> int:
    return int(op["sent"] + op["received"])


def summarize(config: str, transport: str, size: str, run: dict[str, Any]) -> dict[str, Any]:
    """The figures of one (transport, configuration, notebook) run. Every read counts, misses after edits
    included."""
    reads = [op for op in run["operations"] if op["op"] == "read"]
    seconds = [op["seconds"] for op in reads]
    statuses: dict[str, int] = {}
    for op in reads:
        statuses[op["status"]] = statuses.get(op["status"], 0) + 1
    revalidated = [op for op in reads if op["status"] == "revalidated"]
    # The first read is a miss for every cache; the reads that follow are what a cache is for.
    later = [op for index, op in enumerate(reads) if op.get("round", index) != 0]
    edit_rounds = _edit_rounds(run)
    after_edit = (
        [op for index, op in enumerate(reads) if op.get("round", index) in edit_rounds]
        if edit_rounds is not None
        else []
    )
    return {
        "transport": transport,
        "config": config,
        "size": size,
        "notebook_bytes": run["notebook_bytes"],
        "reads": len(reads),
        "edits": len(run["operations"]) - len(reads),
        "statuses": statuses,
        "median_ms": statistics.median(seconds) * 1000,
        "p95_ms": percentile(seconds, 0.95) * 1000,
        "sent_per_read": sum(op["sent"] for op in reads) / len(reads),
        "received_per_read": sum(op["received"] for op in reads) / len(reads),
        "wire_per_read": sum(op["sent"] + op["received"] for op in reads) / len(reads),
        "median_wire_per_read": statistics.median(op["sent"] + op["received"] for op in reads),
        "revalidated_wire_per_read": (
            statistics.median(op["sent"] + op["received"] for op in revalidated) if revalidated else None
        ),
        "full_reply_bytes": max((op["received"] for op in reads), default=0),
        "not_modified_reply_bytes": min(op["received"] for op in revalidated) if revalidated else None,
        "server_cpu_ms": None if run["server_cpu_s"] is None else run["server_cpu_s"] * 1000,
        "client_peak_mib": run["client_peak_rss_kib"] / 1024,
        "wire_per_read_after_first": sum(_wire(op) for op in later) / len(later) if later else None,
        "reads_after_edit": len(after_edit),
        "after_edit_wire_per_read": statistics.median(_wire(op) for op in after_edit) if after_edit else None,
        "after_edit_received_max": max((op["received"] for op in after_edit), default=None),
        "after_edit_median_ms": statistics.median(op["seconds"] for op in after_edit) * 1000 if after_edit else None,
        # The server's CPU per read (runs that record it): after an edit, and for a whole answer sent.
        "after_edit_server_cpu_ms": _median_cpu(after_edit),
        "full_read_server_cpu_ms": _median_cpu([op for op in reads if op["status"] in WHOLE_ANSWER]),
    }


WHOLE_ANSWER = frozenset({"full", "miss", "bypass"})
"""The read statuses that mean the server sent the whole answer."""


def _median_cpu(ops: list[dict[str, Any]]) -> float | None:
    found = [op["server_cpu_ms"] for op in ops if op.get("server_cpu_ms") is not None]
    return statistics.median(found) if found else None


def _with_baseline(
    summary: dict[str, Any], base: dict[str, Any], ratios: list[float], after_edit: list[float]
) -> dict[str, Any]:
    """`ratios`: the baseline's read over this one, per round; `after_edit`: the same for the rounds whose
    read came after an edit."""
    row = dict(summary)
    wire, base_wire = summary["wire_per_read"], base["wire_per_read"]
    row["wire_vs_baseline"] = wire / base_wire if base_wire else None
    later, base_later = summary.get("wire_per_read_after_first"), base.get("wire_per_read_after_first")
    row["wire_after_first_vs_baseline"] = later / base_later if later is not None and base_later else None
    row["after_edit_rounds"] = len(after_edit)
    row["after_edit_speedup"] = statistics.median(after_edit) if after_edit else None
    row["after_edit_speedup_p10"] = percentile(after_edit, 0.10) if after_edit else None
    row["after_edit_speedup_p90"] = percentile(after_edit, 0.90) if after_edit else None
    row["fewer_bytes"] = base_wire / wire if wire else None
    revalidated = summary["revalidated_wire_per_read"]
    row["fewer_bytes_revalidated"] = base_wire / revalidated if revalidated else None
    if summary["server_cpu_ms"] is not None and base["server_cpu_ms"]:
        row["cpu_vs_baseline"] = summary["server_cpu_ms"] / base["server_cpu_ms"]
    # A read after an edit against a full read of the stock server (the baseline's reads are all full).
    after_cpu, full_cpu = summary.get("after_edit_server_cpu_ms"), base.get("full_read_server_cpu_ms")
    row["after_edit_cpu_vs_full_read"] = after_cpu / full_cpu if after_cpu is not None and full_cpu else None
    row["rounds"] = len(ratios)
    if ratios:
        row["speedup"] = statistics.median(ratios)
        row["speedup_p10"] = percentile(ratios, 0.10)
        row["speedup_p90"] = percentile(ratios, 0.90)
        row["speedup_min"] = min(ratios)
        row["speedup_max"] = max(ratios)
    else:
        row["speedup"] = row["speedup_p10"] = row["speedup_p90"] = row["speedup_min"] = row["speedup_max"] = None
    return row


def resummarize(document: dict[str, Any]) -> dict[str, Any]:
    """The document with its summaries computed again from its raw records (after a change to `summarize`).

    Ratios are against the baseline of the same transport and notebook. The speed-up is per round: the
    baseline's read of a round over this configuration's read of the same round; its median, p10 and p90.
    """
    runs = _runs(document)
    sizes = list(dict.fromkeys(size for _, _, size, _ in runs))
    transports = list(dict.fromkeys(t for t, _, _, _ in runs))
    order = [c["key"] for c in document["configs"]]
    summaries = [summarize(config, transport, size, run) for transport, config, size, run in runs]
    by_round = {(t, c, s): _reads_by_round(run) for t, c, s, run in runs}
    edit_rounds = {(t, c, s): _edit_rounds(run) for t, c, s, run in runs}
    baseline = {(s["transport"], s["size"]): s for s in summaries if s["config"] == "baseline"}
    out = []
    for s in summaries:
        base = baseline.get((s["transport"], s["size"]))
        if base is None:
            out.append(s)
            continue
        mine, theirs = by_round[s["transport"], s["config"], s["size"]], by_round[s["transport"], "baseline", s["size"]]
        ratios = {r: theirs[r]["seconds"] / mine[r]["seconds"] for r in mine if r in theirs and mine[r]["seconds"] > 0}
        edited = edit_rounds[s["transport"], s["config"], s["size"]] or set()
        after_edit = [ratio for r, ratio in ratios.items() if r in edited]
        out.append(_with_baseline(s, base, list(ratios.values()), after_edit))
    out.sort(key=lambda s: (transports.index(s["transport"]), sizes.index(s["size"]), order.index(s["config"])))
    return {**document, "summaries": out, "interleaved": document.get("format", 1) >= 2}


def png_paths(document: dict[str, Any], json_path: Path) -> dict[str, Path]:
    """Where each transport's plot of a bench.json goes: beside it, named after it and the transport."""
    transports = dict.fromkeys(s["transport"] for s in document["summaries"])
    return {t: json_path.with_name(f"{json_path.stem}-{t}.png") for t in transports}


def headline(summaries: list[dict[str, Any]], transport: str, config: str = HEADLINE_CONFIG) -> str | None:
    """One line for a transport: mcpcache against the baseline on the largest notebook measured. Two byte
    figures, each saying what it measures: a revalidated read alone (a not-modified reply in place of the
    whole answer), and the mean over the whole workload (first read and reads after edits included)."""
    rows = [s for s in summaries if s["transport"] == transport and s["config"] == config and "speedup" in s]
    if not rows:
        return None
    s = max(rows, key=lambda r: r["notebook_bytes"])
    fewer = s.get("fewer_bytes_revalidated")
    mean = f"{factor(s['fewer_bytes'])} fewer bytes per read over the whole workload (mean)"
    per_read = f"{factor(fewer)} fewer bytes per revalidated read, {mean}" if fewer else mean
    faster = f"{factor(s['speedup'])} faster" if s["speedup"] is not None else "speed not measured"
    return f"{config}: {per_read}; {faster} ({size_label(s['size'])} over {transport}, {s['rounds']} rounds)"


def edit_headline(summaries: list[dict[str, Any]], transport: str, config: str = HEADLINE_CONFIG) -> str | None:
    """One line for a transport: what a read after an edit costs mcpcache, and its mean bytes per read after
    the first, against the stock client's (on the largest notebook measured)."""
    rows = [
        s
        for s in summaries
        if s["transport"] == transport and s["config"] == config and s.get("after_edit_wire_per_read") is not None
    ]
    if not rows:
        return None
    s = max(rows, key=lambda r: r["notebook_bytes"])
    parts = [f"{config}, a read after an edit: {human_bytes(s['after_edit_wire_per_read'])}"]
    if s.get("after_edit_speedup") is not None:
        parts[0] += f", {factor(s['after_edit_speedup'])} faster"
    share = s.get("wire_after_first_vs_baseline")
    if share is not None:
        parts.append(f"every read but the first: {share:.3%} of the stock client's bytes")
    return "; ".join(parts)


def _statuses(statuses: dict[str, int]) -> str:
    short = {
        "full": "full",
        "miss": "miss",
        "revalidated": "reval",
        "patched": "patch",
        "fresh_hit": "fresh",
        "bypass": "bypass",
    }
    return " ".join(f"{n} {short.get(k, k)}" for k, n in sorted(statuses.items(), key=lambda kv: -kv[1]))


def _faster(s: dict[str, Any], prefix: str = "speedup") -> str:
    if s.get(prefix) is None:
        return "-"
    low, high = (f"{x:.0f}" if x >= 100 else f"{x:.1f}" for x in (s[f"{prefix}_p10"], s[f"{prefix}_p90"]))
    return f"{factor(s[prefix])} ({low}-{high})"


def _after_edit_table(rows: list[dict[str, Any]], title: str) -> Table | None:
    """The reads that follow an edit, and the mean over every read but the first (the first is a miss for
    every cache), per configuration; None when the run made no edit."""
    if not any(s.get("reads_after_edit") for s in rows):
        return None
    table = Table(
        title=title,
        caption=(
            "faster: the baseline's read over this one in the same round, over the rounds after an edit; "
            "server CPU: the server's, per read after an edit (median)"
        ),
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        show_edge=False,
    )
    for column in (
        "configuration",
        "bytes/read after\nthe first, mean",
        "vs stock",
        "read after an\nedit: bytes",
        "time",
        "faster\n(p10-p90)",
        "server\nCPU ms",
    ):
        # Folded onto a second line where 80 columns are too few: a figure is never cut.
        name = column == "configuration"
        table.add_column(column, justify="left" if name else "right", overflow="fold", no_wrap=name)
    for s in rows:
        share = s.get("wire_after_first_vs_baseline")
        after = s.get("after_edit_wire_per_read")
        table.add_row(
            s["config"],
            "-" if s.get("wire_per_read_after_first") is None else human_bytes(s["wire_per_read_after_first"]),
            "-" if share is None else f"{share:.3%}",
            "-" if after is None else human_bytes(after),
            "-" if s.get("after_edit_median_ms") is None else f"{s['after_edit_median_ms']:.1f} ms",
            _faster(s, "after_edit_speedup"),
            "-" if s.get("after_edit_server_cpu_ms") is None else f"{s['after_edit_server_cpu_ms']:.1f}",
        )
    return table


def render_table(document: dict[str, Any], console: Console) -> None:
    """One table per (transport, notebook size). In fewer columns than it needs (about 100), a cell folds
    onto a second line (at a space where it has one): no figure is ever cut short."""
    summaries = document["summaries"]
    groups = dict.fromkeys((s["transport"], s["size"]) for s in summaries)
    for transport, size in groups:
        rows = [s for s in summaries if s["transport"] == transport and s["size"] == size]
        rounds = max((s.get("rounds") or 0 for s in rows), default=0)
        title = (
            f"{size_label(size)} notebook over {transport_name(transport, document.get('args'))}: "
            f"{rows[0]['reads']} reads, {rows[0]['edits']} edit{'' if rows[0]['edits'] == 1 else 's'}"
        )
        table = Table(
            title=title,
            caption=(
                f"faster: the baseline's read over this one, per round: median (p10-p90) of {rounds} rounds"
                + ("" if document.get("interleaved") else "; not interleaved (an old bench.json)")
            ),
            box=box.SIMPLE_HEAD,
            padding=(0, 1, 0, 0),  # with the blank column rule, two characters between columns
            pad_edge=False,
            show_edge=False,
        )
        for column, justify in (
            ("configuration", "left"),
            ("reads", "left"),
            ("bytes per\nread, mean", "right"),
            ("fewer\nbytes", "right"),
            ("time/read\nmedian", "right"),
            ("faster\n(p10-p90)", "right"),
            ("server\nCPU ms", "right"),
            ("client\nMiB", "right"),
        ):
            name = column == "configuration"
            table.add_column(column, justify=justify, overflow="fold", no_wrap=name)  # type: ignore[arg-type]
        for s in rows:
            table.add_row(
                s["config"],
                _statuses(s["statuses"]),
                human_bytes(s["wire_per_read"]),
                factor(s.get("fewer_bytes")),
                f"{s['median_ms']:.1f} ms",
                _faster(s),
                "-" if s["server_cpu_ms"] is None else f"{s['server_cpu_ms']:.0f}",
                f"{s['client_peak_mib']:.0f}",
            )
        console.print(table)
        where = transport_name(transport, document.get("args"))
        edits = _after_edit_table(rows, f"{size_label(size)} notebook over {where}: the reads after an edit")
        if edits is not None:
            console.print(edits)
    for transport in dict.fromkeys(t for t, _ in groups):
        for line in (headline(summaries, transport), edit_headline(summaries, transport)):
            if line:
                console.print(f"[bold]{line}[/bold]")
    legend = Table(show_header=False, box=None, padding=(0, 1))
    for key in dict.fromkeys(s["config"] for s in summaries):
        config = BY_KEY.get(key)
        if config is not None:
            legend.add_row(f"[bold]{key}[/bold]", f"{config.label}: [dim]{config.note}[/dim]")
    console.print(legend)


def render_limits(summaries: list[dict[str, Any]], answers: list[dict[str, Any]], console: Console) -> None:
    """The physical limit beside the result: what a not-modified reply costs against the payload."""
    table = Table(title="The limit: a not-modified reply against the full answer, and what a model reads")
    for column in ("size", "full reply", "not-modified reply", "reply / full", "model reads (o200k)"):
        table.add_column(column, justify="right")
    for size in dict.fromkeys(s["size"] for s in summaries):
        rows = [s for s in summaries if s["size"] == size]
        full = max(s["full_reply_bytes"] for s in rows)
        replies = [s["not_modified_reply_bytes"] for s in rows if s["not_modified_reply_bytes"] is not None]
        reply = min(replies) if replies else None
        tokens = next((a["model_tokens"] for a in answers if a["size"] == size), None)
        counted = "-"
        if tokens is not None:
            counted = f"{tokens['count']:,} tokens" + ("" if tokens["method"] == "o200k" else " (est.)")
        table.add_row(
            size_label(size),
            human_bytes(full),
            "-" if reply is None else f"{reply} B",
            "-" if reply is None or not full else f"{reply / full:.4%}",
            counted,
        )
    console.print(table)


def render_extras(document: dict[str, Any], console: Console) -> None:
    """The tag's own CPU cost, and the by-reference scenario."""
    costs = document.get("answers") or []
    if costs:
        table = Table(title="Server CPU of the tag alone, on each notebook's answer (best of 7)")
        for column in ("size", "mcpcache (xxh3-128)", "SHA-256 form", "SHA-256 / mcpcache"):
            table.add_column(column, justify="right")
        for row in costs:
            table.add_row(
                size_label(row["size"]),
                f"{row['mcpcache_ms']:.2f} ms",
                f"{row['sha256_form_ms']:.2f} ms",
                f"{row['ratio']:.1f}x",
            )
        console.print(table)
    byref = document.get("by_reference")
    if byref:
        table = Table(title=f"By reference: a {byref['rows']}-row time series moved from a query tool to a chart tool")
        for column in ("what the model handles", "bytes", "o200k tokens"):
            table.add_column(column, justify="right" if column != "what the model handles" else "left")
        for key, label in (
            ("write_inline", "writes the rows inline as arguments"),
            ("write_by_reference", "writes a reference to the rows (with #/rows)"),
            ("write_by_reference_whole", "writes a reference to the whole result"),
            ("read_full_result", "reads the whole query result"),
            ("read_shortened_view", "reads the view with the rows as a named marker"),
        ):
            cost = byref[key]
            table.add_row(label, f"{cost['bytes']:,}", f"{cost['tokens']:,}")
        console.print(table)
        inline, ref = byref["write_inline"]["tokens"], byref["write_by_reference"]["tokens"]
        resolve = byref["resolve_from_sqlite"]
        console.print(
            f"by reference the model writes {1 - ref / inline:.2%} fewer tokens; resolving a "
            f"{human_bytes(resolve['payload_bytes'])} reference from SQLite takes {resolve['median_ms']:.1f} ms "
            f"(median; p95 {resolve['p95_ms']:.1f} ms)"
        )
    render_rereads(document, console)
    render_hops(document, console)


def render_rereads(document: dict[str, Any], console: Console) -> None:
    """The re-read scenario: what a model reads over repeated reads of one notebook, with and without memory."""
    rereads = document.get("model_rereads")
    if not rereads:
        return
    table = Table(
        title=f"Re-reads: a {human_bytes(rereads['notebook_bytes'])} notebook read {rereads['reads']} times, "
        f"{rereads['edits']} one-cell edits between reads"
    )
    for column in ("what the model reads", "o200k tokens", "share"):
        table.add_column(column, justify="left" if column == "what the model reads" else "right")
    naive, ours = rereads["naive_tokens"], rereads["mcpcache_tokens"]
    views = rereads["views"]
    table.add_row("the full view at every read", f"{naive:,}", "100%")
    table.add_row(
        f"views that remember ({views['full']} full, {views['changed']} changed, {views['unchanged']} unchanged)",
        f"{ours:,}",
        f"{ours / naive:.1%}" if naive else "-",
    )
    console.print(table)
    console.print(
        f"every edit seen in the next view: {'yes' if rereads['edits_seen'] else 'NO'}; "
        f"the views add up to the server's answer at every read: {'yes' if rereads['views_match'] else 'NO'}"
    )


def render_hops(document: dict[str, Any], console: Console) -> None:
    """The proxy-and-gateway scenario (`--full` only): per route, time and the bytes on each counted link."""
    hops = document.get("proxy_and_gateway")
    if not hops:
        return
    table = Table(
        title=f"Direct, through mcpcache proxy, through mcpcache gateway: a {human_bytes(hops['notebook_bytes'])} "
        f"notebook, {hops['rounds']} rounds",
        box=box.SIMPLE_HEAD,
    )
    for column in ("route", "median", "time vs direct (p25-p75)", "client link", "into the server", "across a network"):
        table.add_column(column, justify="left" if column == "route" else "right")
    for row in hops["rows"]:
        ratio = row["time_vs_direct"]
        links = row["bytes_by_link"]
        table.add_row(
            row["config"],
            f"{row['median_ms']:,.0f} ms",
            f"{factor(ratio['median'])} ({ratio['p25']:.2f}-{ratio['p75']:.2f})",
            human_bytes(links["client"]),
            human_bytes(links["server"]),
            f"{human_bytes(row['network_bytes'])} ({row['network_link']})",
        )
    console.print(table)
    console.print(
        "bytes are JSON-RPC message bytes per read (median); 'across a network' is the link that would be long: "
        "the proxy sits by the host, the gateway by the server"
    )


def plot_all(document: dict[str, Any], json_path: Path) -> list[Path]:
    """One PNG per transport beside the json (bench-http.png, bench-stdio.png); the paths written."""
    written = []
    for transport, path in png_paths(document, json_path).items():
        plot([s for s in document["summaries"] if s["transport"] == transport], transport, path, document.get("args"))
        written.append(path)
    return written


def plot(summaries: list[dict[str, Any]], transport: str, path: Path, args: dict[str, Any] | None = None) -> None:
    """Bytes per read (the mean: the full re-reads after edits count) and time per read (median, p10-p90 of
    the per-round ratio turned into times); below, when the run made edits, the same for the reads that
    follow an edit (medians). Lines against the notebook size, or bars for a single size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(s["config"] for s in summaries))
    sizes = sorted(
        dict.fromkeys(s["size"] for s in summaries),
        key=lambda z: min(s["notebook_bytes"] for s in summaries if s["size"] == z),
    )
    labels = {c: BY_KEY[c].label if c in BY_KEY else c for c in configs}
    edits = any(s.get("after_edit_wire_per_read") is not None for s in summaries)
    fig, axes = plt.subplots(2 if edits else 1, 2, figsize=(13, 10.4 if edits else 5.6), squeeze=False)
    panels = [
        (
            axes[0][0],
            axes[0][1],
            "wire_per_read",
            "median_ms",
            "speedup",
            "Bytes per read (mean: re-reads after edits count)",
            "Time per read",
        ),
    ]
    if edits:
        panels.append(
            (axes[1][0], axes[1][1], "after_edit_wire_per_read", "after_edit_median_ms", "after_edit_speedup",
             "Bytes of a read after an edit (median, log scale)", "Time of a read after an edit")
        )  # fmt: skip
    for index, (wire_ax, time_ax, wire_key, time_key, speed_key, wire_title, time_title) in enumerate(panels):
        after = index == 1
        if len(sizes) == 1:
            _bars(wire_ax, time_ax, [next(s for s in summaries if s["config"] == c) for c in configs], labels,
                  (wire_key, time_key, speed_key), size=sizes[0], after=after)  # fmt: skip
        else:
            _lines(wire_ax, time_ax, summaries, configs, labels, sizes, (wire_key, time_key), after=after)
        wire_ax.set_title(wire_title)
        time_ax.set_title(time_title)
        for ax in (wire_ax, time_ax):
            ax.grid(True, which="both", alpha=0.3)
    if len(sizes) > 1:
        handles, legend_labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, legend_labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    reads = summaries[0]["reads"] if summaries else 0
    edit_count = summaries[0]["edits"] if summaries else 0
    fig.suptitle(
        f"mcpcache bench over {transport_name(transport, args)}: "
        f"{reads} reads of one notebook, {edit_count} edit{'' if edit_count == 1 else 's'} between them",
        fontsize=12,
    )
    top = 0.89 if not edits else 0.915
    for line, (text, color) in enumerate(
        ((headline(summaries, transport), "tab:green"), (edit_headline(summaries, transport), "tab:purple"))
    ):
        if text:
            fig.text(0.5, top + 0.015 - line * (0.022 if edits else 0.04), text, ha="center", fontsize=10,
                     weight="bold", color=color)  # fmt: skip
    fig.tight_layout(rect=(0, 0.06 if len(sizes) > 1 else 0.02, 1, top - (0.03 if edits else 0.04)))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _bars(
    wire_ax: Any,
    time_ax: Any,
    rows: list[dict[str, Any]],
    labels: dict[str, str],
    keys: tuple[str, str, str],
    *,
    size: str,
    after: bool,
) -> None:
    wire_key, time_key, speed_key = keys
    y = list(range(len(rows)))[::-1]
    wires = [s.get(wire_key) or 0 for s in rows]
    times = [s.get(time_key) or 0 for s in rows]
    if after:
        # A log axis: a delta reply is hundreds of bytes where a full answer is megabytes.
        wire_ax.barh(y, [max(w, 1) for w in wires], color="tab:purple", alpha=0.8)
        wire_ax.set_xscale("log")
        wire_ax.set_xlim(100, max([*wires, 1000]) * 20)
    else:
        # A linear axis: the mean is a share of the baseline's bytes, and a read served fresh costs 0 B.
        wire_ax.barh(y, [w / 1e6 for w in wires], color="tab:blue", alpha=0.8)
        wire_ax.set_xlim(0, max([*wires, 1]) / 1e6 * 1.3)
    time_ax.barh(y, times, color="tab:red" if after else "tab:orange", alpha=0.8)
    for ax in (wire_ax, time_ax):
        ax.set_yticks(y, [labels[s["config"]] for s in rows], fontsize=8)
    time_ax.set_yticklabels([])
    for yi, s, w, t in zip(y, rows, wires, times, strict=True):
        wire_ax.text(max(w, 1) if after else w / 1e6, yi, f" {human_bytes(w)}", va="center", fontsize=8)
        note = "" if s.get(speed_key) is None else f"  {factor(s[speed_key])}"
        time_ax.text(t, yi, f" {t:.1f} ms{note}", va="center", fontsize=8)
    what = "a read after an edit, median" if after else "mean"
    wire_ax.set_xlabel(
        f"{'bytes' if after else 'MB'} on the wire per read, both directions, {what} ({size_label(size)} notebook)"
    )
    time_ax.set_xlabel("median ms per read, and the median per-round speed-up")
    time_ax.set_xlim(0, max([*times, 1]) * 1.35)


def _lines(
    wire_ax: Any,
    time_ax: Any,
    summaries: list[dict[str, Any]],
    configs: list[str],
    labels: dict[str, str],
    sizes: list[str],
    keys: tuple[str, str],
    *,
    after: bool,
) -> None:
    wire_key, time_key = keys
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-"), ("P", "--"), ("X", ":"), ("*", "-.")]
    for index, config in enumerate(configs):
        marker, line = styles[index % len(styles)]
        rows = sorted((s for s in summaries if s["config"] == config), key=lambda s: s["notebook_bytes"])
        x = [s["notebook_bytes"] for s in rows]
        wire = [max(s.get(wire_key) or 0, 1) for s in rows]
        wire_ax.plot(x, wire, marker=marker, linestyle=line, label=labels[config], alpha=0.85)
        time_ax.plot(x, [max(s.get(time_key) or 0, 0.01) for s in rows], marker=marker, linestyle=line, alpha=0.85)
    ticks = [min(s["notebook_bytes"] for s in summaries if s["size"] == z) for z in sizes]
    for ax in (wire_ax, time_ax):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(ticks, [size_label(z) for z in sizes])
        ax.minorticks_off()
        ax.set_xlabel("notebook size")
    which = "a read after an edit, median" if after else "mean"
    wire_ax.set_ylabel(f"bytes on the wire per read, both directions, {which}")
    time_ax.set_ylabel("median wall time per read (ms)")


def compare(old: dict[str, Any], new: dict[str, Any], console: Console) -> None:
    """How the figures of two bench files differ, (transport, configuration, size) by (transport, ...)."""
    before = {(s["transport"], s["config"], s["size"]): s for s in old["summaries"]}
    table = Table(title="mcpcache bench --compare (new against old)", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("", "size", "configuration", "time old", "time new", "new/old", "bytes old", "bytes new", "new/old"):
        table.add_column(column, justify="right", no_wrap=True)
    matched = 0
    for s in new["summaries"]:
        o = before.get((s["transport"], s["config"], s["size"]))
        if o is None:
            continue
        matched += 1
        table.add_row(
            s["transport"],
            size_label(s["size"]),
            s["config"],
            f"{o['median_ms']:.1f} ms",
            f"{s['median_ms']:.1f} ms",
            f"{s['median_ms'] / o['median_ms']:.2f}x" if o["median_ms"] else "-",
            human_bytes(o["wire_per_read"]),
            human_bytes(s["wire_per_read"]),
            f"{s['wire_per_read'] / o['wire_per_read']:.2f}x" if o["wire_per_read"] else "-",
        )
    console.print(table)
    if not matched:
        console.print("[yellow]the two files have no (transport, configuration, size) in common[/yellow]")
    for label, doc in (("old", old), ("new", new)):
        machine = doc.get("machine", {})
        commit = str((doc.get("provenance") or {}).get("commit", "?"))
        args = doc.get("args", {})
        console.print(
            f"{label}: {doc.get('created', '?')}, commit {str(commit)[:10]}, on {machine.get('cpu', '?')}; "
            f"{args.get('reads', '?')} reads, an edit every {args.get('edit_every', '?')}"
            + ("" if doc.get("interleaved") else " (not interleaved)")
        )
