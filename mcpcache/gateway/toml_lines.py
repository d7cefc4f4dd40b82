"""Where each key of a TOML text is written, so that a configuration error can name its line.

The standard library's tomllib gives values, not positions; `TomlLines` is the small walk over the text that
finds them, kept apart from the schema it serves (`mcpcache.gateway.config`).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["TomlLines"]


class TomlLines:
    """Where each key of a TOML text is written, so an error can name its line.

    tomllib gives values, not positions. This walks the lines once, following table headers (`[a.b]`,
    `[[a.b]]` with their array index) and `key = value` lines (dotted and quoted keys included), and
    remembers the first line of every key path and of every table a header or dotted key implies.
    Best effort: a path it cannot place (inside a multi-line value, say) falls back to its nearest
    enclosing table, and to no line at all.
    """

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple[int | str, ...], int] = {}
        arrays: dict[tuple[int | str, ...], int] = {}
        table: tuple[int | str, ...] = ()
        in_multiline: str | None = None
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if in_multiline is not None:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            if not line or line.startswith("#"):
                continue
            if line.startswith("[["):
                keys = _split_key(line[2:].split("]]", 1)[0])
                base = tuple(keys)
                index = arrays.get(base, -1) + 1
                arrays[base] = index
                table = (*base, index)
                self._remember(table, number)
                continue
            if line.startswith("["):
                table = tuple(_split_key(line[1:].split("]", 1)[0]))
                self._remember(table, number)
                continue
            key_text, equals, value = _split_assignment(line)
            if not equals:
                continue
            self._remember((*table, *_split_key(key_text)), number)
            for quote in ('"""', "'''"):
                if value.lstrip().startswith(quote) and value.count(quote) == 1:
                    in_multiline = quote

    def _remember(self, path: tuple[int | str, ...], number: int) -> None:
        for end in range(1, len(path) + 1):
            self._lines.setdefault(path[:end], number)

    def line_of(self, loc: Sequence[int | str]) -> int | None:
        path = tuple(loc)
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return None


def _split_assignment(line: str) -> tuple[str, bool, str]:
    """(key text, whether there is an `=`, value text), the `=` found outside quotes."""
    quote: str | None = None
    for index, char in enumerate(line):
        if quote is not None:
            if char == quote:
                quote = None
        elif char in ('"', "'"):
            quote = char
        elif char == "=":
            return line[:index].strip(), True, line[index + 1 :]
    return line, False, ""


def _split_key(text: str) -> list[str]:
    """`a."b.c".d` -> ["a", "b.c", "d"]."""
    parts: list[str] = []
    current = ""
    quote: str | None = None
    for char in text.strip():
        if quote is not None:
            if char == quote:
                quote = None
            else:
                current += char
        elif char in ('"', "'"):
            quote = char
        elif char == ".":
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return parts


# The one-command first try --------------------------------------------------------------------------
