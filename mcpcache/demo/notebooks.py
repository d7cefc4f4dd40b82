"""Seeded generator of realistic Jupyter notebooks, for the demo server, its tests and the benchmarks.

A benchmark that hashes or ships a notebook is only as honest as the notebook: a file of repeated
characters compresses and hashes unlike one with plots, tables and logs. These notebooks look like a
data-science session (markdown between code cells; stdout logs, stderr warnings, tables as text/plain
and text/html, plots as real PNG files whose pixels carry noise) and are byte-for-byte reproducible
from a seed, so two runs of a benchmark measure the same thing.

Files are written the way nbformat writes them (keys sorted, indent 1, multi-line strings split into
lists), so their size on disk is what a user's notebook of that content would weigh.
"""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat

__all__ = [
    "build_notebook",
    "generate_notebook",
    "generate_notebook_of_size",
    "notebook_text",
    "png_bytes",
]

NBFORMAT = 4
NBFORMAT_MINOR = 5

# One string rather than a literal list, to keep 60 words on five lines.
_WORDS = (  # noqa: SIM905
    "the model data loss training validation feature features sample samples mean median variance "
    "distribution column columns table plot figure result results baseline metric metrics epoch epochs "
    "learning rate batch split test train cluster clusters outlier outliers correlation regression "
    "signal noise window rolling average weekly daily revenue region customer customers cohort retention "
    "experiment control treatment effect size interval confidence estimate error residual residuals"
).split()
_COLUMNS = ("region", "revenue", "units", "margin", "churn", "tenure", "score", "visits", "basket", "returns")
_REGIONS = ("north", "south", "east", "west", "central", "coastal", "alpine", "metro")
_IMAGE_SIZES = ((96, 72), (128, 96), (160, 120), (200, 150))

_SPLIT_MIMES = {"application/javascript", "image/svg+xml"}


def png_bytes(width: int, height: int, rng: random.Random) -> bytes:
    """A valid RGB PNG: smooth bands like a plot's fills, with noise in the low bits like antialiasing.

    Pure noise would not compress at all and a flat image would compress to nothing; both would make
    the base64 in a notebook unlike a real plot's.
    """
    raw = bytearray()
    base = [rng.randrange(256) for _ in range(3)]
    step = [rng.choice((-2, -1, 1, 2)) for _ in range(3)]
    for y in range(height):
        # One translation table per row turns uniform noise into "row colour + 0..15", so the whole
        # image costs two C-level calls per row instead of a Python loop per pixel.
        colour = [(base[c] + step[c] * y) % 240 for c in range(3)]
        tables = [bytes((colour[c] + (n & 0x0F)) % 256 for n in range(256)) for c in range(3)]
        noise = rng.randbytes(width * 3)
        row = bytearray(width * 3)
        for c in range(3):
            row[c::3] = noise[c::3].translate(tables[c])
        raw.append(0)  # filter type None
        raw += row

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(raw), 6))
        + chunk(b"IEND", b"")
    )


def _sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def _markdown_cell(rng: random.Random, index: int) -> dict[str, Any]:
    lines = [f"## {index // 2 + 1}. {_sentence(rng, rng.randint(2, 5))[:-1]}", ""]
    for _ in range(rng.randint(1, 3)):
        lines.append(" ".join(_sentence(rng, rng.randint(6, 16)) for _ in range(rng.randint(1, 3))))
        lines.append("")
    if rng.random() < 0.3:
        lines.extend(f"- {_sentence(rng, rng.randint(3, 8))}" for _ in range(rng.randint(2, 4)))
    return {"cell_type": "markdown", "id": f"cell-{index}", "metadata": {}, "source": "\n".join(lines).rstrip()}


def _table(rng: random.Random, rows: int) -> tuple[str, str]:
    columns = rng.sample(_COLUMNS[1:], 4)
    values = [[rng.choice(_REGIONS), *(round(rng.gauss(100, 35), 3) for _ in columns)] for _ in range(rows)]
    header = f"{'':>4} {'region':>10} " + " ".join(f"{c:>10}" for c in columns)
    plain = [header] + [
        f"{i:>4} {row[0]:>10} " + " ".join(f"{v:>10.3f}" for v in row[1:]) for i, row in enumerate(values)
    ]
    html = ['<div>\n<table border="1" class="dataframe">', "  <thead>", '    <tr style="text-align: right;">']
    html += ["      <th></th>", "      <th>region</th>", *(f"      <th>{c}</th>" for c in columns)]
    html += ["    </tr>", "  </thead>", "  <tbody>"]
    for i, row in enumerate(values):
        html += ["    <tr>", f"      <th>{i}</th>", f"      <td>{row[0]}</td>"]
        html += [f"      <td>{v:.3f}</td>" for v in row[1:]] + ["    </tr>"]
    html += ["  </tbody>", "</table>", f"<p>{rows} rows × {len(columns) + 1} columns</p>", "</div>"]
    return "\n".join(plain), "\n".join(html)


