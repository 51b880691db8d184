"""``with server:`` for the test servers: :meth:`start` on entry, :meth:`stop` on exit."""

from __future__ import annotations

from typing import TypeVar

_S = TypeVar("_S", bound="StartStop")


class StartStop:
    """A server or proxy for tests that is started, used, then stopped (idempotently)."""

    def start(self: _S) -> _S:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
