"""The pages of the documentation site that are generated, not written. ``make docs``
(``mkdocs build``) runs this through the gen-files plugin:

- the home page is docs/index.md with README.md's introduction and sections
  (``<!-- README.md: Quick start -->`` takes the section under that heading), so the
  quick start a test runs is the one the site shows; the changelog is CHANGELOG.md; their
  links into the repository become links inside the site;
- each example DAG (``example_dags/*.py``) gets a page showing its code, and the guides'
  links to those files point at it;
- the API reference: one page per module of the package, rendered from its docstrings
  by mkdocstrings, titled by its import path. Its navigation opens with the modules the
  reference's landing page (docs/reference/index.md) links to, under that page's
  headings and in its order; every other module goes under "Internals", grouped by
  subpackage.

Nothing is copied by hand, so the site cannot drift from the code and the repository's
own pages.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "airflow_provider_nsq"
#: Modules that hold no API: a command line's entry point.
SKIPPED = {"__main__"}
#: The reference's landing page (written), whose links order the reference's navigation.
LANDING = ROOT / "docs" / "reference" / "index.md"
#: Pages whose class is built from the provider's other classes, and whose reference
#: lists what it gets from them (NSQHook: its role hooks' methods; each role hook: the
#: base hook's).
INHERITED_MEMBERS = {
    "airflow_provider_nsq.hooks.nsq",
    "airflow_provider_nsq.hooks.producer",
    "airflow_provider_nsq.hooks.consumer",
    "airflow_provider_nsq.hooks.admin",
}
_EXAMPLE_LINK = re.compile(r"\]\(\.\./example_dags/([\w/]+)\.py\)")
_README_PART = re.compile(r"^<!-- README\.md: (?P<part>[^>]+?) -->$", re.MULTILINE)
_MODULE_LINK = re.compile(r"\]\((?P<doc>[\w/.]+\.md)\)")


def site_links(markdown: str, prefix: str) -> str:
    """``markdown``'s links into the repository as links inside the site (``prefix``:
    where the page sits relative to the repository's root, ``""`` or ``"docs/"``)."""
    if prefix:  # a guide: ../example_dags/x.py
        return _EXAMPLE_LINK.sub(r"](examples/\1.md)", markdown)
    markdown = re.sub(r"\]\(docs/", "](", markdown)
    markdown = re.sub(r"\]\(example_dags/([\w/]+)\.py\)", r"](examples/\1.md)", markdown)
    return markdown.replace("](CHANGELOG.md)", "](changelog.md)")


def readme_part(readme: str, part: str) -> str:
    """``"intro"``: what README.md says between its title and its first code block (what
    the provider is, and why); else the body of the README's ``## {part}`` section."""
    if part == "intro":
        found = re.search(r"\A# [^\n]*\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    else:
        heading = re.escape(part)
        found = re.search(rf"^## {heading}\n(.*?)(?=^## |\Z)", readme, re.MULTILINE | re.DOTALL)
    if found is None or not found.group(1).strip():
        raise SystemExit(f"docs/index.md includes README.md's {part!r}, which README.md lacks")
    return found.group(1).strip() + "\n"


def home_page() -> str:
    """docs/index.md with the parts of README.md it names filled in."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    page = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    page = _README_PART.sub(lambda m: site_links(readme_part(readme, m["part"]), ""), page)
    return page


def module_pages() -> dict[str, tuple[str, Path]]:
    """Each module the reference documents, by import path: its page (under
    ``reference/``) and its source file. Every module of the package but private ones,
    command-line entry points and empty ``__init__.py`` files."""
    pages = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] in SKIPPED or any(p.startswith("_") and p != "__init__" for p in parts):
            continue
        if not ast.parse(path.read_text(encoding="utf-8")).body:
            continue  # an empty __init__.py: a page with nothing on it
        if parts[-1] == "__init__":
            parts = parts[:-1]
            inner = parts[1:]
            doc = Path(*inner, "index.md") if inner else Path(f"{PACKAGE}.md")
        else:
            doc = Path(*parts[1:]).with_suffix(".md")
        pages[".".join(parts)] = (doc.as_posix(), path)
    return pages


def declared_names(path: Path) -> list[str] | None:
    """The names ``path`` lists in ``__all__`` (a literal list), or None without one."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, ast.Assign | ast.AnnAssign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in targets
        ):
            return list(ast.literal_eval(node.value)) if node.value is not None else []
    return None


