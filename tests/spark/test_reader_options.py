"""Option parsing of ``spark.readStream.format("nsq")`` (no Spark session needed)."""

from __future__ import annotations

import pickle

import pytest

from airflow_provider_nsq.spark import NSQOptionError
from airflow_provider_nsq.spark.reader_options import NSQReadOptions

BASE = {"nsqd": "127.0.0.1:4150", "topic": "events", "channel": "spark"}


def test_defaults_bound_each_batch_by_count_and_bytes() -> None:
    opts = NSQReadOptions.parse(BASE)
    assert (opts.topic, opts.channel) == ("events", "spark")
    assert opts.nsqd_tcp_addresses == (("127.0.0.1", 4150),)
    assert opts.lookupd_http_addresses == ()
    assert (opts.max_messages_per_batch, opts.max_bytes_per_batch) == (40_000, 64 * 1024**2)
    assert opts.max_in_flight == 80_000  # room to prefetch one batch while Spark runs one
    # 80,000 in flight from one nsqd at 2,500 per connection (nsqd's --max-rdy-count)
    assert opts.max_connections_per_nsqd == 32
    assert (opts.batch_timeout, opts.min_partitions) == (1.0, 2)
    config = opts.client_config()
    assert (config.host, config.port, config.msg_timeout_ms) == ("127.0.0.1", 4150, None)
    consumer = opts.consumer_options()
    assert consumer["nsqd_tcp_addresses"] == ["127.0.0.1:4150"]
    assert (consumer["lookupd_http_addresses"], consumer["lookupd_poll_interval"]) == ([], 60.0)
    assert consumer["max_connections_per_nsqd"] == 32


def test_every_option_is_read() -> None:
    opts = NSQReadOptions.parse(
        {
            "topic": "events",
            "channel": "spark#ephemeral",
            "NSQD_TCP_ADDRESSES": "a:4150, b:4250,a:4150",  # keys are case-insensitive
            "max_messages_per_batch": "500",
            "max_connections_per_nsqd": "2",
            "max_bytes_per_batch": "65536",
            "max_in_flight": "750",
            "batch_timeout": "0.25",
            "min_partitions": "4",
            "msg_timeout_ms": "120000",
            "tls": "true",
            "tls_ca_file": "/ca.pem",
            "auth_secret": "s3cret",
            "compression": "snappy",
            "heartbeat_interval_ms": "5000",
            "client_id": "spark-reader",
        }
    )
    assert opts.channel == "spark#ephemeral"
    assert opts.nsqd_tcp_addresses == (("a", 4150), ("b", 4250))  # duplicates dropped
    assert (opts.max_messages_per_batch, opts.max_bytes_per_batch) == (500, 65536)
    assert (opts.max_in_flight, opts.batch_timeout, opts.min_partitions) == (750, 0.25, 4)
    consumer = opts.consumer_options()
    assert consumer["nsqd_tcp_addresses"] == ["a:4150", "b:4250"]
    assert consumer["max_connections_per_nsqd"] == 2
    config = consumer["config"]  # every connection's settings (the consumer sets the address)
    assert config.tls and config.tls_ca_file == "/ca.pem" and config.auth_secret == "s3cret"
    assert (config.compression, config.heartbeat_interval_ms) == ("snappy", 5000)
    assert (config.msg_timeout_ms, config.client_id) == (120_000, "spark-reader")
    assert "s3cret" not in repr(opts)
    assert pickle.loads(pickle.dumps(opts)) == opts  # travels to the driver-side process


@pytest.mark.parametrize(
    ("options", "named", "says"),
    [
        ({"topic": None}, "topic", "required"),
        ({"channel": None}, "channel", "required"),
        ({"channel": "bad channel"}, "channel", "channel"),
        ({"topic": "x" * 65}, "topic", "1 to 64"),
        ({"nsqd": None}, "nsqd_tcp_addresses", "required"),
        ({"nsqd": "host:0"}, "nsqd", "1-65535"),
        ({"nsqd": "a:1,b:2"}, "nsqd", "one address"),
        ({"nsqd": None, "nsqd_tcp_addresses": " , "}, "nsqd_tcp_addresses", "comma-separated"),
        ({"nsqd": None, "lookupd_http_addresses": ","}, "lookupd_http_addresses", "comma"),
        ({"lookupd_http_addresses": "h:4161,h:http"}, "lookupd_http_addresses", "port"),
        ({"lookupd_poll_interval": "0"}, "lookupd_poll_interval", "seconds > 0"),
        ({"max_connections_per_nsqd": "0"}, "max_connections_per_nsqd", ">= 1"),
        ({"max_messages_per_batch": "0"}, "max_messages_per_batch", ">= 1"),
        ({"max_bytes_per_batch": "1MB"}, "max_bytes_per_batch", "whole number"),
        ({"max_in_flight": "10"}, "max_in_flight", "below max_messages_per_batch"),
        ({"batch_timeout": "0"}, "batch_timeout", "seconds > 0"),
        ({"min_partitions": "-1"}, "min_partitions", ">= 1"),
        ({"msg_timeout_ms": "500"}, "msg_timeout_ms", ">= 1000"),
        ({"compression": "gzip"}, "compression", "none, snappy, deflate"),
        ({"tls_cert_file": "/c.pem"}, "tls_cert_file", "together"),
        ({"format": "json"}, "format", "writer option"),
        ({"batch_size": "10"}, "batch_size", "max_messages_per_batch"),
        ({"maxOffsetsPerTrigger": "10"}, "maxoffsetspertrigger", "unknown; known: auth_secret"),
    ],
)
def test_bad_option_names_itself(options: dict[str, str | None], named: str, says: str) -> None:
    merged = {k: v for k, v in {**BASE, **options}.items() if v is not None}
    with pytest.raises(NSQOptionError) as err:
        NSQReadOptions.parse(merged)
    assert err.value.option == named
    assert str(err.value).startswith(f"nsq data source option {named!r}: ")
    assert says in str(err.value)


def test_nsqlookupd_finds_the_nsqds() -> None:
    opts = NSQReadOptions.parse(
        {
            "topic": "events",
            "channel": "spark",
            "lookupd_http_addresses": "lookupd-1:4161, http://lookupd-2:4161,lookupd-1:4161",
            "lookupd_poll_interval": "15",
        }
    )
    assert opts.nsqd_tcp_addresses == ()  # none needed: nsqlookupd lists them
    assert opts.lookupd_http_addresses == ("lookupd-1:4161", "http://lookupd-2:4161")
    consumer = opts.consumer_options()
    assert consumer["lookupd_http_addresses"] == ["lookupd-1:4161", "http://lookupd-2:4161"]
    assert (consumer["lookupd_poll_interval"], consumer["nsqd_tcp_addresses"]) == (15.0, [])
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_with_nsqlookupd_the_options_of_a_connection_read_through_it() -> None:
    # options_from_client_config() always names the connection's nsqd (where the writer
    # publishes); with lookupd_http_addresses too, the reader finds the nsqds through
    # nsqlookupd, as the connection's own consumers do.
    opts = NSQReadOptions.parse({**BASE, "lookupd_http_addresses": "lookupd:4161"})
    consumer = opts.consumer_options()
    assert consumer["lookupd_http_addresses"] == ["lookupd:4161"]
    assert consumer["config"].address == "127.0.0.1:4150"
