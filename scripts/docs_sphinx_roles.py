"""A Griffe extension for the documentation site (``make docs``): the docstrings' Sphinx
cross-reference roles (``:class:`~x.Y```, ``:meth:`.foo```, ``:mod:`..steps``` ...) become
links to the API reference, or plain code where their target is not on the site.

The package's docstrings are written in Airflow's reST style, and mkdocstrings renders
their text as Markdown: without this, every role shows as raw text. No maintained Griffe
or mkdocstrings extension reads Sphinx roles (mkdocstrings' answer is to rewrite the
docstrings into its own ``[title][path]`` syntax, or to pre-process them in an extension:
this is that extension).

Each role is resolved here, against the package Griffe loaded, as Sphinx resolves it:

- ``~`` shows only the last name; ``title <target>`` shows ``title``; ``:func:`` and
  ``:meth:`` get ``()`` (Sphinx's ``add_function_parentheses``);
- a name is looked up from the object the docstring belongs to outwards (its class, its
  module, the packages above), then as a full path: ``:meth:`close``` in a method is its
  class's ``close``, ``:class:`NSQHook``` in a module that imports it is the hook;
- leading dots are relative to the docstring's module, as in a relative import
  (``:mod:`.steps``` is a sibling module, ``:class:`~..client.X``` one package up);
  failing that, a leading dot means "the one object whose path ends so" (Sphinx's rule).

A resolved target links to where a reader finds it: its public import path (a package's
``__all__``, e.g. ``airflow_provider_nsq.client.NSQConsumer``) when it has one, else its
own module's page. The link is an optional cross-reference (``<autoref ... optional>``):
mkdocs-autorefs turns it into a link when that object is rendered on the site and into
plain code when it is not (an Airflow or standard-library name, a module the reference
leaves out). A role naming this package that resolves to nothing is a stale docstring:
it is logged as a warning, which ``mkdocs build --strict`` turns into a failure.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator
from typing import Any

import griffe

#: Sphinx's Python-domain roles, with or without the ``py:`` domain.
ROLE = re.compile(
    r":(?:py:)?(?P<role>class|meth|func|mod|attr|exc|data|obj|const):`(?P<content>[^`]+)`"
)
_EXPLICIT_TITLE = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)
_CALLABLE_ROLES = {"func", "meth"}


def _all_objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    """``obj`` and every object defined under it (not the names it imports)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _all_objects(member)  # type: ignore[arg-type]


def _final(obj: griffe.Object | griffe.Alias) -> griffe.Object | griffe.Alias:
    """What an alias points at, as far as it can be followed (outside the package it
    cannot: Airflow's and the standard library's modules are not loaded)."""
    if not obj.is_alias:
        return obj
    try:
        return obj.final_target  # type: ignore[union-attr]
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return obj


def _module_of(obj: griffe.Object) -> griffe.Module:
    return obj if obj.is_module else obj.module  # type: ignore[return-value]


