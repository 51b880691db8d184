"""One parser of addresses, one at a time or as a list, and one stored form of an nsqd's
TCP address, so the same nsqd written two ways is one nsqd everywhere."""

from __future__ import annotations

import pytest

from airflow_provider_nsq.client.settings.address import (
    nsqd_tcp_address,
    nsqd_tcp_addresses,
    parse_addresses,
)
from airflow_provider_nsq.protocol.errors import NSQValueError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a:1, b:2,,a:1", ["a:1", "b:2"]),
        (["a:1", " b:2 ", ""], ["a:1", "b:2"]),
        (("http://lookupd:4161/x",), ["http://lookupd:4161/x"]),  # kept as written
        (" , ", []),
        ("", []),
    ],
)
def test_a_list_is_a_comma_separated_string_or_a_list(raw, expected) -> None:
    assert parse_addresses(raw, "x") == expected


def test_list_errors_name_the_list() -> None:
    with pytest.raises(NSQValueError, match=r"^lookupd_http_addresses must be a comma-separated"):
        parse_addresses(4161, "lookupd_http_addresses")
    with pytest.raises(NSQValueError, match=r"^nsqd_tcp_addresses entries must be strings, got 1"):
        parse_addresses(["a:1", 1], "nsqd_tcp_addresses")


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("nsqd", "nsqd:4150"),
        (" nsqd:4150 ", "nsqd:4150"),
        ("10.0.0.1:5150", "10.0.0.1:5150"),
        ("::1", "[::1]:4150"),
        ("[::1]:4250", "[::1]:4250"),
    ],
)
def test_an_nsqd_tcp_address_has_one_stored_form(raw, stored) -> None:
    assert nsqd_tcp_address(raw) == stored


def test_the_same_nsqd_written_two_ways_is_listed_once_in_order() -> None:
    assert nsqd_tcp_addresses("b, a:4150, b:4150 ,a, [::1]") == ["b:4150", "a:4150", "[::1]:4150"]
    assert nsqd_tcp_addresses(["a", "b:1"]) == ["a:4150", "b:1"]
    assert nsqd_tcp_addresses("") == []


def test_a_bad_entry_is_named() -> None:
    with pytest.raises(NSQValueError, match=r"^nsqd_tcp_addresses entry 'b:x': the port"):
        nsqd_tcp_addresses("a, b:x")
    with pytest.raises(NSQValueError, match=r"^nsqd TCP address 'h:0': the port must be 1-65535"):
        nsqd_tcp_address("h:0")
