"""Turning the workers' raw measurements into the figures people read: summaries, the table, the plot,
and the comparison of two runs."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mcpcache.bench.common import percentile
from mcpcache.bench.configs import BY_KEY


def human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def summarize(config: str, size_label: str, run: dict[str, Any]) -> dict[str, Any]:
    """The figures of one (configuration, notebook) run. Every read counts, misses after edits included."""
    reads = [op for op in run["operations"] if op["op"] == "read"]
    ops = run["operations"]
    seconds = [op["seconds"] for op in reads]
    statuses: dict[str, int] = {}
    for op in reads:
        statuses[op["status"]] = statuses.get(op["status"], 0) + 1
    revalidated = [op["received"] for op in reads if op["status"] == "revalidated"]
    return {
        "config": config,
        "size": size_label,
        "notebook_bytes": run["notebook_bytes"],
        "reads": len(reads),
        "edits": len(ops) - len(reads),
        "statuses": statuses,
        "median_ms": statistics.median(seconds) * 1000,
        "p95_ms": percentile(seconds, 0.95) * 1000,
        "sent_per_read": sum(op["sent"] for op in reads) / len(reads),
        "received_per_read": sum(op["received"] for op in reads) / len(reads),
        "median_wire_per_read": statistics.median(op["sent"] + op["received"] for op in reads),
        "full_reply_bytes": max((op["received"] for op in reads), default=0),
        "not_modified_reply_bytes": min(revalidated) if revalidated else None,
        "server_cpu_ms": None if run["server_cpu_s"] is None else run["server_cpu_s"] * 1000,
        "client_peak_mib": run["client_peak_rss_kib"] / 1024,
    }


def with_baseline_ratios(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adds bytes saved and speed-up against the baseline of the same notebook size."""
    baseline = {s["size"]: s for s in summaries if s["config"] == "baseline"}
    out = []
    for s in summaries:
        base = baseline.get(s["size"])
        row = dict(s)
        if base is not None:
            wire = s["sent_per_read"] + s["received_per_read"]
            base_wire = base["sent_per_read"] + base["received_per_read"]
            row["wire_vs_baseline"] = wire / base_wire if base_wire else None
            row["speedup"] = base["median_ms"] / s["median_ms"] if s["median_ms"] else None
            if s["server_cpu_ms"] is not None and base["server_cpu_ms"]:
                row["cpu_vs_baseline"] = s["server_cpu_ms"] / base["server_cpu_ms"]
        out.append(row)
    return out


def resummarize(document: dict[str, Any]) -> dict[str, Any]:
    """The document with its summaries computed again from its raw records (after a change to `summarize`)."""
    sizes = document["args"]["sizes"]
    order = [c["key"] for c in document["configs"]]
    summaries = [
        summarize(result["config"], label, run)
        for result in document["raw"]
        for label, run in zip(sizes, result["runs"], strict=True)
    ]
    summaries.sort(key=lambda s: (sizes.index(s["size"]), order.index(s["config"])))
    return {**document, "summaries": with_baseline_ratios(summaries)}


def _statuses(statuses: dict[str, int]) -> str:
    short = {"full": "full", "miss": "miss", "revalidated": "reval", "fresh_hit": "fresh", "bypass": "bypass"}
    return " ".join(f"{n} {short.get(k, k)}" for k, n in statuses.items())