def declares_api(path: Path) -> bool:
    """Whether ``path`` is a package's ``__init__.py`` naming its API in ``__all__`` (the
    client, the Spark package, the embedded daemons): its page lists every name there
    and all their members, documented or not (a constant, an options field, a method
    made by a decorator), so that the whole API it declares is on the page."""
    return path.name == "__init__.py" and declared_names(path) is not None


def landing_sections(pages: dict[str, tuple[str, Path]]) -> list[tuple[str, list[str]]]:
    """The landing page's ``##`` headings and the modules each links to, in its order."""
    by_doc = {doc: module for module, (doc, _) in pages.items()}
    sections: list[tuple[str, list[str]]] = []
    for block in re.split(r"^## ", LANDING.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]:
        heading, _, body = block.partition("\n")
        modules = []
        for link in _MODULE_LINK.finditer(body):
            if link["doc"].startswith("../"):
                continue  # a guide
            if link["doc"] not in by_doc:
                raise SystemExit(f"{LANDING.relative_to(ROOT)} links {link['doc']}: no such module")
            if by_doc[link["doc"]] not in modules:
                modules.append(by_doc[link["doc"]])
        if modules:
            sections.append((heading.strip(), modules))
    return sections


def nav_label(module: str, within: str = PACKAGE) -> str:
    """A module's label in the navigation: its path inside ``within`` (the sidebar cuts
    long labels; each page's title is its whole import path)."""
    return module[len(within) + 1 :] if module.startswith(within + ".") else module


def reference_nav(pages: dict[str, tuple[str, Path]]) -> mkdocs_gen_files.Nav:
    """The landing page first, then the modules it links to: those under its first
    heading at the top (the sidebar shows them open), each later heading's as a section;
    then "Internals": every other module, a section per subpackage."""
    nav = mkdocs_gen_files.Nav()
    nav[()] = "index.md"  # untitled: section-index makes it the section's own page
    listed = set()
    for number, (heading, modules) in enumerate(landing_sections(pages)):
        for module in modules:
            where = (nav_label(module),) if number == 0 else (heading, nav_label(module))
            nav[where] = pages[module][0]
            listed.add(module)
    for module, (doc, _) in pages.items():
        if module not in listed:
            parts = module.split(".")
            if len(parts) > 1 and (ROOT / PACKAGE / parts[1]).is_dir():
                group = ".".join(parts[:2])
                label = nav_label(module, group) if module != group else nav_label(group)
                nav[("Internals", nav_label(group), label)] = doc
            else:
                nav[("Internals", PACKAGE, nav_label(module))] = doc
    return nav


def write_page(doc: str, text: str, source: Path) -> None:
    with mkdocs_gen_files.open(doc, "w") as page:
        page.write(text)
    mkdocs_gen_files.set_edit_path(doc, "../" + source.relative_to(ROOT).as_posix())


def main() -> None:
    write_page("index.md", home_page(), ROOT / "docs" / "index.md")
    write_page("changelog.md", (ROOT / "CHANGELOG.md").read_text(), ROOT / "CHANGELOG.md")
    for guide in sorted((ROOT / "docs").glob("*.md")):
        text = guide.read_text()
        if guide.name != "index.md" and _EXAMPLE_LINK.search(text):  # index.md: above
            write_page(guide.name, site_links(text, "docs/"), guide)
    for example in sorted((ROOT / "example_dags").glob("*.py")):
        code = example.read_text()
        title = f"Example DAG: `{example.name}`"
        write_page(
            f"examples/{example.stem}.md",
            f'# {title}\n\n```python title="example_dags/{example.name}"\n{code}```\n',
            example,
        )

    pages = module_pages()
    public = {module for _, modules in landing_sections(pages) for module in modules}
    for module, (doc, path) in pages.items():
        # The title's id is the module's path: a cross-reference to the module lands here.
        text = f"# `{module}` {{ #{module} }}\n\n::: {module}\n"
        options = []
        if module in public and declares_api(path):
            options.append("      show_if_no_docstring: true\n")
        elif module in public and (names := declared_names(path)) is not None:
            # A public module shows its public names only: those of its __all__ (the
            # rest is internal, see the reference's landing page).
            options.append(f"      members: {names!r}\n")
        if module in INHERITED_MEMBERS:
            options.append("      inherited_members: true\n")
        if options:
            text += "    options:\n" + "".join(options)
        write_page(f"reference/{doc}", text, path)
    with mkdocs_gen_files.open("reference/SUMMARY.md", "w") as summary:
        summary.writelines(reference_nav(pages).build_literate_nav())


main()
