"""Limits under nsqd's flag names, IDENTIFY validation, and the mem_queue_size policy."""

from __future__ import annotations

import json
import socket

import pytest

from tests.support.nsqd_wire import cmd, mpub_body


def identify(peer, **fields):
    peer.send(cmd("IDENTIFY", json.dumps({"feature_negotiation": True, **fields}).encode()))
    return peer.read_frame()


@pytest.mark.parametrize(
    ("flags", "send", "error"),
    [
        ({"max_rdy_count": 10}, "SUB t c\nRDY 11\n", b"E_INVALID RDY count 11 out of range 0-10"),
        (
            {"max_msg_size": 10},
            cmd("DPUB t 5", b"x" * 11).decode(),
            b"E_BAD_MESSAGE DPUB message too big 11 > 10",
        ),
        (
            {"max_req_timeout": 1000},
            cmd("DPUB t 1001", b"x").decode(),
            b"E_INVALID DPUB timeout 1001 out of range 0-1000",
        ),
        (
            {"max_body_size": 100},
            cmd("IDENTIFY", b"{" + b" " * 100 + b"}").decode(),
            b"E_BAD_BODY IDENTIFY body too big 102 > 100",
        ),
        (
            {"max_body_size": 100},
            cmd("AUTH", b"s" * 101).decode(),
            b"E_BAD_BODY AUTH body too big 101 > 100",
        ),
    ],
    ids=["max_rdy_count", "max_msg_size", "max_req_timeout", "identify_body", "auth_body"],
)
def test_configured_limits(nsqd_factory, open_peer, flags, send, error):
    peer = open_peer(nsqd_factory(**flags))
    peer.send(send.encode("latin-1"))
    frames = [peer.read_frame()]
    if frames[0].data == b"OK":
        frames.append(peer.read_frame())
    assert frames[-1].type == 1 and frames[-1].data == error
    assert peer.expect_closed() == "eof"


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (
            {"heartbeat_interval": 60001},
            b"E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid",
        ),
        ({"msg_timeout": 900001}, b"E_BAD_BODY IDENTIFY msg timeout (900001) is invalid"),
        ({"msg_timeout": 999}, b"E_BAD_BODY IDENTIFY msg timeout (999) is invalid"),
        ({"output_buffer_size": 63}, b"E_BAD_BODY IDENTIFY output buffer size (63) is invalid"),
        (
            {"output_buffer_timeout": 24},
            b"E_BAD_BODY IDENTIFY output buffer timeout (24) is invalid",
        ),
        ({"sample_rate": 100}, b"E_BAD_BODY IDENTIFY sample rate (100) is invalid"),
        ({"heartbeat_interval": "1000"}, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        ({"msg_timeout": 1500.0}, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    ],
)
def test_identify_validation(broker, open_peer, fields, error):
    peer = open_peer(broker)
    frame = identify(peer, **fields)
    assert (frame.type, frame.data) == (1, error)
    assert peer.expect_closed() == "eof"


def test_identify_response_reflects_flags_and_request(nsqd_factory, open_peer):
    server = nsqd_factory(
        max_rdy_count=100, max_deflate_level=3, snappy=False, max_msg_timeout=5000
    )
    peer = open_peer(server)
    frame = identify(
        peer,
        deflate=False,
        deflate_level=9,
        snappy=True,
        msg_timeout=2000,
        sample_rate=5,
        output_buffer_size=-1,
        HEARTBEAT_INTERVAL=1000,  # keys match case-insensitively
    )
    assert json.loads(frame.data) == {
        "max_rdy_count": 100,
        "version": "1.3.0",
        "max_msg_timeout": 5000,
        "msg_timeout": 2000,
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 3,  # reported (capped) even though deflate is off
        "max_deflate_level": 3,
        "snappy": False,  # --snappy=false
        "sample_rate": 5,
        "auth_required": False,
        "output_buffer_size": 1,  # -1: unbuffered
        "output_buffer_timeout": 0,
    }
    assert list(json.loads(frame.data)) == [  # nsqd's key order
        "max_rdy_count",
        "version",
        "max_msg_timeout",
        "msg_timeout",
        "tls_v1",
        "deflate",
        "deflate_level",
        "max_deflate_level",
        "snappy",
        "sample_rate",
        "auth_required",
        "output_buffer_size",
        "output_buffer_timeout",
    ]
    assert peer.read_frame(timeout=2).data == b"_heartbeat_"