def _code_cell(rng: random.Random, index: int, execution_count: int, images: bool) -> dict[str, Any]:
    outputs: list[dict[str, Any]] = []
    roll = rng.random()
    if images and roll < 0.35:
        width, height = rng.choice(_IMAGE_SIZES)
        source = "\n".join(
            [
                f"fig, ax = plt.subplots(figsize=({width / 20:.1f}, {height / 20:.1f}))",
                f"ax.plot(df[{rng.choice(_COLUMNS[1:])!r}].rolling({rng.randint(3, 30)}).mean())",
                f"ax.set_title({_sentence(rng, 3)!r})",
                "plt.show()",
            ]
        )
        outputs.append(
            {
                "output_type": "display_data",
                "metadata": {},
                "data": {
                    "image/png": base64.b64encode(png_bytes(width, height, rng)).decode("ascii"),
                    "text/plain": f"<Figure size {width * 5}x{height * 5} with 1 Axes>",
                },
            }
        )
    elif roll < 0.6:
        epochs = rng.randint(3, 25)
        source = "\n".join(
            [
                f"for epoch in range({epochs}):",
                "    loss = train_one_epoch(model, loader, optimizer)",
                "    val = evaluate(model, val_loader)",
                '    print(f"epoch {epoch:3d}  loss {loss:.4f}  val {val:.4f}")',
            ]
        )
        loss = rng.uniform(1.5, 3.0)
        lines = []
        for epoch in range(epochs):
            loss *= rng.uniform(0.85, 0.99)
            lines.append(f"epoch {epoch:3d}  loss {loss:.4f}  val {loss * rng.uniform(1.0, 1.2):.4f}\n")
        outputs.append({"output_type": "stream", "name": "stdout", "text": "".join(lines)})
        if rng.random() < 0.2:
            outputs.append(
                {
                    "output_type": "stream",
                    "name": "stderr",
                    "text": f"/opt/conda/lib/python3.11/site-packages/torch/utils/data.py:{rng.randint(100, 900)}: "
                    "UserWarning: This DataLoader will create 4 worker processes in total.\n",
                }
            )
    elif roll < 0.85:
        rows = rng.randint(5, 20)
        source = f"df.groupby('region').agg(['mean', 'std']).head({rows})"
        plain, html = _table(rng, rows)
        outputs.append(
            {
                "output_type": "execute_result",
                "execution_count": execution_count,
                "metadata": {},
                "data": {"text/plain": plain, "text/html": html},
            }
        )
    else:
        name = rng.choice(_COLUMNS[1:])
        source = f"{name}_summary = df[{name!r}].describe()\n{name}_summary"
        stats = {k: round(rng.gauss(50, 20), 6) for k in ("count", "mean", "std", "min", "25%", "50%", "75%", "max")}
        plain = "\n".join(f"{k:<6} {v:>14.6f}" for k, v in stats.items()) + f"\nName: {name}, dtype: float64"
        outputs.append(
            {
                "output_type": "execute_result",
                "execution_count": execution_count,
                "metadata": {},
                "data": {"text/plain": plain},
            }
        )
    return {
        "cell_type": "code",
        "execution_count": execution_count,
        "id": f"cell-{index}",
        "metadata": {},
        "outputs": outputs,
        "source": source,
    }


def _cells(seed: int, images: bool = True) -> Iterator[dict[str, Any]]:
    """An endless, seeded stream of cells: the first N of it are the N-cell notebook for that seed."""
    rng = random.Random(seed)
    setup = "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt\n\ndf = pd.read_csv('sales.csv')"
    yield {
        "cell_type": "code",
        "execution_count": 1,
        "id": "cell-0",
        "metadata": {},
        "outputs": [],
        "source": setup,
    }
    execution_count, index = 1, 1
    while True:
        roll = rng.random()
        if roll < 0.3:
            yield _markdown_cell(rng, index)
        elif roll < 0.34:
            # Cells never run are common in real notebooks, and they put nulls in the JSON.
            yield {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell-{index}",
                "metadata": {},
                "outputs": [],
                "source": f"# TODO: {_sentence(rng, rng.randint(3, 8))}\n{rng.choice(_COLUMNS)}_check = None",
            }
        else:
            execution_count += 1
            yield _code_cell(rng, index, execution_count, images)
        index += 1


