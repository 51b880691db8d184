"""Hostile client input against the server (issue 11, item 6): what nsqd 1.3.0 answers and
how it closes, recorded from a real nsqd with the probe below, and what the embedded broker
must do the same. The broker never fails with an unhandled exception.

Runs against the embedded broker or NSQD_ADDRESS (the expectations are nsqd's own)."""

from __future__ import annotations

import json
import logging
import socket
import struct
import time
import zlib

import pytest

from airflow_provider_nsq.protocol import FrameDecoder, NSQProtocolError, encode_pub


def identify(**fields) -> bytes:
    body = json.dumps({"feature_negotiation": True, **fields}).encode()
    return b"IDENTIFY\n" + struct.pack(">I", len(body)) + body


def sized(command: bytes, body: bytes) -> bytes:
    return command + b"\n" + struct.pack(">I", len(body)) + body


class Outcome:
    def __init__(self, data: bytes, close: str, sock: socket.socket | None = None) -> None:
        decoder = FrameDecoder()
        decoder.feed(data)
        try:
            self.frames = decoder.frames()
        except NSQProtocolError:  # compressed frames after an upgrade: not ours to read
            self.frames = []
        self.raw = data
        self.close = close
        self.sock = sock

    @property
    def errors(self) -> list[bytes]:
        return [f.data for f in self.frames if type(f).__name__ == "ErrorFrame"]


def exchange(nsqd, packets: list[bytes], wait: float = 1.0, keep: bool = False) -> Outcome:
    """Send each packet (a pause between them), then read until the server closes (EOF
    or reset) or ``wait`` passes in silence ("open")."""
    sock = socket.create_connection((nsqd.host, nsqd.tcp_port), timeout=5)
    for packet in packets:
        sock.sendall(packet)
        time.sleep(0.05)
    sock.settimeout(wait)
    data, close = b"", "open"
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                close = "eof"
                break
            data += chunk
    except ConnectionResetError:
        close = "rst"
    except TimeoutError:
        close = "open"
    if keep and close == "open":
        return Outcome(data, close, sock)
    sock.close()
    return Outcome(data, close)


@pytest.fixture
def no_crash(caplog):
    """Fails the test if the broker's loop reported an exception it did not handle."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    loop_log = logging.getLogger("asyncio")
    # Airflow's logging config disables the loggers that existed before it: not this one.
    disabled, loop_log.disabled = loop_log.disabled, False
    try:
        yield
    finally:
        loop_log.disabled = disabled
    crashes = [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]
    assert crashes == [], [r.getMessage() for r in crashes]


GARBAGE = b"\xff\xfe\xfdgarbage"
DEEP = b"[" * 100_000

# (packets, the error frames nsqd sends, how nsqd closes) as recorded from nsqd 1.3.0.
CASES = {
    "bad magic alone": ([b"  V1"], [b"E_BAD_PROTOCOL"], "eof"),
    "bad magic and a command": ([b"  V1" + encode_pub("t", b"x")], [b"E_BAD_PROTOCOL"], "rst"),
    "an HTTP request": ([b"GET / HTTP/1.1\r\n\r\n"], [b"E_BAD_PROTOCOL"], "rst"),
    "deeply nested IDENTIFY": (
        [b"  V2" + sized(b"IDENTIFY", DEEP)],
        [b"E_BAD_BODY IDENTIFY failed to decode JSON body"],
        "eof",
    ),
    "IDENTIFY that is not UTF-8": (
        [b"  V2" + sized(b"IDENTIFY", b"\xff\xfe{}")],
        [b"E_BAD_BODY IDENTIFY failed to decode JSON body"],
        "eof",
    ),
    "IDENTIFY with a number out of range": (
        [b"  V2" + sized(b"IDENTIFY", b'{"heartbeat_interval":1e400}')],
        [b"E_BAD_BODY IDENTIFY failed to decode JSON body"],
        "eof",
    ),
    "deeply nested AUTH without auth": (
        [b"  V2" + sized(b"AUTH", DEEP)],
        [b"E_AUTH_DISABLED AUTH disabled"],
        "eof",
    ),
    "deflate garbage after the upgrade": (
        [b"  V2" + identify(deflate=True), GARBAGE],
        [],
        "eof",
    ),
    "snappy garbage after the upgrade": ([b"  V2" + identify(snappy=True), GARBAGE], [], "rst"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_input_is_answered_as_nsqd_answers_it(nsqd, no_crash, case) -> None:
    packets, errors, close = CASES[case]
    outcome = exchange(nsqd, packets)
    assert outcome.errors == errors
    assert outcome.close == close


@pytest.mark.parametrize("kind", ["deflate", "snappy"])
def test_undecodable_bytes_in_the_identify_packet_keep_the_connection(
    nsqd, nsq_topic, no_crash, kind
) -> None:
    """nsqd swaps its reader at the upgrade and never reads bytes pipelined behind
    IDENTIFY: the connection stays usable with a fresh compressed stream."""
    outcome = exchange(nsqd, [b"  V2" + identify(**{kind: True}) + GARBAGE], 0.5, keep=True)
    assert outcome.close == "open" and outcome.sock is not None
    with outcome.sock as sock:
        if kind == "deflate":
            c = zlib.compressobj(6, zlib.DEFLATED, -15)
            sock.sendall(c.compress(encode_pub(nsq_topic, b"after")) + c.flush(zlib.Z_SYNC_FLUSH))
        else:
            import snappy

            sock.sendall(bytes(snappy.StreamCompressor().add_chunk(encode_pub(nsq_topic, b"a"))))
        sock.settimeout(5)
        assert sock.recv(65536)  # the OK, compressed
    nsqd.wait_for(lambda: (nsqd.topic_stats(nsq_topic) or {}).get("message_count") == 1)


@pytest.mark.parametrize(
    "answer",
    [
        {"ttl": 60, "authorizations": 5},
        {"ttl": 10**400, "authorizations": [{"topic": ".*", "permissions": ["publish"]}]},
        {"ttl": 60, "authorizations": [{"topic": ".*", "permissions": 7}]},
        [1, 2],
    ],
    ids=["authorizations-not-a-list", "ttl-overflows", "permissions-not-a-list", "a-list"],
)
def test_an_auth_server_answer_no_one_foresaw_is_auth_failed(nsqd_factory, no_crash, answer):
    server = nsqd_factory(authorizer=lambda *args: answer)
    outcome = exchange(server, [b"  V2" + sized(b"AUTH", b"secret")])
    assert outcome.errors == [b"E_AUTH_FAILED AUTH failed"]
    assert outcome.close == "eof"
