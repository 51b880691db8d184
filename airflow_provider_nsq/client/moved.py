"""Module paths of earlier releases that moved when the client was split into rooms
(``settings/``, ``transport/``, ``drivers/``, ``runners/``, ``http/``, ``consumer/``,
``holding/``).

Importing an old path still works: it gives the module at its new path, with a
``DeprecationWarning`` naming that path. The public names are best imported from
``airflow_provider_nsq.client`` itself, whose ``__all__`` does not move.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

_PACKAGE = __name__.rpartition(".")[0]

#: Old module (relative to the client package) -> where it lives now.
MOVED: dict[str, str] = {
    "address": "settings.address",
    "setting_fields": "settings.fields",
    "setting_values": "settings.values",
    "config": "settings.client_config",
    "connection_settings": "settings.connection_settings",
    "blocking_socket": "transport.blocking_socket",
    "tls": "transport.tls",
    "io_errors": "transport.io_errors",
    "receive_buffers": "transport.receive_buffers",
    "driver": "drivers.base",
    "answering": "drivers.answering",
    "blocking": "drivers.blocking_driver",
    "aio": "drivers.asyncio_driver",
    "reply_queue": "drivers.reply_queue",
    "shared_task": "drivers.shared_task",
    "steps": "runners.steps",
    "blocking_runner": "runners.blocking_runner",
    "aio_runner": "runners.asyncio_runner",
    "blocking_connect": "runners.blocking_runner",
    "lookupd": "http.lookupd_api",
    "nsqd_http": "http.nsqd_api",
    "channel_depth": "http.channel_depth",
    "ready": "consumer._rdy_split",
    "window": "consumer._sequences",
    "consumer.aio": "consumer._consumers",
    "consumer.blocking": "consumer._consumers",
    "consume_apply": "holding.apply",
    "function_thread": "holding.function_thread",
    "dead_letters": "holding.dead_letters",
}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new one."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}: import it from there (public names: from "
            f"{_PACKAGE})",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path is loaded already."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths that no file holds any more."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        prefix = _PACKAGE + "."
        if not fullname.startswith(prefix):
            return None
        new = MOVED.get(fullname[len(prefix) :])
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(f"{prefix}{new}"))


_FINDER = _MovedFinder()


def install() -> None:
    """Let the old paths be imported (once per process; after every other finder, so a
    path that exists is always found first)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
