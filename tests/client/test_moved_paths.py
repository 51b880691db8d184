"""The module paths of earlier releases still import, warning with the new path
(client/moved.py), and every name of the client's ``__all__`` imports from the package."""

from __future__ import annotations

import importlib
import sys

import pytest

import airflow_provider_nsq.client as client
from airflow_provider_nsq.client.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_gives_the_module_at_its_new_one_and_says_where(old: str) -> None:
    old_name = f"airflow_provider_nsq.client.{old}"
    new_name = f"airflow_provider_nsq.client.{MOVED[old]}"
    sys.modules.pop(old_name, None)
    with pytest.warns(DeprecationWarning, match=f"{old_name} moved to {new_name}"):
        module = importlib.import_module(old_name)
    assert module is importlib.import_module(new_name)


def test_the_documented_old_settings_path_still_has_its_names() -> None:
    sys.modules.pop("airflow_provider_nsq.client.setting_values", None)
    with pytest.warns(DeprecationWarning):
        from airflow_provider_nsq.client.setting_values import parse_bool
    assert parse_bool("true") is True


def test_every_public_name_imports_from_the_client_package() -> None:
    for name in client.__all__:
        assert getattr(client, name) is not None, name


def test_a_path_that_never_existed_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("airflow_provider_nsq.client.no_such_module")
