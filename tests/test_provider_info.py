"""What Airflow itself sees of the provider: ProvidersManager, the ``airflow providers``
CLI and the connection form the UI shows (from provider info on Airflow >= 3.2, from the
hook's legacy methods before)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from airflow_provider_nsq.client.settings.address import DEFAULT_NSQD_TCP_PORT
from airflow_provider_nsq.provider_info import CONN_FIELDS, provider_info
from tests.support.airflow_runs import airflow_cli_json
from tests.support.marks import AIRFLOW_VERSION, needs_airflow
from tests.support.project_metadata import project_urls

HOOK = "airflow_provider_nsq.hooks.nsq.NSQHook"


#: What the API server sends the UI for the connection form (/ui/connections/hook_meta),
#: computed in a fresh process as a starting API server does: before 3.2 the answer
#: depends on what initialised ProvidersManager first in the process.
_HOOK_META = """
import json
from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
(meta,) = (m for m in HookMetaService.hook_meta_data() if m.connection_type == "nsq")
print("HOOK_META " + meta.model_dump_json())
"""


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


def test_the_providers_page_shows_the_description_and_links_the_documentation(
    providers_manager,
):
    """What ``/api/v2/providers`` and ``airflow providers list`` (the UI's Providers page)
    show: the description with reST's characters (`_<>) removed, which must remove
    nothing; the documentation link, from the distribution's ``Documentation`` project
    URL (pyproject.toml)."""
    info = providers_manager.providers["airflow-provider-nsq"]
    written = provider_info()["description"]
    assert re.sub("[`_<>]", "", written) == written
    if "documentation-url" not in info.data:
        pytest.skip(f"Airflow {AIRFLOW_VERSION} shows no documentation link for providers")
    urls = project_urls()
    assert info.data["documentation-url"] == urls["Documentation"]
    assert urls["Documentation"].startswith("https://")


def _task_side_hooks():
    """What a task resolves a conn_type with: the task SDK's own manager from Airflow 3.2
    on, ProvidersManager before."""
    try:
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime
    except ImportError:  # Airflow < 3.2
        from airflow.providers_manager import ProvidersManager

        return ProvidersManager().hooks
    return ProvidersManagerTaskRuntime().hooks


def test_nsq_connection_type_maps_to_the_hook():
    hook_info = _task_side_hooks()["nsq"]
    assert hook_info is not None
    assert hook_info.hook_class_name == HOOK
    assert hook_info.connection_id_attribute_name == "nsq_conn_id"
    assert hook_info.hook_name == "NSQ"


@needs_airflow("3.2", "the connection form from provider info (ui-field-behaviour)")
def test_connection_form_behaviour(providers_manager):
    behaviour = providers_manager.field_behaviours["nsq"]
    assert set(behaviour["hidden_fields"]) == {"login", "schema"}
    assert behaviour["relabeling"]["password"] == "AUTH secret"
    assert behaviour["placeholders"]["port"] == str(DEFAULT_NSQD_TCP_PORT)


def test_the_ui_shows_the_nsq_connection_form(airflow_home):
    if AIRFLOW_VERSION.release < (3, 1):
        # 3.1 stands in for a missing wtforms itself; 3.0 drops the form without it.
        pytest.importorskip("wtforms", reason="Airflow 3.0 builds connection forms with wtforms")
    done = subprocess.run(
        [sys.executable, "-c", _HOOK_META],
        env={**os.environ, "AIRFLOW_HOME": airflow_home},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = (x for x in done.stdout.splitlines() if x.startswith("HOOK_META "))
    meta = json.loads(line.removeprefix("HOOK_META "))
    assert meta["hook_class_name"] == HOOK
    standard = meta["standard_fields"]
    assert standard["login"]["hidden"] and standard["url_schema"]["hidden"]
    assert standard["password"]["title"] == "AUTH secret"
    assert standard["port"]["placeholder"] == str(DEFAULT_NSQD_TCP_PORT)
    extras = meta["extra_fields"]
    assert extras, done.stderr[-2000:]
    assert set(extras) == set(CONN_FIELDS)
    assert extras["tls_verify"]["value"] is True
    assert extras["tls"]["schema"]["title"] == "TLS"
    assert extras["compression"]["schema"]["enum"] == ["none", "snappy", "deflate"]
    assert extras["deflate_level"]["schema"]["type"][0] == "integer"


@needs_airflow("3.2", "the connection form from provider info (conn-fields)")
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
    commands = ("list", "hooks", "behaviours")
    with ThreadPoolExecutor(len(commands)) as pool:
        out = dict(
            zip(
                commands,
                pool.map(lambda what: airflow_cli_json(airflow_home, "providers", what), commands),
                strict=True,
            )
        )
    assert any(p["package_name"] == "airflow-provider-nsq" for p in out["list"])
    assert any(h["connection_type"] == "nsq" and h["class"] == HOOK for h in out["hooks"])
    if AIRFLOW_VERSION.release >= (3, 2):  # before, behaviours need wtforms in the CLI too
        assert {"field_behaviours": "nsq"} in out["behaviours"]


@needs_airflow("3.2", "the connection form from provider info (ui-field-behaviour)")
def test_legacy_hook_form_matches_the_provider_info(providers_manager):
    from airflow_provider_nsq.hooks.nsq import NSQHook

    legacy = NSQHook.get_ui_field_behaviour()
    assert legacy["hidden_fields"] == ["login", "schema"]
    assert legacy["relabeling"]["password"] == "AUTH secret"
    # Airflow 3.2+ takes the form from provider info and never calls the hook's methods,
    # so defining them (for older Airflow) costs no deprecation warning there.
    assert providers_manager.field_behaviours["nsq"]["relabeling"] == legacy["relabeling"]


def test_the_registered_hook_class_declares_its_form_itself():
    # Airflow < 3.2 builds the form only from methods in the registered class's own
    # __dict__: inherited from a role hook, the UI would show the generic form.
    from airflow_provider_nsq.hooks.nsq import NSQHook

    assert "get_connection_form_widgets" in NSQHook.__dict__
    behaviour = NSQHook.get_ui_field_behaviour()
    assert set(behaviour["hidden_fields"]) == {"login", "schema"}
    assert behaviour["relabeling"]["password"] == "AUTH secret"


def test_airflow_sees_the_notifier_the_plugin_the_config_section_and_the_transfer(
    providers_manager,
):
    providers_manager.initialize_providers_notifications()
    providers_manager.initialize_providers_plugins()
    notifiers = [getattr(n, "notification_class_name", n) for n in providers_manager.notification]
    assert "airflow_provider_nsq.notifications.nsq.NSQNotifier" in notifiers
    plugins = {p.name: p.plugin_class for p in providers_manager.plugins}
    assert plugins["nsq_event_producer"] == (
        "airflow_provider_nsq.plugins.nsq_event_producer.NSQEventProducerPlugin"
    )
    sections = dict(providers_manager.provider_configs)["airflow-provider-nsq"]
    assert set(sections["nsq_event_producer"]["options"]) >= {
        "dag_run_events", "task_instance_events", "topic", "nsq_conn_id", "source",
        "dag_ids", "task_ids", "publish_timeout", "max_queued_events",
    }  # fmt: skip
    info = providers_manager.providers["airflow-provider-nsq"].data
    (transfer,) = info["transfers"]
    assert transfer["python-module"] == "airflow_provider_nsq.transfers.nsq_to_object_storage"
    modules = info["operators"][0]["python-modules"]
    assert "airflow_provider_nsq.operators.nsq_admin" in modules


def test_airflow_config_list_shows_the_event_producer_section(airflow_home):
    def config_list(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                str(Path(sys.executable).with_name("airflow")),
                *("config", "list", "--section", "nsq_event_producer", *flags),
            ],
            env={**os.environ, "AIRFLOW_HOME": airflow_home},
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = config_list("--show-values")
    if done.returncode == 2 and "--show-values" in done.stderr:
        done = config_list()  # Airflow < 3.1 shows the values without being asked
    assert done.returncode == 0, done.stderr[-2000:]
    for line in ("[nsq_event_producer]", "dag_run_events = False", "topic = airflow.events"):
        assert line in done.stdout, done.stdout
