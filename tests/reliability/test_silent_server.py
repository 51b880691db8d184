"""Guarantee (d) of issue 11: a server that goes silent never hangs a caller. Every entry
point ends with an NSQError within its configured bound: ``connect_timeout`` when nothing
answers at all, ``read_timeout`` (a connection extra since item 7) when nsqd completed the
handshake and then stopped answering, the HTTP client's ``timeout`` for nsqd's HTTP API,
the trigger's deadline.

"Silent" is a listener that accepts and never reads nor writes; "stalled" is a proxy in
front of the session's nsqd that holds every frame after the IDENTIFY response."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_provider_nsq.client import (
    AsyncNSQConnection,
    AsyncNSQConsumer,
    ClientConfig,
    NSQConnection,
    NSQConsumer,
)
from airflow_provider_nsq.client.http.nsqd_api import NSQDHTTPClient
from airflow_provider_nsq.client.transport.http_request import ahttp_request, http_request
from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.protocol import NSQError, NSQTimeoutError
from airflow_provider_nsq.testing.faults import FaultProxy, stall
from tests.support.drivers import make_driver

TIMEOUT = 0.5
SLACK = 2.5  # a loaded CI machine, not a hang


class SilentServer:
    """Accepts connections on 127.0.0.1 and never reads or writes."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(sock)

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close() does not)
        except OSError:
            pass
        self.listener.close()
        for sock in self.held:
            sock.close()
        self._thread.join(5)


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def stalled(nsqd) -> Iterator[FaultProxy]:
    """A proxy to nsqd that holds every frame after the first (the IDENTIFY response)."""
    with FaultProxy(nsqd.tcp_address, policy=lambda index: (stall("to_client", 2),)) as proxy:
        yield proxy


def bounded(call: Callable[[], Any], bound: float, error: type[BaseException] = NSQError) -> Any:
    started = time.monotonic()
    with pytest.raises(error) as info:
        result = call()
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    elapsed = time.monotonic() - started
    assert elapsed <= bound + SLACK, f"{elapsed:.2f}s > {bound}s"
    return info.value


def config(port: int, **kw: Any) -> ClientConfig:
    kw.setdefault("read_timeout", TIMEOUT)
    return ClientConfig(port=port, connect_timeout=TIMEOUT, **kw)


def hook_for(monkeypatch, port: int, **extras: Any) -> NSQHook:
    query = "&".join(
        f"{k}={v}"
        for k, v in {"connect_timeout": TIMEOUT, "read_timeout": TIMEOUT, **extras}.items()
    )
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_SILENT", f"nsq://127.0.0.1:{port}?{query}")
    return NSQHook("nsq_silent")


# -- the client drivers -------------------------------------------------------------------------

DRIVER_CALLS: dict[str, Callable[[Any], Any]] = {
    "publish": lambda c: c.publish("t", b"x"),
    "defer_publish": lambda c: c.defer_publish("t", b"x", 10),
    "multi_publish": lambda c: c.multi_publish("t", [b"x", b"y"]),
    "ping": lambda c: c.ping(),
    "subscribe": lambda c: c.subscribe("t", "c"),
}


@pytest.mark.parametrize("kind", ["blocking", "asyncio"])
def test_connect_to_a_silent_server_times_out(silent, kind) -> None:
    if kind == "blocking":
        bounded(NSQConnection(config(silent.port)).connect, TIMEOUT, NSQTimeoutError)
    else:
        bounded(AsyncNSQConnection(config(silent.port)).connect, TIMEOUT, NSQTimeoutError)


def test_publish_on_a_silent_server_times_out_in_the_connect(silent) -> None:
    conn = NSQConnection(config(silent.port))
    bounded(lambda: conn.publish("t", b"x"), TIMEOUT, NSQTimeoutError)
    aconn = AsyncNSQConnection(config(silent.port))
    bounded(lambda: aconn.publish("t", b"x"), TIMEOUT, NSQTimeoutError)


@pytest.mark.parametrize("call", list(DRIVER_CALLS))
def test_blocking_calls_on_a_stalled_connection_time_out(stalled, call) -> None:
    with NSQConnection(config(stalled.port)) as conn:
        bounded(lambda: DRIVER_CALLS[call](conn), TIMEOUT, NSQTimeoutError)
        assert not conn.connected  # a late reply can never be matched to the next command


@pytest.mark.parametrize("call", list(DRIVER_CALLS))
def test_asyncio_calls_on_a_stalled_connection_time_out(stalled, call) -> None:
    async def run() -> None:
        async with AsyncNSQConnection(config(stalled.port)) as conn:
            await DRIVER_CALLS[call](conn)

    bounded(run, TIMEOUT, NSQTimeoutError)


@pytest.mark.parametrize("kind", ["blocking", "asyncio"])
def test_a_consume_window_on_a_stalled_connection_times_out(stalled, kind) -> None:
    # What the drivers' own windows were checked for here: a consumer's window (SUB,
    # RDY, CLS) on a connection that stops answering after IDENTIFY.
    def blocking() -> None:
        with NSQConsumer("t", "c", config=config(stalled.port)) as consumer:
            consumer.consume(max_messages=1, timeout=0.2)

    async def run() -> None:
        async with AsyncNSQConsumer("t", "c", config=config(stalled.port)) as consumer:
            await consumer.consume(max_messages=1, timeout=0.2)

    bounded(blocking if kind == "blocking" else run, TIMEOUT, NSQTimeoutError)


