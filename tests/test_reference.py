"""docs/reference.md is generated from the docstrings, and this test fails when it is stale.

The page is written by griffe2md (Markdown from Griffe, the static reader of Python APIs behind mkdocstrings):
the public names of the modules users import, each module's `__all__`, the names of `mcpcache` itself first
and every later module's remaining ones after it. To write it again after changing a docstring or a public
signature:

    python tests/test_reference.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference.md"

MODULES = ("mcpcache", "mcpcache.client", "mcpcache.server", "mcpcache.stores", "mcpcache.refs")
"""The modules whose `__all__` the page documents, in this order."""

HEAD = """\
# API reference

Generated from the docstrings by [griffe2md](https://mkdocstrings.github.io/griffe2md/) (`python
tests/test_reference.py`; `tests/test_reference.py` fails when this page is stale): the public names of
`mcpcache`, then the other names of `mcpcache.client`, `mcpcache.server`, `mcpcache.stores` and
`mcpcache.refs`. Guides: [client.md](client.md), [server.md](server.md), [references.md](references.md).

"""

CONFIG: dict[str, Any] = {
    "heading_level": 2,
    "members_order": "source",
    "show_submodules": False,
    "inherited_members": False,
    "show_if_no_docstring": False,
    "show_signature_annotations": True,
    "line_length": 100,
    "filters": ["!^_"],
}


def render() -> str:
    """The page, as griffe2md writes it from the sources in this tree."""
    from griffe import GriffeLoader, Parser
    from griffe2md import default_config, render_object_docs

    loader = GriffeLoader(docstring_parser=Parser("google"), search_paths=[str(ROOT)])
    package = loader.load("mcpcache")
    loader.resolve_aliases(external=False, implicit=False)
    parts, documented = [HEAD], set[str]()
    for name in MODULES:
        module = package if name == "mcpcache" else package[name.removeprefix("mcpcache.")]
        members = [member for member in module.exports or () if member not in documented]
        documented.update(members)
        config = {**default_config, **CONFIG, "members": members}
        parts.append(render_object_docs(module, config).strip() + "\n")  # type: ignore[arg-type]
    return _github_links("\n".join(parts))


def _github_links(page: str) -> str:
    """griffe2md links to `#mcpcache.X.y`; GitHub names a heading's anchor by its text, lowercased, without
    dots. A link to a name not on the page (a base class of another package) keeps only its text."""
    headings = set(re.findall(r"^#+ `([\w.]+)`$", page, re.MULTILINE))

    def link(found: re.Match[str]) -> str:
        text, target = found.group(1), found.group(2)
        return f"[{text}](#{target.replace('.', '').lower()})" if target in headings else text

    return re.sub(r"\[([^\]]+)\]\(#([\w.]+)\)", link, page)


@pytest.mark.slow
def test_the_reference_page_is_generated_from_the_current_docstrings() -> None:
    pytest.importorskip("griffe2md", reason="the test extra brings griffe2md")
    page = render()
    assert PAGE.read_text(encoding="utf-8") == page, "docs/reference.md is stale: run python tests/test_reference.py"


def test_the_reference_page_names_every_public_name() -> None:
    import mcpcache

    page = PAGE.read_text(encoding="utf-8")
    missing = [name for name in mcpcache.__all__ if f"### `mcpcache.{name}`" not in page]
    assert not missing, f"docs/reference.md has no entry for {missing}"


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
