"""The provider's metadata as pyproject.toml writes it and as the installed distribution
carries it."""

from __future__ import annotations

import tomllib
from importlib.metadata import distribution

import pytest

from tests.support.airflow_runs import ROOT


def project_urls() -> dict[str, str]:
    """pyproject.toml's ``[project.urls]``, as the installed distribution carries them
    (``Project-URL``: Airflow reads the documentation link there); skips while the
    installed metadata predates them (an editable install from before a change:
    ``make install`` refreshes it)."""
    written = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    urls: dict[str, str] = written["project"]["urls"]
    fields = distribution("airflow-provider-nsq").metadata.get_all("Project-URL") or []
    installed = dict(tuple(part.strip() for part in field.split(",", 1)) for field in fields)
    if installed != urls:
        pytest.skip(
            "the installed metadata predates pyproject.toml's [project.urls] "
            "(`make install` refreshes it)"
        )
    return urls
