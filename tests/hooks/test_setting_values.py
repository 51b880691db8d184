"""A setting value means the same in a Connection, a Spark option and a broker flag."""

from __future__ import annotations

import datetime

import pytest

from airflow_provider_nsq.client.settings.values import parse_seconds
from airflow_provider_nsq.hooks.nsq import NSQConnectionConfigError, NSQHook
from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.testing.broker.__main__ import build_parser

spark_options = pytest.importorskip(
    "airflow_provider_nsq.spark.writer_options", reason="needs the spark extra (pyspark)"
)
NSQOptionError = pytest.importorskip("airflow_provider_nsq.spark").NSQOptionError
NSQWriteOptions = spark_options.NSQWriteOptions


def _connection(monkeypatch: pytest.MonkeyPatch, query: str) -> NSQHook:
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_WORDS", f"nsq://nsqd:4150?{query}")
    return NSQHook("nsq_words")


@pytest.mark.parametrize(
    ("word", "value"),
    [("true", True), ("True", True), ("1", True), ("t", True), ("FALSE", False), ("0", False)],
)
def test_the_same_boolean_words_are_accepted_everywhere(monkeypatch, word, value) -> None:
    hook = _connection(monkeypatch, f"tls_verify={word}")
    assert hook.get_client_config().tls_verify is value
    options = NSQWriteOptions.parse({"nsqd": "nsqd:4150", "topic": "t", "tls_verify": word})
    assert options.client_config().tls_verify is value
    assert build_parser().parse_args([f"--snappy={word}"]).snappy is value


@pytest.mark.parametrize("word", ["yes", "no", "on", "maybe"])
def test_the_same_boolean_words_are_refused_everywhere(monkeypatch, capsys, word) -> None:
    with pytest.raises(NSQConnectionConfigError, match="tls_verify"):
        _connection(monkeypatch, f"tls_verify={word}").get_client_config()
    with pytest.raises(NSQOptionError, match="true or false"):
        NSQWriteOptions.parse({"nsqd": "nsqd:4150", "topic": "t", "tls_verify": word})
    with pytest.raises(SystemExit):
        build_parser().parse_args([f"--snappy={word}"])
    assert "true or false" in capsys.readouterr().err


def test_seconds_read_the_same_from_text_numbers_and_timedeltas(monkeypatch) -> None:
    assert parse_seconds("2.5") == parse_seconds(2.5) == 2.5
    assert parse_seconds(datetime.timedelta(milliseconds=250)) == 0.25
    assert (
        _connection(monkeypatch, "connect_timeout=2.5").get_client_config().connect_timeout == 2.5
    )
    options = NSQWriteOptions.parse({"nsqd": "nsqd", "topic": "t", "connect_timeout": "2.5"})
    assert options.client_config().connect_timeout == 2.5
    for bad in ("0", "-1", "nan", "inf", "soon", True):
        with pytest.raises(NSQValueError, match="seconds > 0"):
            parse_seconds(bad)
