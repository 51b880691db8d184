"""A Griffe extension for the documentation site (``make docs``): a module's page lists
the names it defines and the names it re-exports from its own package (a package's
``__init__`` or a module that gathers its siblings), never the helpers it imports from
another layer, even when its ``__all__`` re-exports them for old imports (the sensor's
``import_callable``, at home in ``client.message``, is documented there).
"""

from __future__ import annotations

from typing import Any

import griffe


def _home_package(module: griffe.Module) -> str:
    """The package whose names ``module`` may present as its own."""
    if module.is_init_module or module.parent is None:
        return module.path
    return module.parent.path


def _modules(obj: griffe.Module) -> list[griffe.Module]:
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias and member.is_module:
            found.extend(_modules(member))  # type: ignore[arg-type]
    return found


class ImportedNames(griffe.Extension):
    """Marks the names a module imports from elsewhere as not public (not rendered)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for module in _modules(pkg):
            home = _home_package(module) + "."
            for member in module.members.values():
                if not member.is_alias:
                    continue
                try:
                    target = member.final_target.path  # type: ignore[union-attr]
                except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                    target = member.target_path  # type: ignore[union-attr]
                if not target.startswith(home):
                    member.public = False  # type: ignore[union-attr]
