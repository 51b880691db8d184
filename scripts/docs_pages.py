"""The pages of the documentation site that are generated, not written. ``make docs``
(``mkdocs build``) runs this through the gen-files plugin:

- the home page is README.md and the changelog CHANGELOG.md, their links turned from
  links into the repository into links inside the site;
- each example DAG (``example_dags/*.py``) gets a page showing its code, and the guides'
  links to those files point at it;
- the API reference: one page per module of the package, rendered from its docstrings
  by mkdocstrings.

Nothing is copied by hand, so the site cannot drift from the code and the repository's
own pages.
"""

from __future__ import annotations

import re
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "airflow_provider_nsq"
#: Modules that hold no API: a command line's entry point.
SKIPPED = {"__main__"}
#: Pages whose class is built from the provider's other classes, and whose reference
#: lists what it gets from them (NSQHook: its role hooks' methods).
INHERITED_MEMBERS = {"airflow_provider_nsq.hooks.nsq"}
_EXAMPLE_LINK = re.compile(r"\]\(\.\./example_dags/([\w/]+)\.py\)")


def site_links(markdown: str, prefix: str) -> str:
    """``markdown``'s links into the repository as links inside the site (``prefix``:
    where the page sits relative to the repository's root, ``""`` or ``"docs/"``)."""
    if prefix:  # a guide: ../example_dags/x.py
        return _EXAMPLE_LINK.sub(r"](examples/\1.md)", markdown)
    markdown = re.sub(r"\]\(docs/", "](", markdown)
    markdown = re.sub(r"\]\(example_dags/([\w/]+)\.py\)", r"](examples/\1.md)", markdown)
    return markdown.replace("](CHANGELOG.md)", "](changelog.md)")


def module_pages() -> list[tuple[tuple[str, ...], Path]]:
    """``(dotted name parts, source file)`` of every module the reference documents:
    every module of the package but private ones and command-line entry points."""
    pages = []
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] in SKIPPED or any(p.startswith("_") and p != "__init__" for p in parts):
            continue
        pages.append((parts[:-1] if parts[-1] == "__init__" else parts, path))
    return pages


def write_page(doc: str, text: str, source: Path) -> None:
    with mkdocs_gen_files.open(doc, "w") as page:
        page.write(text)
    mkdocs_gen_files.set_edit_path(doc, "../" + source.relative_to(ROOT).as_posix())


def main() -> None:
    write_page("index.md", site_links((ROOT / "README.md").read_text(), ""), ROOT / "README.md")
    write_page("changelog.md", (ROOT / "CHANGELOG.md").read_text(), ROOT / "CHANGELOG.md")
    for guide in sorted((ROOT / "docs").glob("*.md")):
        text = guide.read_text()
        if _EXAMPLE_LINK.search(text):
            write_page(guide.name, site_links(text, "docs/"), guide)
    for example in sorted((ROOT / "example_dags").glob("*.py")):
        code = example.read_text()
        title = f"Example DAG: `{example.name}`"
        write_page(
            f"examples/{example.stem}.md",
            f'# {title}\n\n```python title="example_dags/{example.name}"\n{code}```\n',
            example,
        )

    nav = mkdocs_gen_files.Nav()
    for parts, path in module_pages():
        inner = parts[1:]
        doc = (
            Path(*inner, "index.md")
            if path.name == "__init__.py"
            else Path(*inner).with_suffix(".md")
        )
        nav[inner or (PACKAGE,)] = doc.as_posix()
        name = ".".join(parts)
        options = (
            "    options:\n      inherited_members: true\n" if name in INHERITED_MEMBERS else ""
        )
        write_page(f"reference/{doc.as_posix()}", f"# `{name}`\n\n::: {name}\n{options}", path)
    with mkdocs_gen_files.open("reference/SUMMARY.md", "w") as summary:
        summary.writelines(nav.build_literate_nav())


main()