def _notebook(cells: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "version": "3.11.7"},
        },
        "nbformat": NBFORMAT,
        "nbformat_minor": NBFORMAT_MINOR,
    }


def build_notebook(cells: int, *, seed: int = 0, images: bool = True) -> dict[str, Any]:
    """An nbformat-4 notebook of `cells` cells as a plain dict (multi-line strings joined)."""
    if cells < 0:
        raise ValueError("cells must be >= 0")
    stream = _cells(seed, images)
    return _notebook([next(stream) for _ in range(cells)])


def _split(cell: dict[str, Any]) -> dict[str, Any]:
    """The cell as nbformat writes it: multi-line strings become lists of lines."""
    out = dict(cell)
    if isinstance(out.get("source"), str):
        out["source"] = out["source"].splitlines(True)
    if out.get("cell_type") == "code":
        split_outputs = []
        for output in out["outputs"]:
            output = dict(output)
            if output["output_type"] == "stream" and isinstance(output.get("text"), str):
                output["text"] = output["text"].splitlines(True)
            elif "data" in output:
                output["data"] = {
                    mime: value.splitlines(True)
                    if isinstance(value, str) and (mime.startswith("text/") or mime in _SPLIT_MIMES)
                    else value
                    for mime, value in output["data"].items()
                }
            split_outputs.append(output)
        out["outputs"] = split_outputs
    return out


def _dumps(value: Any) -> str:
    # nbformat's own writer settings (nbformat.v4.nbjson.JSONWriter).
    return json.dumps(value, indent=1, sort_keys=True, separators=(",", ": "), ensure_ascii=False)


def notebook_text(notebook: dict[str, Any]) -> str:
    """The notebook as nbformat would write it to disk."""
    split = dict(notebook)
    split["cells"] = [_split(cell) for cell in notebook["cells"]]
    return _dumps(split) + "\n"


def _write(path: str | Path, notebook: dict[str, Any], validate: bool) -> Path:
    if validate:
        nbformat.validate(notebook)
    target = Path(path)
    target.write_text(notebook_text(notebook), encoding="utf-8")
    return target


def generate_notebook(
    path: str | Path, cells: int = 40, *, seed: int = 0, images: bool = True, validate: bool = True
) -> Path:
    """Write an nbformat-4 notebook of `cells` cells to `path`; the same arguments give the same bytes."""
    return _write(path, build_notebook(cells, seed=seed, images=images), validate)


def _cell_weight(cell: dict[str, Any]) -> int:
    # A cell sits two levels deep in the file ({"cells": [cell]}), so every line of its own indent-1
    # rendering gains two spaces, and it is followed by ",\n".
    text = _dumps(_split(cell))
    return len(text.encode("utf-8")) + 2 * (text.count("\n") + 1) + 2


def build_notebook_of_size(target_bytes: int, *, seed: int = 0, images: bool = True) -> dict[str, Any]:
    """A notebook whose file is close to `target_bytes` (within a few percent above ~10 KB)."""
    if target_bytes <= 0:
        raise ValueError("target_bytes must be positive")
    overhead = len(_dumps(_notebook([])).encode("utf-8")) + 1
    size = overhead
    cells: list[dict[str, Any]] = []
    stream = _cells(seed, images)
    text_stream = _cells(seed + 1, images=False)
    while size < target_bytes * 0.99:
        # Ids are renumbered because the two streams both count from zero; ids must be unique.
        cell = {**next(stream), "id": f"cell-{len(cells)}"}
        weight = _cell_weight(cell)
        if size + weight > target_bytes * 1.02:
            # A plot would overshoot: top up with small text cells instead, so small targets are met.
            cell = {**next(text_stream), "id": f"cell-{len(cells)}"}
            weight = _cell_weight(cell)
            if size + weight > target_bytes * 1.02:
                break
        cells.append(cell)
        size += weight
    return _notebook(cells)


def generate_notebook_of_size(
    path: str | Path, target_bytes: int, *, seed: int = 0, images: bool = True, validate: bool = True
) -> Path:
    """Write a notebook whose file is close to `target_bytes` to `path`."""
    return _write(path, build_notebook_of_size(target_bytes, seed=seed, images=images), validate)