def _package_of(module: griffe.Module) -> griffe.Object:
    """The package a relative import in ``module`` starts from."""
    if module.is_init_module or module.parent is None:
        return module
    return module.parent


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring's Sphinx roles once the whole package is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self.pkg = pkg
        self.collection = loader.modules_collection
        objects = list(_all_objects(pkg))
        self.public_path = self._public_paths(objects)
        #: Every path in the package (objects and the names modules import), for
        #: Sphinx's "ends with" lookup of a leading dot.
        self.paths: dict[str, griffe.Object | griffe.Alias] = {}
        for obj in objects:
            self.paths[obj.path] = obj
            for member in obj.members.values():
                self.paths.setdefault(member.path, member)
        for obj in objects:
            if obj.docstring is not None:
                obj.docstring.value = ROLE.sub(
                    lambda m, o=obj: self._render(m, o), obj.docstring.value
                )

    def _public_paths(self, objects: list[griffe.Object]) -> dict[str, str]:
        """Each object's shortest public import path: a package's ``__all__`` naming it
        (``client.NSQConsumer`` rather than ``client.consumer.blocking.NSQConsumer``)."""
        best: dict[str, str] = {}
        for module in (obj for obj in objects if obj.is_module):
            if any(part.startswith("_") for part in module.path.split(".")[1:]):
                continue
            for name in module.exports or ():
                member = module.members.get(name)
                if member is None or not member.is_alias or not member.is_public:
                    continue
                target = _final(member)
                if target is member:
                    continue
                path = member.path
                known = best.get(target.path, target.path)
                if path.count(".") < known.count("."):
                    best[target.path] = path
        return best

    def _render(self, match: re.Match[str], obj: griffe.Object) -> str:
        role, content = match["role"], match["content"].strip()
        explicit = _EXPLICIT_TITLE.match(content)
        if explicit:
            title, target = explicit["title"], explicit["target"].strip()
        else:
            target = content
            title = content.lstrip("~").lstrip(".")
            if content.startswith("~"):
                title = title.rsplit(".", 1)[-1]
        target = target.lstrip("~")
        if target.endswith("()"):
            target = target[:-2]
        if role in _CALLABLE_ROLES and not explicit and not title.endswith(")"):
            title += "()"
        found = self._resolve(target, role, obj)
        if found is None:
            if target.startswith(".") or target.split(".")[0] == self.pkg.name:
                # Griffe's logger: mkdocstrings hands it to MkDocs, so --strict fails.
                griffe.logger.warning("%s: %s names nothing in the package", obj.path, match[0])
            identifier = target.lstrip(".")
        elif found.is_alias:  # a name from outside the package: Airflow, the standard library
            identifier = found.target_path  # type: ignore[union-attr]
        else:
            identifier = self._link_path(found)
        code = f"<code>{html.escape(title)}</code>"
        return f'<autoref identifier="{html.escape(identifier)}" optional>{code}</autoref>'

    def _link_path(self, obj: griffe.Object) -> str:
        """Where ``obj`` is rendered for a reader: under its public import path when it,
        or the class holding it, has one (``client.NSQConsumer.consume``)."""
        names: list[str] = []
        current: griffe.Object | None = obj
        while current is not None:
            if current.path in self.public_path:
                return ".".join([self.public_path[current.path], *reversed(names)])
            names.append(current.name)
            current = current.parent
        return obj.path

    def _resolve(
        self, target: str, role: str, obj: griffe.Object
    ) -> griffe.Object | griffe.Alias | None:
        """The object ``target`` names in ``obj``'s docstring, or None."""
        dots = len(target) - len(target.lstrip("."))
        name = target[dots:]
        if not name:
            return None
        lookups: list[Callable[[], griffe.Object | griffe.Alias | None]] = []
        if dots and role != "mod":  # Sphinx's ".name": the current class or module first
            lookups.append(lambda: self._in_scope(name, obj))
        if dots:
            lookups.append(lambda: self._relative(dots, name, obj))
        else:
            lookups += [lambda: self._in_scope(name, obj), lambda: self._absolute(name)]
        # Last, Sphinx's rule for a leading dot, and beyond Sphinx (which leaves them
        # unlinked) for a name the docstring's module does not import
        # (``:class:`NSQTimeoutError```): the one object nearest it whose path ends so.
        lookups.append(lambda: self._ending_with(name, obj))
        return next((found for lookup in lookups if (found := lookup()) is not None), None)

    def _relative(
        self, dots: int, dotted: str, obj: griffe.Object
    ) -> griffe.Object | griffe.Alias | None:
        """``dotted`` as a relative import with ``dots`` dots in ``obj``'s module."""
        base: griffe.Object | None = _package_of(_module_of(obj))
        for _ in range(dots - 1):
            base = base.parent if base is not None else None
        return None if base is None else self._member(base, dotted)

    def _member(self, base: griffe.Object, dotted: str) -> griffe.Object | griffe.Alias | None:
        current: griffe.Object | griffe.Alias = base
        for part in dotted.split("."):
            current = _final(current)
            if current.is_alias:
                return None
            try:  # a class's members include what it inherits from the package's classes
                members = current.all_members if current.is_class else current.members
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                members = current.members
            if part not in members:
                return None
            current = members[part]
        return _final(current)

    def _in_scope(self, dotted: str, obj: griffe.Object) -> griffe.Object | griffe.Alias | None:
        scope: griffe.Object | None = obj
        while scope is not None:
            found = self._member(scope, dotted)
            if found is not None:
                return found
            scope = scope.parent
        return None

    def _absolute(self, dotted: str) -> griffe.Object | griffe.Alias | None:
        try:
            return _final(self.collection[dotted])
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None

    def _ending_with(self, dotted: str, obj: griffe.Object) -> griffe.Object | griffe.Alias | None:
        """Sphinx's fallback for a leading dot: the object whose path ends with
        ``dotted``; of several, the one nearest ``obj``, if that one is alone."""
        suffix = "." + dotted
        found = {
            _final(candidate).path: _final(candidate)
            for path, candidate in self.paths.items()
            if path.endswith(suffix)
        }
        if not found:
            return None
        here = obj.path.split(".")

        def nearness(path: str) -> int:
            shared = 0
            for mine, theirs in zip(here, path.split("."), strict=False):
                if mine != theirs:
                    break
                shared += 1
            return shared

        ranked = sorted(found, key=nearness, reverse=True)
        if len(ranked) > 1 and nearness(ranked[0]) == nearness(ranked[1]):
            return None
        return found[ranked[0]]
