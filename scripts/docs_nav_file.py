"""An MkDocs hook for the documentation site (``make docs``): the reference's navigation
file (``reference/SUMMARY.md``, written by scripts/docs_pages.py and read by the
literate-nav plugin) is not built as a page of its own. literate-nav keeps it as a page
outside the navigation, and an ``exclude_docs`` entry comes too late for a generated
file: without this the site holds an orphan ``reference/SUMMARY.html``.
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import Files, InclusionLevel

NAV_FILE = "reference/SUMMARY.md"


@event_priority(-200)  # after literate-nav (-100) has read it
def on_files(files: Files, config: MkDocsConfig) -> Files:
    nav_file = files.get_file_from_path(NAV_FILE)
    if nav_file is None:
        raise SystemExit(f"{NAV_FILE} was not generated: scripts/docs_pages.py writes it")
    nav_file.inclusion = InclusionLevel.EXCLUDED
    return files
