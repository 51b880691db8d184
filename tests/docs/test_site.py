"""The documentation site as a reader gets it: ``mkdocs build --strict`` (what ``make
docs`` runs) builds it once into a temporary folder, then its HTML is checked: no
docstring role left raw, every signature formatted, no page outside the navigation, the
reference's landing page naming the API a DAG uses, every link working when the site is
opened from disk (site/index.html), nothing loaded from another host. The build takes
from ten seconds to a minute."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytest.importorskip("mkdocs", reason="the [docs] extra is not installed")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
#: A Sphinx role as the site would show it unrendered (Markdown turns its backticks
#: into <code>): ":meth:<code>consume</code>".
RAW_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|exc|data|obj|const):(?:<code>|`)")
#: A Sphinx field the docstring parser did not turn into a table row (":param topic:").
RAW_FIELD = re.compile(r":(?:param|type|returns?|rtype|raises?)(?: [\w.*]+)?:")
#: mkdocstrings' signature formatter wraps at 60 columns (an unbreakable name or default
#: may run past it); an unformatted signature is one line, hundreds of columns long.
SIGNATURE_WIDTH = 100
#: What the reference's landing page names, each a link to where it is documented.
PUBLIC_API = {
    "NSQHook": "airflow_provider_nsq.hooks.nsq.NSQHook",
    "NSQPublishOperator": "airflow_provider_nsq.operators.nsq.NSQPublishOperator",
    "NSQDeferredPublishOperator": "airflow_provider_nsq.operators.nsq.NSQDeferredPublishOperator",
    "NSQMultiPublishOperator": "airflow_provider_nsq.operators.nsq.NSQMultiPublishOperator",
    "NSQConsumeOperator": "airflow_provider_nsq.operators.nsq_consume.NSQConsumeOperator",
    "NSQSensor": "airflow_provider_nsq.sensors.nsq.NSQSensor",
}


class _Links(HTMLParser):
    """A page's links (``href``/``src``), its ``id``s, and the links of its primary
    navigation (the sidebar, which Material renders whole on every page)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        #: What the browser loads with the page (scripts, stylesheets, images).
        self.resources: list[str] = []
        self.ids: set[str] = set()
        self.nav_links: list[str] = []
        self._nav_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "nav" and ("md-nav--primary" in (found.get("class") or "") or self._nav_depth):
            self._nav_depth += 1
        if found.get("id"):
            self.ids.add(found["id"] or "")
        for name in ("href", "src"):
            if found.get(name):
                self.links.append(found[name] or "")
                if name == "src" or tag == "link":
                    self.resources.append(found[name] or "")
                if self._nav_depth and tag == "a" and name == "href":
                    self.nav_links.append(found[name] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self._nav_depth:
            self._nav_depth -= 1


@dataclass
class Site:
    root: Path
    log: str

    @cached_property
    def pages(self) -> dict[str, str]:
        """Each HTML page's text, by its path in the site."""
        return {
            page.relative_to(self.root).as_posix(): page.read_text(encoding="utf-8")
            for page in sorted(self.root.rglob("*.html"))
        }

    def parsed(self, page: str) -> _Links:
        parser = _Links()
        parser.feed(self.pages[page])
        return parser

    def target(self, page: str, link: str, served: bool = False) -> tuple[str, str] | None:
        """The site file and fragment a link of ``page`` points at (``served``: as a web
        server finds it, a folder's index.html for a folder); None for a link out of the
        site (another scheme or host)."""
        parts = urlsplit(link)
        if parts.scheme or parts.netloc:
            return None
        if not parts.path:
            return page, parts.fragment
        path = os.path.normpath(os.path.join(os.path.dirname(page), unquote(parts.path)))
        if served and (self.root / path).is_dir():
            path = os.path.join(path, "index.html")
        return Path(path).as_posix(), parts.fragment


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    return Site(out, log)


def test_no_docstring_role_is_shown_raw(site: Site) -> None:
    raw = {page: len(RAW_ROLE.findall(text)) for page, text in site.pages.items()}
    raw = {page: count for page, count in raw.items() if count}
    assert not raw, f"{sum(raw.values())} raw roles on {len(raw)} pages: {sorted(raw)[:10]}"


def test_param_fields_are_parameter_tables(site: Site) -> None:
    raw = sorted(page for page, text in site.pages.items() if RAW_FIELD.search(text))
    assert not raw, f"raw :param:/:returns: fields on {raw[:10]}"
    sensor = site.pages["reference/sensors/nsq.html"]
    table = sensor.partition('doc-section-title">Parameters:')[2]
    for name in ("topic", "channel", "min_messages", "deferrable"):
        assert f"<code>{name}</code>" in table, name


def test_roles_link_to_what_the_site_documents(site: Site) -> None:
    """The hook's page: its docstrings' roles for its methods (written on the role hook
    that defines them, NSQConsumerHook for consume) and for the client's classes are
    links to where those are documented."""
    parsed = site.parsed("reference/hooks/nsq.html")
    page = site.pages["reference/hooks/nsq.html"]
    for title, href in [
        ("consume()", "consumer.html#airflow_provider_nsq.hooks.consumer.NSQConsumerHook.consume"),
        ("NSQConsumer", "../client/index.html#airflow_provider_nsq.client.NSQConsumer"),
    ]:
        assert f'href="{href}"><code>{title}</code></a>' in page, title
        assert href in parsed.links


def test_every_signature_is_formatted(site: Site) -> None:
    assert "Formatting signatures requires" not in site.log, "neither Ruff nor Black installed"
    signatures = []
    for page, text in site.pages.items():
        for block in re.findall(
            r'<div class="doc-signature highlight"><pre>(.*?)</pre>', text, re.S
        ):
            signature = unescape(re.sub(r"<[^>]+>", "", block))
            # A function's or a class's (an attribute's is its value: a long string
            # stays one line, formatted or not).
            if re.match(r"[\w.]+\(", signature):
                signatures.append((page, signature))
    assert len(signatures) > 100, "the reference renders (almost) no signature"
    long = [
        (page, line)
        for page, signature in signatures
        for line in signature.splitlines()
        if len(line) > SIGNATURE_WIDTH
    ]
    assert not long, f"{len(long)} unformatted signature lines, e.g. {long[0]}"


def test_every_page_is_in_the_navigation(site: Site) -> None:
    nav_links = site.parsed("index.html").nav_links
    in_nav = {site.target("index.html", link, served=True) for link in nav_links}
    in_nav_pages = {target[0] for target in in_nav if target is not None}
    orphans = sorted(set(site.pages) - in_nav_pages - {"index.html", "404.html"})
    assert not orphans, f"pages no navigation entry leads to: {orphans}"


def test_reference_pages_are_titled_by_their_import_path(site: Site) -> None:
    for page, text in site.pages.items():
        if not page.startswith("reference/") or page == "reference/index.html":
            continue
        title = re.search(r"<h1[^>]*>(.*?)</h1>", text, re.S)
        assert title is not None, page
        name = unescape(re.sub(r"<[^>]+>", "", title.group(1))).strip().rstrip("¶")
        assert re.fullmatch(r"airflow_provider_nsq(\.\w+)*", name), (page, name)
        assert f'id="{name}"' in title.group(0), page  # where :mod: links land


def test_the_reference_opens_with_the_api_a_dag_uses(site: Site) -> None:
    landing = "reference/index.html"
    parsed = site.parsed(landing)
    for name, identifier in PUBLIC_API.items():
        links = [
            site.target(landing, href) for href in parsed.links if href.endswith(f"#{identifier}")
        ]
        assert links, f"the reference's landing page does not link {name}"
        page, anchor = links[0]
        assert anchor in site.parsed(page).ids, f"{name}: {page} has no #{anchor}"
    # The navigation: the landing page, then the hook, and the internals last.
    nav = [
        link for link in parsed.nav_links if site.target(landing, link)[0].startswith("reference/")
    ]
    assert nav[:2] == ["index.html", "hooks/nsq.html"], nav[:2]
    assert site.parsed("reference/sensors/nsq.html").ids.isdisjoint(
        {"airflow_provider_nsq.sensors.nsq.import_callable"}
    ), "the sensor's page lists a helper it imports"


def test_the_client_page_lists_every_public_name_of_the_client(site: Site) -> None:
    """Documented or not: ``ACK_MODES`` and ``Compression`` have no docstring, and the
    consumers' ``consume``/``read`` are made by a decorator."""
    from airflow_provider_nsq import client

    ids = site.parsed("reference/client/index.html").ids
    names = [*client.__all__, "NSQConsumer.consume", "NSQConsumer.read"]
    missing = [name for name in names if f"airflow_provider_nsq.client.{name}" not in ids]
    assert not missing, f"reference/client/index.html does not document {missing}"


def test_every_link_opens_from_disk(site: Site) -> None:
    """A link to a folder (``hooks/nsq/``) needs a web server to become its
    index.html; opened from disk, every link must name a file that exists. (Not
    404.html's: only a web server shows it, and its links start at the server's root.)"""
    broken = []
    for page in set(site.pages) - {"404.html"}:
        for link in site.parsed(page).links:
            target = site.target(page, link)
            if target is None:
                continue
            path = site.root / target[0]
            if not path.is_file():
                broken.append((page, link))
    assert not broken, f"{len(broken)} links to no file, e.g. {broken[:5]}"


def test_the_site_loads_nothing_from_another_host(site: Site) -> None:
    """Opened from disk with no network, or served inside a company's network, a page
    loads only the site's own files (no web fonts, no scripts from a CDN)."""
    outside = {
        (page, url)
        for page in site.pages
        for url in site.parsed(page).resources
        if site.target(page, url) is None
    }
    assert not outside, f"pages load from other hosts: {sorted(outside)[:5]}"