@pytest.mark.parametrize("kind", ["blocking", "asyncio"])
def test_waiting_for_messages_from_a_stalled_nsqd_returns_at_its_timeout(nsqd, kind) -> None:
    # IDENTIFY's and SUB's answers get through, then nothing.
    with FaultProxy(nsqd.tcp_address, policy=lambda i: (stall("to_client", 3),)) as proxy:
        conn = make_driver(kind, config(proxy.port, read_timeout=30))
        try:
            conn.connect()
            conn.subscribe("t_stalled", "c")
            conn.ready(1)
            started = time.monotonic()
            assert conn.read_messages(0.3) == []
            assert time.monotonic() - started < 0.3 + SLACK
        finally:
            conn.close()


# -- the hook -------------------------------------------------------------------------------------

HOOK_CALLS: dict[str, Callable[[NSQHook], Any]] = {
    "publish": lambda h: h.publish("t", "x"),
    "defer_publish": lambda h: h.defer_publish("t", "x", 10),
    "multi_publish": lambda h: h.multi_publish("t", ["x", "y"]),
    "consume": lambda h: h.consume("t", "c", max_messages=1, timeout=0.2),
    "get_server_info": lambda h: h.get_server_info(),
}


@pytest.mark.parametrize("call", list(HOOK_CALLS))
def test_hook_calls_on_a_silent_server_time_out(silent, monkeypatch, call) -> None:
    with hook_for(monkeypatch, silent.port) as hook:
        bounded(lambda: HOOK_CALLS[call](hook), TIMEOUT, NSQTimeoutError)


@pytest.mark.parametrize("call", ["publish", "defer_publish", "multi_publish", "consume"])
def test_hook_calls_on_a_stalled_nsqd_time_out_at_the_read_timeout_extra(
    stalled, monkeypatch, call
) -> None:
    with hook_for(monkeypatch, stalled.port) as hook:
        error = bounded(lambda: HOOK_CALLS[call](hook), TIMEOUT, NSQTimeoutError)
    assert f"within {TIMEOUT:g}s" in str(error)


@pytest.mark.parametrize("server", ["silent", "stalled"])
def test_the_test_button_answers_within_its_bounds(request, monkeypatch, server) -> None:
    port = request.getfixturevalue(server).port
    started = time.monotonic()
    ok, message = hook_for(monkeypatch, port).test_connection()
    assert not ok
    assert "within" in message
    assert time.monotonic() - started <= TIMEOUT + SLACK


# -- nsqd's HTTP API --------------------------------------------------------------------------------


def test_http_requests_to_a_silent_server_time_out(silent) -> None:
    bounded(lambda: http_request("127.0.0.1", silent.port, "/ping", timeout=TIMEOUT), TIMEOUT)
    bounded(lambda: ahttp_request("127.0.0.1", silent.port, "/ping", timeout=TIMEOUT), TIMEOUT)
    api = NSQDHTTPClient("127.0.0.1", silent.port, timeout=TIMEOUT)
    bounded(lambda: api.stats(), TIMEOUT, NSQTimeoutError)
    bounded(lambda: api.channel_depth("t", "c"), TIMEOUT, NSQTimeoutError)
    bounded(lambda: api.achannel_depth("t", "c"), TIMEOUT, NSQTimeoutError)


# -- the sensor and the trigger ---------------------------------------------------------------------


def test_a_sensor_poke_against_silent_servers_ends_within_its_bounds(silent, monkeypatch) -> None:
    from airflow_provider_nsq.sensors.nsq import NSQSensor

    hook_for(monkeypatch, silent.port, http_port=silent.port)
    sensor = NSQSensor(
        task_id="wait", topic="t", channel="c", nsq_conn_id="nsq_silent", window_timeout=1
    )
    # The HTTP check times out (TIMEOUT per request), then the TCP window's connect does.
    # An nsqd that cannot be reached is "not yet": the poke says so and ends, counted as a
    # failed try (the sensor's timeout, not the first silence, fails the task).
    started = time.monotonic()
    assert sensor.poke({}) is False
    elapsed = time.monotonic() - started
    assert elapsed <= 4 * TIMEOUT + 1 + SLACK, f"{elapsed:.2f}s"
    assert sensor.unreachable_report.tries == 1


def test_a_trigger_against_a_silent_server_fires_by_its_deadline(silent, monkeypatch) -> None:
    from airflow_provider_nsq.triggers.nsq import NSQMessageTrigger

    hook_for(monkeypatch, silent.port)
    trigger = NSQMessageTrigger(
        topic="t", channel="c", nsq_conn_id="nsq_silent", deadline=time.time() + 2
    )

    async def first_event() -> Any:
        async for event in trigger.run():
            return event.payload
        return None

    started = time.monotonic()
    payload = asyncio.run(first_event())
    assert payload["status"] in ("timeout", "error"), payload
    assert time.monotonic() - started <= 2 + SLACK
