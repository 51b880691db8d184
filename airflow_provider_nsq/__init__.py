"""Apache Airflow provider for NSQ."""

from __future__ import annotations

from typing import Any

from .version import __version__

__all__ = ["__version__", "get_provider_info"]


def get_provider_info() -> dict[str, Any]:
    """Provider metadata read by Airflow's ProvidersManager (entry point)."""
    from .provider_info import provider_info

    return provider_info()
