"""The documentation site's Griffe extensions (scripts/docs_sphinx_roles.py,
scripts/docs_imported_names.py), on a small package written for the test: how each
Sphinx role of a docstring is resolved and shown, and which imported names a module's
page lists. The built site itself is checked in test_site.py."""

from __future__ import annotations

import html
import logging
import re
from pathlib import Path
from textwrap import dedent

import pytest

griffe = pytest.importorskip("griffe", reason="the [docs] extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
EXTENSIONS = [
    f"{ROOT / 'scripts' / 'docs_imported_names.py'}:ImportedNames",
    f"{ROOT / 'scripts' / 'docs_sphinx_roles.py'}:SphinxRoles",
]
_AUTOREF = re.compile(r'<autoref identifier="([^"]+)" optional><code>([^<]*)</code></autoref>')

PACKAGE = {
    "pkg/__init__.py": '''
        """The package: :mod:`.sub`, :class:`~pkg.sub.mod.Thing`, :func:`helper`."""
        from .sub.mod import Thing
        from .tools import helper

        __all__ = ["Thing", "helper"]
        ''',
    "pkg/tools.py": '''
        """Tools."""

        def helper() -> None:
            """Helps."""
        ''',
    "pkg/sub/__init__.py": '''
        """Sub: :mod:`.mod`, :mod:`..tools`."""
        ''',
    "pkg/sub/mod.py": '''
        """Mod: :class:`Thing`, :meth:`Thing.run`, :func:`~..tools.helper`,
        :class:`asyncio.Task`, :func:`go <..tools.helper>`, :py:data:`LIMIT`."""
        import asyncio

        from ..tools import helper

        __all__ = ["LIMIT", "Thing", "helper"]

        LIMIT = 3
        """The limit."""


        class Thing:
            """A thing: :meth:`run` (its own), :attr:`size`.

            :param size: how big (:data:`LIMIT` at most).
            """

            size = 1
            """How big."""

            def run(self) -> None:
                """Run; see :meth:`.stop` and :exc:`ValueError`."""

            def stop(self) -> None:
                """Stop."""
        ''',
}


def load(tmp_path: Path, files: dict[str, str]) -> griffe.Module:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text).lstrip(), encoding="utf-8")
    return griffe.load(
        "pkg", search_paths=[tmp_path], extensions=griffe.load_extensions(*EXTENSIONS)
    )


def refs(obj: griffe.Object) -> list[tuple[str, str]]:
    """Each cross-reference of ``obj``'s docstring: (identifier, what the page shows)."""
    assert obj.docstring is not None
    return [(ident, html.unescape(title)) for ident, title in _AUTOREF.findall(obj.docstring.value)]


@pytest.fixture
def pkg(tmp_path: Path) -> griffe.Module:
    return load(tmp_path, PACKAGE)


def test_no_role_is_left_in_any_docstring(pkg: griffe.Module) -> None:
    for path in ("pkg", "pkg.sub", "pkg.sub.mod", "pkg.sub.mod.Thing", "pkg.sub.mod.Thing.run"):
        assert ":`" not in pkg.modules_collection[path].docstring.value, path


def test_relative_and_full_paths_link_to_the_public_import_path(pkg: griffe.Module) -> None:
    # pkg's __all__ re-exports Thing and helper: links go there, not to their modules.
    assert refs(pkg) == [("pkg.sub", "sub"), ("pkg.Thing", "Thing"), ("pkg.helper", "helper()")]
    assert refs(pkg["sub"]) == [("pkg.sub.mod", "mod"), ("pkg.tools", "tools")]


def test_names_resolve_from_the_docstring_outwards(pkg: griffe.Module) -> None:
    assert refs(pkg["sub.mod"]) == [
        ("pkg.Thing", "Thing"),
        ("pkg.Thing.run", "Thing.run()"),  # a member of a re-exported class: under it
        ("pkg.helper", "helper()"),  # ~..tools.helper: one package up, last name shown
        ("asyncio.Task", "asyncio.Task"),  # not in the package: plain code on the site
        ("pkg.helper", "go"),  # an explicit title
        ("pkg.sub.mod.LIMIT", "LIMIT"),  # :py:data:, the domain spelled out
    ]
    thing = pkg["sub.mod.Thing"]
    assert refs(thing) == [
        ("pkg.Thing.run", "run()"),
        ("pkg.Thing.size", "size"),
        ("pkg.sub.mod.LIMIT", "LIMIT"),  # in a :param: field too
    ]
    assert refs(thing["run"]) == [("pkg.Thing.stop", "stop()"), ("ValueError", "ValueError")]


def test_param_fields_stay_fields(pkg: griffe.Module) -> None:
    docstring = pkg["sub.mod.Thing"].docstring
    params = [s for s in docstring.parse("sphinx") if s.kind.value == "parameters"]
    assert [p.name for p in params[0].value] == ["size"]


def test_a_stale_reference_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files = dict(PACKAGE)
    files["pkg/tools.py"] += '''
        def stale() -> None:
            """:class:`~.nowhere.Gone`, :func:`pkg.tools.missing`, :class:`Elsewhere`."""
        '''
    with caplog.at_level(logging.WARNING):
        pkg = load(tmp_path, files)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # The two that name this package fail `mkdocs build --strict`; an unqualified name
    # may be anyone's (Airflow's, the standard library's): plain code.
    assert warned == [
        "pkg.tools.stale: :class:`~.nowhere.Gone` names nothing in the package",
        "pkg.tools.stale: :func:`pkg.tools.missing` names nothing in the package",
    ]
    assert refs(pkg["tools.stale"]) == [
        ("nowhere.Gone", "Gone"),
        ("pkg.tools.missing", "pkg.tools.missing()"),
        ("Elsewhere", "Elsewhere"),
    ]


def test_a_module_page_lists_what_it_reexports_from_its_package_only(
    pkg: griffe.Module,
) -> None:
    mod = pkg["sub.mod"]
    # helper comes from pkg.tools, outside pkg.sub: a helper mod imports, not its API.
    assert {name for name, m in mod.members.items() if m.is_public} == {"LIMIT", "Thing"}
    # The package re-exports what its own modules define: its API.
    assert {"Thing", "helper"} <= {name for name, m in pkg.members.items() if m.is_public}
