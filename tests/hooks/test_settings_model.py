"""One description of settings: a setting added to ``ClientConfig`` reaches the hook, the
connection form and both Spark option sets with no other edit; and the bounds a
description gives hold wherever the setting is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from airflow_provider_nsq.client import ClientConfig, ConnectionSettings
from airflow_provider_nsq.hooks.nsq import NSQConnectionConfigError, NSQHook
from airflow_provider_nsq.protocol.errors import NSQSettingError
from airflow_provider_nsq.provider_info import CONN_FIELDS, extra_settings

spark = pytest.importorskip("airflow_provider_nsq.spark", reason="needs the spark extra")
from airflow_provider_nsq.spark.reader_options import READ_OPTIONS  # noqa: E402
from airflow_provider_nsq.spark.writer_options import WRITE_OPTIONS  # noqa: E402

#: Run in a fresh interpreter: the only edit is a ClientConfig with one more described
#: field, put in place before anything reads the descriptions.
_NEW_SETTING = textwrap.dedent(
    """
    import dataclasses, json
    from airflow_provider_nsq.client.settings import client_config as config_module
    from airflow_provider_nsq.client.settings.fields import setting

    @dataclasses.dataclass(frozen=True)
    class ClientConfig(config_module.ClientConfig):
        linger_ms: int = dataclasses.field(
            default=0,
            metadata=setting(
                "Linger (ms)", "How long to wait before sending.", kind="integer", minimum=0
            ),
        )

    config_module.ClientConfig = ClientConfig

    from airflow_provider_nsq.hooks.nsq import NSQHook
    from airflow_provider_nsq.provider_info import CONN_FIELDS
    from airflow_provider_nsq.spark import (
        KNOWN_OPTIONS, KNOWN_READ_OPTIONS, NSQOptionError, NSQReadOptions, NSQWriteOptions,
        options_from_settings,
    )

    hook = NSQHook("nsq_linger")
    write = NSQWriteOptions.parse({"nsqd": "nsqd:4150", "topic": "t", "linger_ms": "7"})
    read = NSQReadOptions.parse({"nsqd": "nsqd:4150", "topic": "t", "channel": "c",
                                 "linger_ms": "8"})
    try:
        NSQWriteOptions.parse({"nsqd": "nsqd:4150", "topic": "t", "linger_ms": "-1"})
    except NSQOptionError as exc:
        refused = str(exc)
    try:  # the form of Airflow < 3.2, where wtforms is installed
        legacy_form = sorted(NSQHook.get_connection_form_widgets())
    except ImportError:
        legacy_form = None
    print(json.dumps({
        "form": CONN_FIELDS["linger_ms"],
        "legacy_form": legacy_form,
        "hook": hook.get_client_config().linger_ms,
        "write_known": "linger_ms" in KNOWN_OPTIONS,
        "read_known": "linger_ms" in KNOWN_READ_OPTIONS,
        "write": write.client_config().linger_ms,
        "read": read.client_config().linger_ms,
        "refused": refused,
        "options": options_from_settings(hook.get_settings()),
    }))
    """
)


def test_a_setting_added_to_client_config_reaches_the_hook_the_form_and_spark() -> None:
    env = {**os.environ, "AIRFLOW_CONN_NSQ_LINGER": "nsq://nsqd:4150?linger_ms=5"}
    done = subprocess.run(
        [sys.executable, "-c", _NEW_SETTING], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["form"] == {
        "label": "Linger (ms)",
        "description": "How long to wait before sending.",
        "schema": {"type": ["integer", "null"], "minimum": 0},
    }
    assert seen["legacy_form"] is None or "linger_ms" in seen["legacy_form"]
    assert seen["hook"] == 5
    assert seen["write_known"] and seen["read_known"]
    assert (seen["write"], seen["read"]) == (7, 8)
    assert seen["refused"] == "nsq data source option 'linger_ms': must be >= 0, got -1"
    assert seen["options"] == {"nsqd": "nsqd:4150", "linger_ms": "5"}


def test_the_read_timeout_bound_belongs_to_the_config(monkeypatch) -> None:
    with pytest.raises(NSQSettingError, match=r"read_timeout: must be at most 3600 seconds"):
        ClientConfig(read_timeout=3601)
    with pytest.raises(spark.NSQOptionError, match=r"read_timeout.*at most 3600"):
        spark.NSQWriteOptions.parse({"nsqd": "n", "topic": "t", "read_timeout": "3601"})
    with pytest.raises(spark.NSQOptionError, match=r"read_timeout.*at most 3600"):
        spark.NSQReadOptions.parse(
            {"nsqd": "n", "topic": "t", "channel": "c", "read_timeout": "3601"}
        )
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_SLOW", "nsq://nsqd:4150?read_timeout=3601")
    with pytest.raises(NSQConnectionConfigError, match="'read_timeout': must be at most 3600"):
        NSQHook("nsq_slow").get_client_config()


def test_a_connections_failover_list_reaches_the_spark_writer(monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_FAILOVER",
        "nsq://nsqd-1:4150?nsqd_tcp_addresses=nsqd-2:4150,nsqd-3&http_port=4151"
        "&lookupd_http_addresses=lookupd:4161&compression=snappy",
    )
    settings = NSQHook("nsq_failover").get_settings()
    options = spark.options_from_settings(settings)
    assert options == {
        "nsqd": "nsqd-1:4150",
        "nsqd_tcp_addresses": "nsqd-2:4150,nsqd-3:4150",
        "compression": "snappy",
    }
    writer = spark.NSQWriteOptions.parse({**options, "topic": "results"})
    assert writer.nsqds == ["nsqd-1:4150", "nsqd-2:4150", "nsqd-3:4150"]
    reading = spark.options_from_settings(settings, "read")
    assert reading["lookupd_http_addresses"] == "lookupd:4161"
    reader = spark.NSQReadOptions.parse({**reading, "topic": "events", "channel": "c"})
    assert reader.lookupd_http_addresses == ("lookupd:4161",)


@pytest.mark.parametrize("option", ["http_port", "https_port"])
def test_spark_says_why_it_takes_no_http_port(option) -> None:
    for parse, base in (
        (spark.NSQWriteOptions.parse, {"nsqd": "n", "topic": "t"}),
        (spark.NSQReadOptions.parse, {"nsqd": "n", "topic": "t", "channel": "c"}),
    ):
        with pytest.raises(spark.NSQOptionError, match=r"not supported here: .*TCP protocol"):
            parse({**base, option: "4151"})


def test_every_extra_is_a_described_setting() -> None:
    described = ConnectionSettings.described()
    # Every setting users may write, but the AUTH secret (the connection's password).
    assert set(CONN_FIELDS) == {n for n, s in described.items() if not s.code_only} - {
        "auth_secret"
    }
    assert {"host", "port", "auth_secret", "hostname"}.isdisjoint(CONN_FIELDS)
    assert list(CONN_FIELDS) == list(extra_settings())  # the parser's source, in order


@pytest.mark.parametrize("name", ["write", "read"])
def test_each_spark_refusal_says_why_through_the_one_mechanism(name) -> None:
    parse, base = {
        "write": (spark.NSQWriteOptions.parse, {"nsqd": "n", "topic": "t"}),
        "read": (spark.NSQReadOptions.parse, {"nsqd": "n", "topic": "t", "channel": "c"}),
    }[name]
    option_set = WRITE_OPTIONS if name == "write" else READ_OPTIONS
    refused = option_set.source.refused
    # The connection settings a set refuses, the path, and (the reader) the writer's own.
    assert {"http_port", "https_port", "max_req_timeout_ms", "path"} <= set(refused)
    assert ("lookupd_http_addresses" in refused) == (name == "write")
    assert ("format" in refused) == (name == "read")
    for option, why in refused.items():
        with pytest.raises(spark.NSQOptionError) as caught:
            parse({**base, option: "1"})
        assert str(caught.value) == f"nsq data source option {option!r}: not supported here: {why}"
    # Taken: every connection setting the set does not refuse (the Airflow-only link aside).
    connection = {n for n, s in ConnectionSettings.described().items() if not s.code_only}
    assert connection - set(refused) - {"nsqadmin_url"} <= set(option_set.known)
    assert "nsqadmin_url" not in option_set.known
