"""Where the docs and the example DAGs say to create a channel in advance, they create the
topic first: on a topic that does not exist yet, nsqd's ``/channel/create`` answers
``404 TOPIC_NOT_FOUND``. The HTTP requests the pages show run here, in their order, on
a fresh topic of the test nsqd (or the real one of ``NSQD_HTTP_ADDRESS``)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXTS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "example_dags").rglob("*.py")]
)
_BASH = re.compile(r"^```(?:bash|sh|shell)[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_CURL = re.compile(r"curl -X POST '(http://[^'/]+)(/[^'?]*)\?([^']*)'")


def _paragraphs(path: Path) -> list[tuple[int, str]]:
    """``path``'s paragraphs (blank-line separated, docstrings included), with the line
    each starts on."""
    text = path.read_text(encoding="utf-8")
    found, line = [], 1
    for block in re.split(r"(\n[ \t]*\n)", text):
        if block.strip():
            found.append((line, block))
        line += block.count("\n")
    return found


def test_every_channel_create_comes_after_its_topic_create() -> None:
    """Each paragraph that tells to ``/channel/create`` creates the topic before, or
    names ``channel_depth`` (which creates both); a bash block counts as a paragraph."""
    offenders = []
    for path in TEXTS:
        for line, paragraph in _paragraphs(path):
            at = paragraph.find("/channel/create")
            if at < 0 or "channel_depth" in paragraph:
                continue
            if "/topic/create" not in paragraph[:at]:
                offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert offenders == []


def _documented_requests() -> list[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """Every bash block of the docs with a ``curl -X POST`` to ``/channel/create``: its
    requests, in order."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for block in _BASH.finditer(text):
            calls = [
                (path, dict(parse_qsl(query))) for _, path, query in _CURL.findall(block.group(1))
            ]
            if any(path == "/channel/create" for path, _ in calls):
                line = text.count("\n", 0, block.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", calls))
    return found


DOCUMENTED = _documented_requests()


def test_the_docs_show_the_requests() -> None:
    assert DOCUMENTED, "no page shows how to create a channel with nsqd's HTTP API"


@pytest.mark.parametrize("calls", [c for _, c in DOCUMENTED], ids=[i for i, _ in DOCUMENTED])
def test_the_documented_requests_create_the_channel_on_a_new_topic(nsqd, nsq_topic, calls) -> None:
    topics = {query["topic"] for _, query in calls}
    assert len(topics) == 1, topics  # one topic: replaced by a fresh one here
    channel = ""
    for path, query in calls:
        query = {**query, "topic": nsq_topic}
        status, body = nsqd.http("POST", path, query)
        assert status == 200, (path, status, body)
        channel = query.get("channel", channel)
    assert nsqd.channel_stats(nsq_topic, channel) is not None


def test_the_channel_alone_is_refused_on_a_new_topic(nsqd, nsq_topic) -> None:
    """Why the order matters (nsqd 1.3's answer, which the embedded broker copies)."""
    status, body = nsqd.http("POST", "/channel/create", {"topic": nsq_topic, "channel": "c"})
    assert (status, b"TOPIC_NOT_FOUND" in body) == (404, True), body