def test_unbuffered_client_gets_messages_at_once(broker, open_peer):
    c, p = open_peer(broker), open_peer(broker)
    identify(c, output_buffer_size=-1)
    c.send(cmd("SUB unbuf ch") + cmd("RDY 10"))
    assert c.read_frame().data == b"OK"
    p.send(cmd("PUB unbuf", b"now"))
    assert p.read_frame().data == b"OK"
    # nsqd would hold it up to 250 ms with RDY 10 and a buffer; unbuffered: at once.
    assert c.read_frame(timeout=0.15).body == b"now"


def test_line_longer_than_read_buffer_closes_without_error(broker, open_peer):
    peer = open_peer(broker)
    peer.send_quietly(b"PUB " + b"x" * 20000)
    assert peer.expect_closed() in ("eof", "reset")


def test_eof_in_the_middle_of_a_body_reports_the_failed_read(broker, open_peer):
    peer = open_peer(broker)
    peer.send(b"PUB t\n\x00\x00\x00\x10abc")
    peer.sock.shutdown(1)  # half-close: nsqd's ReadFull fails, it says so, then closes
    frame = peer.read_frame()
    assert frame.data == b"E_BAD_MESSAGE PUB failed to read message body"
    assert peer.expect_closed() == "eof"


# -- mem_queue_size: a hard bound, refused with E_PUB_FAILED / E_MPUB_FAILED -------------


def test_publishing_past_mem_queue_size_is_refused(nsqd_factory, open_peer):
    server = nsqd_factory(mem_queue_size=100)
    server.create_channel("full", "ch")
    p = open_peer(server)
    p.send(cmd("MPUB full", mpub_body(*[b"m"] * 100)))
    assert p.read_frame().data == b"OK"
    p.send(cmd("PUB full", b"one too many"))
    err = p.read_frame()
    assert err.data == (
        b"E_PUB_FAILED PUB failed channel full:ch is full (mem-queue-size 100; "
        b"the embedded broker has no disk queue)"
    )
    assert p.expect_closed() == "eof"
    q = open_peer(server)
    q.send(cmd("MPUB full", mpub_body(b"a", b"b")))
    assert q.read_frame().data.startswith(b"E_MPUB_FAILED MPUB failed channel full:ch is full")
    status, body = server.http("POST", "/pub", {"topic": "full"}, b"x")
    assert status == 503 and b"EXITING" in body
    assert server.channel_stats("full", "ch")["depth"] == 100


def test_topic_without_channel_is_bounded_too(nsqd_factory, open_peer):
    server = nsqd_factory(mem_queue_size=10)
    p = open_peer(server)
    p.send(cmd("MPUB nochan", mpub_body(*[b"m"] * 11)))  # all or nothing
    assert p.read_frame().data.startswith(b"E_MPUB_FAILED MPUB failed topic nochan is full")
    assert server.topic_stats("nochan")["depth"] == 0


def test_memory_stays_bounded_when_producer_outpaces_consumer(nsqd_factory, open_peer):
    limit = 2000
    server = nsqd_factory(mem_queue_size=limit)
    c = open_peer(server)
    c.send(cmd("SUB race ch") + cmd("RDY 1"))  # a slow consumer: one at a time, no FIN
    assert c.read_frame().data == b"OK"
    p = open_peer(server)
    batch = mpub_body(*[b"x" * 100] * 100)
    published = 0
    while True:
        p.send_quietly(cmd("MPUB race", batch))
        frame = p.read_frame()
        if frame.type == 1:
            assert frame.data.startswith(b"E_MPUB_FAILED")
            break
        published += 100
        assert published <= limit + 100, "the broker kept accepting past mem_queue_size"
    stats = server.channel_stats("race", "ch")
    assert stats["depth"] + stats["in_flight_count"] <= limit + 1
    assert published >= limit - 100


def test_consumer_that_stops_reading_is_dropped(broker, open_peer):
    """nsqd's write deadline: a client whose buffers stay full for one heartbeat interval
    is disconnected, so a stuck consumer cannot make the broker buffer without bound."""
    c = open_peer(broker)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    identify(c, heartbeat_interval=1000, output_buffer_size=-1)
    c.send(cmd("SUB stuck ch") + cmd("RDY 2500"))
    assert c.read_frame().data == b"OK"
    p = open_peer(broker)
    for _ in range(25):
        p.send(cmd("MPUB stuck", mpub_body(*[b"x" * 10_000] * 100)))
        assert p.read_frame().data == b"OK"

    def dropped() -> bool:
        c.send_quietly(cmd("NOP"))  # keep the read deadline alive, never read
        return broker.channel_stats("stuck", "ch")["client_count"] == 0

    broker.wait_for(dropped, 6, 0.2)
    stats = broker.channel_stats("stuck", "ch")
    assert stats["client_count"] == 0
    assert stats["in_flight_count"] < 2500  # delivery stopped when its buffers filled
