"""Reading a page's ```python blocks and the notes beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from .markdown_blocks import PythonBlock, Snippet, python_blocks

PAGE = """# A page

Some text.

<!-- not run: needs a real nsqd cluster -->
```python
connect_to_the_cluster()
```

The block above is not run: it needs a real nsqd cluster.

<!-- test setup: import json -->
<!-- test raises: ValueError -->
```python
json.loads("")
```

<!-- test setup:
value = 41
-->
```python
value += 1
```
<!-- test check:
assert value == 42
-->

```bash
echo not python
```
"""


def test_blocks_come_with_their_notes_and_page_lines(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(PAGE)

    blocks = python_blocks(tmp_path, page)

    assert blocks == [
        PythonBlock(
            "docs/page.md",
            6,
            Snippet("connect_to_the_cluster()\n", 7),
            not_run="needs a real nsqd cluster",
        ),
        PythonBlock(
            "docs/page.md",
            14,
            Snippet('json.loads("")\n', 15),
            setup=Snippet("import json\n", 12),
            raises="ValueError",
        ),
        PythonBlock(
            "docs/page.md",
            21,
            Snippet("value += 1\n", 22),
            setup=Snippet("value = 41\n", 19),
            check=Snippet("assert value == 42\n", 25),
        ),
    ]
    assert [str(block) for block in blocks] == [
        "docs/page.md:6",
        "docs/page.md:14",
        "docs/page.md:21",
    ]
    lines = PAGE.splitlines()
    for block in blocks:  # each snippet's line is where its code sits on the page
        for snippet in (block.code, block.setup, block.check):
            if snippet is not None:
                assert snippet.code.splitlines()[0] in lines[snippet.line - 1]


def test_a_check_before_a_block_is_an_error_naming_its_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- test check: assert True -->\n```python\npass\n```\n")

    with pytest.raises(ValueError, match=r"page.md:3: test check goes after a block"):
        python_blocks(tmp_path, page)
