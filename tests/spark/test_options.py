"""Option parsing of the ``nsq`` data source (no Spark session needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_provider_nsq.client import ClientConfig
from airflow_provider_nsq.spark import NSQOptionError, NSQWriteOptions, options_from_client_config
from airflow_provider_nsq.spark.option_sets import parse_nsqd_address
from tests.spark.pyspark_features import needs_airflow

BASE = {"nsqd": "127.0.0.1:4150", "topic": "events"}


def test_defaults() -> None:
    opts = NSQWriteOptions.parse(BASE)
    assert (opts.host, opts.port, opts.topic) == ("127.0.0.1", 4150, "events")
    assert (opts.format, opts.body_column, opts.batch_size) == ("raw", None, 1000)
    config = opts.client_config()
    assert config.compression == "none" and not config.tls


def test_every_client_option_reaches_the_client_config() -> None:
    opts = NSQWriteOptions.parse(
        {
            **BASE,
            "TLS": "true",  # Spark lower-cases keys; so do we
            "tls_verify": "False",
            "tls_ca_file": "/etc/ca.pem",
            "tls_cert_file": "/etc/c.pem",
            "tls_key_file": "/etc/k.pem",
            "auth_secret": "s3cret",
            "compression": "Deflate",
            "deflate_level": "3",
            "connect_timeout": "2.5",
            "read_timeout": "9",
            "client_id": "spark-job",
            "max_msg_size": "2048",
            "max_body_size": "8192",
            "heartbeat_interval_ms": "5000",
        }
    )
    config = opts.client_config()
    assert config.tls and not config.tls_verify
    assert (config.tls_ca_file, config.tls_cert_file, config.tls_key_file) == (
        "/etc/ca.pem",
        "/etc/c.pem",
        "/etc/k.pem",
    )
    assert config.auth_secret == "s3cret"
    assert (config.compression, config.deflate_level) == ("deflate", 3)
    assert (config.connect_timeout, config.read_timeout) == (2.5, 9.0)
    assert config.client_id == "spark-job"
    assert (config.max_msg_size, config.max_body_size) == (2048, 8192)
    assert config.heartbeat_interval_ms == 5000
    assert "s3cret" not in repr(opts)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("nsqd.local:4150", ("nsqd.local", 4150)),
        ("10.0.0.1", ("10.0.0.1", 4150)),
        ("[::1]:4250", ("::1", 4250)),
        (" host:1 ", ("host", 1)),
    ],
)
def test_nsqd_address(raw: str, expected: tuple[str, int]) -> None:
    assert parse_nsqd_address(raw) == expected


@pytest.mark.parametrize(
    ("options", "named", "says"),
    [
        ({"topic": None}, "topic", "required"),
        ({"nsqd": None}, "nsqd", "required"),
        ({"nsqd": ""}, "nsqd", "host:port"),
        ({"nsqd": "host:0"}, "nsqd", "1-65535"),
        ({"nsqd": "[::1"}, "nsqd", "[ipv6]:port"),
        ({"topic": "x" * 65}, "topic", "1 to 64"),
        ({"batch_size": "ten"}, "batch_size", "whole number"),
        ({"batch_size": "0"}, "batch_size", ">= 1"),
        ({"tls_verify": "sometimes"}, "tls_verify", "true or false"),
        ({"compression": "zstd"}, "compression", "none, snappy, deflate"),
        ({"deflate_level": "0"}, "deflate_level", "1-9"),
        ({"read_timeout": "nan"}, "read_timeout", "seconds > 0"),
        ({"tls_key_file": "/k.pem"}, "tls_key_file", "together"),
        ({"max_body_size": "-5"}, "max_body_size", ">= 1"),
        ({"client_id": "  "}, "client_id", "empty"),
        ({"path": "/data"}, "path", "takes no path"),
        ({"lookupd_http_addresses": "h:4161"}, "lookupd_http_addresses", "not through nsqlookupd"),
        ({"format": "json", "body_column": "v"}, "body_column", "whole row"),
        ({"batch-size": "1"}, "batch-size", "unknown; known: auth_secret"),
    ],
)
def test_bad_option_names_itself(options: dict[str, str | None], named: str, says: str) -> None:
    merged = {k: v for k, v in {**BASE, **options}.items() if v is not None}
    with pytest.raises(NSQOptionError) as err:
        NSQWriteOptions.parse(merged)
    assert err.value.option == named
    assert str(err.value).startswith(f"nsq data source option {named!r}: ")
    assert says in str(err.value)


def test_options_from_client_config_round_trip() -> None:
    config = ClientConfig(
        host="nsqd.internal",
        port=4250,
        tls=True,
        tls_ca_file="/ca.pem",
        auth_secret="pw",
        compression="snappy",
        max_body_size=10_000_000,
        connect_timeout=3.0,
    )
    options = options_from_client_config(config)
    assert options == {
        "nsqd": "nsqd.internal:4250",
        "tls": "true",
        "tls_ca_file": "/ca.pem",
        "auth_secret": "pw",
        "compression": "snappy",
        "max_body_size": "10000000",
        "connect_timeout": "3.0",
    }
    rebuilt = NSQWriteOptions.parse({**options, "topic": "t"}).client_config()
    assert rebuilt == config


def test_options_from_client_config_brackets_ipv6() -> None:
    options = options_from_client_config(ClientConfig(host="::1", port=4150))
    assert options == {"nsqd": "[::1]:4150"}
    assert NSQWriteOptions.parse({**options, "topic": "t"}).host == "::1"


def test_spark_package_does_not_import_airflow() -> None:
    # Executors have the NSQ client, not Airflow. Every name this PySpark can import.
    code = (
        "import sys, airflow_provider_nsq.spark as s\n"
        "for name in s.__all__:\n"
        "    try:\n"
        "        getattr(s, name)\n"
        "    except ImportError as exc:\n"
        "        assert 'needs PySpark' in str(exc), exc\n"
        "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "assert not bad, bad\n"
        "assert 'pyspark' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@needs_airflow
def test_options_from_an_airflow_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_nsq.hooks.nsq import NSQHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_SPARK_TEST",
        "nsq://:s3cret@nsqd.example.com:4250?tls=true&compression=snappy&max_body_size=9000000",
    )
    config = NSQHook("nsq_spark_test").get_client_config()
    options = {**options_from_client_config(config), "topic": "results", "batch_size": "50"}
    assert options == {
        "nsqd": "nsqd.example.com:4250",
        "tls": "true",
        "auth_secret": "s3cret",
        "compression": "snappy",
        "max_body_size": "9000000",
        "topic": "results",
        "batch_size": "50",
    }
    parsed = NSQWriteOptions.parse(options)
    assert parsed.client_config().max_body_size == 9_000_000


def test_nsqd_tcp_addresses_list_more_nsqds_after_nsqd() -> None:
    options = NSQWriteOptions.parse({**BASE, "nsqd_tcp_addresses": "a:1, 127.0.0.1:4150 ,b"})
    assert options.nsqds == ["127.0.0.1:4150", "a:1", "b:4150"]
    assert options.nsqds_for(0) == ["127.0.0.1:4150", "a:1", "b:4150"]
    assert options.nsqds_for(4) == ["a:1", "b:4150", "127.0.0.1:4150"]
    alone = NSQWriteOptions.parse({"topic": "t", "nsqd_tcp_addresses": "a:1,b:2"})
    assert alone.nsqds == ["a:1", "b:2"]
    with pytest.raises(NSQOptionError, match="'nsqd_tcp_addresses'"):
        NSQWriteOptions.parse({**BASE, "nsqd_tcp_addresses": "a:http"})