def render_table(summaries: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="mcpcache bench: reads of one notebook, with edits (ratios against the baseline)")
    console = Console(width=max(console.width, 160), file=console.file)
    for column, justify in (
        ("size", "right"),
        ("configuration", "left"),
        ("reads", "left"),
        ("wire/read mean", "right"),
        ("vs base", "right"),
        ("wire/read median", "right"),
        ("time median", "right"),
        ("time p95", "right"),
        ("speed-up", "right"),
        ("server CPU", "right"),
        ("client peak", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    last_size = None
    for s in summaries:
        if last_size is not None and s["size"] != last_size:
            table.add_section()
        last_size = s["size"]
        ratio = s.get("wire_vs_baseline")
        speed = s.get("speedup")
        table.add_row(
            s["size"],
            s["config"],
            _statuses(s["statuses"]),
            human_bytes(s["sent_per_read"] + s["received_per_read"]),
            "-" if ratio is None else f"{ratio:.2%}",
            human_bytes(s.get("median_wire_per_read", 0)),
            f"{s['median_ms']:.1f} ms",
            f"{s['p95_ms']:.1f} ms",
            "-" if speed is None else f"{speed:.1f}x",
            "-" if s["server_cpu_ms"] is None else f"{s['server_cpu_ms']:.0f} ms",
            f"{s['client_peak_mib']:.0f} MiB",
        )
    console.print(table)
    legend = Table(show_header=False, box=None, padding=(0, 1))
    for key in dict.fromkeys(s["config"] for s in summaries):
        config = BY_KEY.get(key)
        if config is not None:
            legend.add_row(f"[bold]{key}[/bold]", config.label, f"[dim]{config.note}[/dim]")
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
            size,
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
                row["size"], f"{row['mcpcache_ms']:.2f} ms", f"{row['sha256_form_ms']:.2f} ms", f"{row['ratio']:.1f}x"
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


def plot(summaries: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (wire_ax, time_ax) = plt.subplots(1, 2, figsize=(13, 5.2))
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-"), ("P", "--"), ("X", ":")]
    for index, config in enumerate(dict.fromkeys(s["config"] for s in summaries)):
        marker, line = styles[index % len(styles)]
        rows = sorted((s for s in summaries if s["config"] == config), key=lambda s: s["notebook_bytes"])
        x = [s["notebook_bytes"] for s in rows]
        label = BY_KEY[config].label if config in BY_KEY else config
        # A fresh hit sends nothing; a log axis has no zero, so nothing is drawn at 1 B (and said so below).
        wire = [max(s.get("median_wire_per_read", s["sent_per_read"] + s["received_per_read"]), 1) for s in rows]
        wire_ax.plot(x, wire, marker=marker, linestyle=line, label=label, alpha=0.85)
        time_ax.plot(x, [s["median_ms"] for s in rows], marker=marker, linestyle=line, label=label, alpha=0.85)
    for ax, ylabel, title in (
        (wire_ax, "median bytes on the wire per read, both directions", "Bytes per read"),
        (time_ax, "median wall time per read (ms)", "Time per read"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("notebook file size (bytes)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    wire_ax.text(
        0.02,
        0.02,
        "a read served fresh sends nothing: drawn at 1 B",
        transform=wire_ax.transAxes,
        fontsize=8,
        alpha=0.7,
    )
    handles, labels = wire_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("mcpcache bench: reading one notebook again and again (an edit every few reads)")
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def compare(old: dict[str, Any], new: dict[str, Any], console: Console) -> None:
    """How the figures of two `bench.json` files differ, (configuration, size) by (configuration, size)."""
    before = {(s["config"], s["size"]): s for s in old.get("summaries", [])}
    table = Table(title="mcpcache bench --compare (new against old)")
    console = Console(width=max(console.width, 120), file=console.file)
    for column in ("size", "configuration", "median old", "median new", "new/old", "wire old", "wire new", "new/old"):
        table.add_column(column, justify="right")
    matched = 0
    for s in new.get("summaries", []):
        o = before.get((s["config"], s["size"]))
        if o is None:
            continue
        matched += 1
        wire_old = o["sent_per_read"] + o["received_per_read"]
        wire_new = s["sent_per_read"] + s["received_per_read"]
        table.add_row(
            s["size"],
            s["config"],
            f"{o['median_ms']:.1f} ms",
            f"{s['median_ms']:.1f} ms",
            f"{s['median_ms'] / o['median_ms']:.2f}x" if o["median_ms"] else "-",
            human_bytes(wire_old),
            human_bytes(wire_new),
            f"{wire_new / wire_old:.2f}x" if wire_old else "-",
        )
    console.print(table)
    if not matched:
        console.print("[yellow]the two files have no (configuration, size) in common[/yellow]")
    for label, doc in (("old", old), ("new", new)):
        machine = doc.get("machine", {})
        console.print(f"{label}: {doc.get('created', '?')} on {machine.get('cpu', '?')}, args {doc.get('args', {})}")
