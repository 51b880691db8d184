"""The fenced ```python blocks of a Markdown page, with the test notes written beside them.

A note is an HTML comment, so it does not show on the rendered page. Right before a block
(several may be stacked there):

- ``<!-- not run: REASON -->``: the test skips the block with REASON. The page must also
  say it in words a reader sees (a sentence next to the block).
- ``<!-- test setup: CODE -->``: CODE runs first, in the same namespace (imports and
  data the block takes for granted, messages a DAG waits for).
- ``<!-- test raises: NAME -->``: the block must raise the exception class NAME.

Right after a block:

- ``<!-- test check: CODE -->``: CODE runs last, in the same namespace, and asserts what
  the block promises.

CODE may span lines; it starts on the line after the note's keyword.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_NOTE = re.compile(r"<!--\s*(not run|test setup|test raises|test check):(.*?)-->", re.DOTALL)


@dataclass(frozen=True)
class Snippet:
    """Code and the page line its first line sits on (so tracebacks point at the page)."""

    code: str
    line: int


@dataclass(frozen=True)
class PythonBlock:
    """One ```python block of a page and its notes."""

    page: str  # relative to the repository root, e.g. "docs/spark.md"
    line: int  # of the opening fence
    code: Snippet
    not_run: str | None = None
    setup: Snippet | None = None
    raises: str | None = None
    check: Snippet | None = None

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _notes_before(text: str, end: int) -> list[re.Match[str]]:
    """The notes stacked right before ``end`` (only blank lines between them)."""
    notes: list[re.Match[str]] = []
    while True:
        head = text[:end].rstrip()
        if not head.endswith("-->"):
            return notes
        start = head.rfind("<!--")
        note = _NOTE.fullmatch(head, start) if start >= 0 else None
        if note is None:
            return notes
        notes.append(note)
        end = start


def _snippet(text: str, note: re.Match[str]) -> Snippet:
    body = note.group(2).lstrip(" \t")
    first_line = _line_of(text, note.start(2))
    if body.startswith("\n"):  # CODE on the lines after the keyword
        body, first_line = body[1:], first_line + 1
    return Snippet(body.rstrip() + "\n", first_line)


def python_blocks(root: Path, page: Path) -> list[PythonBlock]:
    """Every ```python block of ``page`` (a path under ``root``), in page order."""
    text = page.read_text(encoding="utf-8")
    name = page.relative_to(root).as_posix()
    blocks = []
    for fence in _FENCE.finditer(text):
        fields: dict[str, object] = {}
        for note in _notes_before(text, fence.start()):
            kind = note.group(1)
            if kind == "not run":
                fields["not_run"] = " ".join(note.group(2).split())
            elif kind == "test setup":
                fields["setup"] = _snippet(text, note)
            elif kind == "test raises":
                fields["raises"] = note.group(2).strip()
            else:
                raise ValueError(
                    f"{name}:{_line_of(text, note.start())}: {kind} goes after a block"
                )
        after = _NOTE.match(text, len(text) - len(text[fence.end() :].lstrip()))
        if after is not None and after.group(1) == "test check":
            fields["check"] = _snippet(text, after)
        line = _line_of(text, fence.start())
        code = Snippet(fence.group(1), line + 1)
        blocks.append(PythonBlock(name, line, code, **fields))  # type: ignore[arg-type]
    return blocks
