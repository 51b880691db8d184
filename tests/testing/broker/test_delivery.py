"""Topics, channels and delivery: fan-out, RDY windows, REQ/TOUCH/CLS, ephemeral names,
and nothing lost with many concurrent clients."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import threading
import time
from collections import Counter

from airflow_provider_nsq.testing.polling import async_wait_for
from tests.support.nsqd_wire import cmd, mpub_body


def sub(peer, topic, channel, rdy=None):
    peer.send(cmd(f"SUB {topic} {channel}"))
    assert peer.read_frame().data == b"OK"
    if rdy is not None:
        peer.send(cmd(f"RDY {rdy}"))


def pub(peer, topic, body):
    peer.send(cmd(f"PUB {topic}", body))
    frame = peer.read_frame()
    assert (frame.type, frame.data) == (0, b"OK"), frame


def test_every_channel_gets_a_copy_with_the_same_id(broker, open_peer):
    a, b, p = open_peer(broker), open_peer(broker), open_peer(broker)
    sub(a, "fan", "one", 1)
    sub(b, "fan", "two", 1)
    pub(p, "fan", b"hello")
    fa, fb = a.read_frame(), b.read_frame()
    assert fa.body == fb.body == b"hello"
    assert fa.msg_id == fb.msg_id  # nsqd copies the message, id included
    a.send(cmd(b"FIN " + fa.msg_id))
    b.send(cmd(b"FIN " + fb.msg_id))
    broker.wait_for(lambda: broker.channel_stats("fan", "one")["in_flight_count"] == 0)


def test_topic_without_channel_keeps_messages_for_the_first_channel(broker, open_peer):
    p = open_peer(broker)
    for body in (b"1", b"2", b"3"):
        pub(p, "keep", body)
    assert broker.topic_stats("keep")["depth"] == 3
    c = open_peer(broker)
    sub(c, "keep", "first", 10)
    assert sorted(f.body for f in c.read_frames(3)) == [b"1", b"2", b"3"]
    late = open_peer(broker)
    sub(late, "keep", "second", 10)
    late.expect_nothing(0.3)  # a later channel does not get the old messages


def test_messages_are_spread_over_ready_clients(broker, open_peer):
    consumers = [open_peer(broker) for _ in range(3)]
    for c in consumers:
        sub(c, "spread", "ch", 1)
    p = open_peer(broker)
    p.send(cmd("MPUB spread", mpub_body(*[b"m%d" % i for i in range(3)])))
    assert p.read_frame().data == b"OK"
    # RDY 1 each: every consumer gets exactly one of the three.
    got = sorted(c.read_frame().body for c in consumers)
    assert got == [b"m0", b"m1", b"m2"]


def test_rdy_is_a_window_not_a_credit(broker, open_peer):
    c, p = open_peer(broker), open_peer(broker)
    sub(c, "window", "ch", 2)
    p.send(cmd("MPUB window", mpub_body(b"a", b"b", b"c", b"d")))
    assert p.read_frame().data == b"OK"
    first = c.read_frames(2)
    c.expect_nothing(0.3)
    c.send(cmd(b"FIN " + first[0].msg_id))  # frees one slot, no new RDY needed
    assert c.read_frame().body == b"c"
    c.expect_nothing(0.3)


def test_req_with_delay_defers_and_counts(broker, open_peer):
    c, p = open_peer(broker), open_peer(broker)
    sub(c, "req", "ch", 1)
    pub(p, "req", b"later")
    m = c.read_frame()
    sent = time.monotonic()
    c.send(cmd(b"REQ " + m.msg_id + b" 300"))
    broker.wait_for(lambda: broker.channel_stats("req", "ch")["deferred_count"] == 1)
    again = c.read_frame(timeout=3)
    assert again.at - sent >= 0.3 and (again.msg_id, again.attempts) == (m.msg_id, 2)
    assert broker.channel_stats("req", "ch")["requeue_count"] == 1


def test_fin_of_another_clients_message_is_not_fatal(broker, open_peer):
    a, b, p = open_peer(broker), open_peer(broker), open_peer(broker)
    sub(a, "own", "ch", 1)
    sub(b, "own", "ch", 0)
    pub(p, "own", b"mine")
    m = a.read_frame()
    b.send(cmd(b"FIN " + m.msg_id))
    err = b.read_frame()
    assert (err.type, err.data) == (
        1,
        b"E_FIN_FAILED FIN " + m.msg_id + b" failed client does not own message",
    )
    b.expect_nothing(0.1)


def test_cls_stops_delivery_but_allows_fin(broker, open_peer):
    c, p = open_peer(broker), open_peer(broker)
    sub(c, "cls", "ch", 5)
    pub(p, "cls", b"one")
    m = c.read_frame(timeout=1)
    c.send(cmd("CLS"))
    assert c.read_frame().data == b"CLOSE_WAIT"
    c.send(cmd("RDY 5"))  # ignored after CLS
    pub(p, "cls", b"two")
    c.expect_nothing(0.4)
    c.send(cmd(b"FIN " + m.msg_id))
    c.expect_nothing(0.1)
    assert broker.channel_stats("cls", "ch")["depth"] == 1


def test_touch_on_a_message_keeps_it(broker, open_peer):
    c, p = open_peer(broker), open_peer(broker)
    c.send(cmd("IDENTIFY", json.dumps({"msg_timeout": 1000}).encode()))
    assert c.read_frame().data == b"OK"
    sub(c, "touch", "ch", 1)
    pub(p, "touch", b"t")
    m = c.read_frame()
    for _ in range(3):  # 3 x 600 ms > msg_timeout, but each TOUCH restarts it
        c.expect_nothing(0.6)
        c.send(cmd(b"TOUCH " + m.msg_id))
    c.send(cmd(b"FIN " + m.msg_id))
    c.expect_nothing(0.2)
    assert broker.channel_stats("touch", "ch")["timeout_count"] == 0


def test_touch_is_capped_by_max_msg_timeout(nsqd_factory, open_peer):
    server = nsqd_factory(max_msg_timeout=1500)
    c, p = open_peer(server), open_peer(server)
    c.send(cmd("IDENTIFY", json.dumps({"msg_timeout": 1000}).encode()))
    assert c.read_frame().data == b"OK"
    sub(c, "cap", "ch", 1)
    pub(p, "cap", b"t")
    m = c.read_frame()
    c.expect_nothing(0.8)
    c.send(cmd(b"TOUCH " + m.msg_id))  # would run to 1.8 s; capped at 1.5 s since delivery
    again = c.read_frame(timeout=3)
    assert 1.5 <= again.at - m.at < 1.75 and again.attempts == 2


def test_sample_rate_drops_the_rest(broker, open_peer):
    c, p = open_peer(broker), open_peer(broker)
    c.send(cmd("IDENTIFY", json.dumps({"sample_rate": 30}).encode()))
    assert c.read_frame().data == b"OK"
    sub(c, "sample", "ch", 2500)
    p.send(cmd("MPUB sample", mpub_body(*[b"%d" % i for i in range(1000)])))
    assert p.read_frame().data == b"OK"
    got = 0
    try:
        while True:
            c.read_frame(timeout=0.6)
            got += 1
    except AssertionError:
        pass
    assert 150 < got < 450  # about 30 %; the others are discarded, not requeued
    stats = broker.channel_stats("sample", "ch")
    assert stats["depth"] == 0 and stats["in_flight_count"] == got


def test_ephemeral_channel_and_topic_go_with_their_last_client(broker, open_peer):
    c = open_peer(broker)
    sub(c, "eph#ephemeral", "c#ephemeral", 1)
    assert broker.channel_stats("eph#ephemeral", "c#ephemeral") is not None
    c.close()
    broker.wait_for(lambda: broker.topic_stats("eph#ephemeral") is None)
    # A durable channel survives its consumer.
    d = open_peer(broker)
    sub(d, "durable", "c", 1)
    d.close()

    def close_noticed() -> bool:  # the channel lost its client (or, wrongly, went with it)
        stats = broker.channel_stats("durable", "c")
        return stats is None or not stats["clients"]

    broker.wait_for(close_noticed)
    assert broker.channel_stats("durable", "c") is not None


def test_deleting_a_channel_closes_its_consumers(broker, open_peer):
    c = open_peer(broker)
    sub(c, "del", "ch", 1)
    status, _ = broker.http("POST", "/channel/delete", {"topic": "del", "channel": "ch"})
    assert status == 200
    assert c.expect_closed() == "eof"


def test_max_channel_consumers(nsqd_factory, open_peer):
    server = nsqd_factory(max_channel_consumers=1)
    a, b = open_peer(server), open_peer(server)
    sub(a, "lim", "ch")
    b.send(cmd("SUB lim ch"))
    err = b.read_frame()
    assert err.data == b"E_SUB_FAILED SUB failed consumers for lim:ch exceeds limit of 1"
    assert b.expect_closed() == "eof"


# -- many clients -------------------------------------------------------------------------


async def _swarm(
    host: str, port: int, producers: int, consumers: int, seconds: float
) -> tuple[Counter, list[Counter]]:
    published: Counter = Counter()
    received = [Counter(), Counter()]
    stop_publishing = asyncio.Event()

    async def producer(i: int) -> None:
        r, w = await asyncio.open_connection(host, port)
        w.write(b"  V2")
        n = 0
        while not stop_publishing.is_set():
            if n % 2:
                bodies = [b"p%d-%d" % (i, n + k) for k in range(10)]
                w.write(cmd("MPUB swarm", mpub_body(*bodies)))
            else:
                bodies = [b"p%d-%d" % (i, n)]
                w.write(cmd("PUB swarm", bodies[0]))
            head = await r.readexactly(8)
            size, ftype = struct.unpack(">II", head)
            data = await r.readexactly(size - 4)
            assert (ftype, data) == (0, b"OK"), data
            published.update(bodies)
            n += len(bodies)
            await asyncio.sleep(0)
        w.close()

    async def consumer(i: int) -> None:
        channel = i % 2
        r, w = await asyncio.open_connection(host, port)
        w.write(b"  V2" + cmd(f"SUB swarm ch{channel}") + cmd(f"RDY {1 + i % 7}"))
        try:
            while True:
                head = await r.readexactly(8)
                size, ftype = struct.unpack(">II", head)
                data = await r.readexactly(size - 4)
                if ftype == 2:
                    received[channel][data[26:]] += 1
                    w.write(cmd(b"FIN " + data[10:26]))
                elif data == b"_heartbeat_":
                    w.write(cmd("NOP"))
        except (asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            w.close()

    consumer_tasks = [asyncio.create_task(consumer(i)) for i in range(consumers)]
    producer_tasks = [asyncio.create_task(producer(i)) for i in range(producers)]
    await asyncio.sleep(seconds)
    stop_publishing.set()
    await asyncio.gather(*producer_tasks)

    def everything_received() -> bool:
        return all(sum(c.values()) >= sum(published.values()) for c in received)

    # On timeout the caller's comparison of the counts says what is missing.
    with contextlib.suppress(AssertionError):
        await async_wait_for(everything_received, 20, 0.05)
    for t in consumer_tasks:
        t.cancel()
    await asyncio.gather(*consumer_tasks, return_exceptions=True)
    return published, received


def test_hundred_concurrent_clients_lose_nothing(broker):
    result: list = []
    # A loop in its own thread, like any other client process would be.
    thread = threading.Thread(
        target=lambda: result.append(asyncio.run(_swarm(broker.host, broker.tcp_port, 50, 50, 1.5)))
    )
    thread.start()
    thread.join(60)
    published, received = result[0]
    assert sum(published.values()) > 1000
    for counts in received:
        assert counts == published  # every message, exactly once, on each channel
    for ch in ("ch0", "ch1"):
        stats = broker.channel_stats("swarm", ch)
        assert (stats["depth"], stats["in_flight_count"], stats["timeout_count"]) == (0, 0, 0)
