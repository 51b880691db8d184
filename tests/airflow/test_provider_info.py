"""What Airflow itself sees of the provider: ProvidersManager and the ``airflow
providers`` CLI (the connection form in the UI is built from the same data)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_nsq.client.address import DEFAULT_NSQD_TCP_PORT
from airflow_provider_nsq.provider_info import CONN_FIELDS

HOOK = "airflow_provider_nsq.hooks.nsq.NSQHook"


@pytest.fixture(scope="module")
def providers_manager():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    manager.initialize_providers_hooks()
    return manager


def test_provider_is_registered(providers_manager):
    info = providers_manager.providers["airflow-provider-nsq"]
    assert info.data["name"] == "NSQ"
    assert info.version


def test_nsq_connection_type_maps_to_the_hook():
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook_info = ProvidersManagerTaskRuntime().hooks["nsq"]
    assert hook_info is not None
    assert hook_info.hook_class_name == HOOK
    assert hook_info.connection_id_attribute_name == "nsq_conn_id"
    assert hook_info.hook_name == "NSQ"


def test_connection_form_behaviour(providers_manager):
    behaviour = providers_manager.field_behaviours["nsq"]
    assert set(behaviour["hidden_fields"]) == {"login", "schema"}
    assert behaviour["relabeling"]["password"] == "AUTH secret"
    assert behaviour["placeholders"]["port"] == str(DEFAULT_NSQD_TCP_PORT)


def test_connection_form_fields(providers_manager):
    widgets = {
        name.removeprefix("extra__nsq__"): widget
        for name, widget in providers_manager.connection_form_widgets.items()
        if name.startswith("extra__nsq__")
    }
    for name in (
        "tls",
        "tls_verify",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
        "compression",
        "deflate_level",
        "heartbeat_interval_ms",
        "msg_timeout_ms",
        "client_id",
        "lookupd_http_addresses",
        "connect_timeout",
    ):
        assert name in widgets, name
    assert set(widgets) == set(CONN_FIELDS)
    assert widgets["tls_verify"].field["value"] is True
    assert widgets["compression"].field["schema"]["enum"] == ["none", "snappy", "deflate"]
    assert widgets["tls"].field["schema"]["title"] == "TLS"
    assert all(widget.hook_class_name == HOOK for widget in widgets.values())
    assert not any(widget.is_sensitive for widget in widgets.values())


def test_airflow_providers_cli_shows_the_provider(airflow_home):
    env = {**os.environ, "AIRFLOW_HOME": airflow_home}
    airflow = str(Path(sys.executable).with_name("airflow"))
    commands = {
        what: subprocess.Popen(
            [airflow, "providers", what, "-o", "json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for what in ("list", "hooks", "behaviours")
    }
    out = {}
    for what, proc in commands.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        out[what] = json.loads(stdout[stdout.index("[") :])

    assert any(p["package_name"] == "airflow-provider-nsq" for p in out["list"])
    assert any(h["connection_type"] == "nsq" and h["class"] == HOOK for h in out["hooks"])
    assert {"field_behaviours": "nsq"} in out["behaviours"]


def test_legacy_hook_form_matches_the_provider_info(providers_manager):
    from airflow_provider_nsq.hooks.nsq import NSQHook

    legacy = NSQHook.get_ui_field_behaviour()
    assert legacy["hidden_fields"] == ["login", "schema"]
    assert legacy["relabeling"]["password"] == "AUTH secret"
    # Airflow 3.2+ takes the form from provider info and never calls the hook's methods,
    # so defining them (for older Airflow) costs no deprecation warning there.
    assert providers_manager.field_behaviours["nsq"]["relabeling"] == legacy["relabeling"]
