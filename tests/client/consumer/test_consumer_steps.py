"""The consumer's sequences with no socket and a clock of the test's own.

The sequences (:mod:`airflow_provider_nsq.client.consumer._sequences`) only yield steps;
here a scripted runner performs them on fake connections: it answers ``Now`` and
``Wait`` from a fake clock, opens fake connections for ``Connect``, records every RDY,
FIN, REQ and TOUCH of a ``Send``. So timing policies (RDY re-plans, rotation, reconnect
backoff, TOUCH deadlines, window deadlines) are checked exactly, in no time.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_nsq.client import ClientConfig
from airflow_provider_nsq.client.consumer import TOUCH_AFTER_SHARE, ConsumerState, ConsumerSteps
from airflow_provider_nsq.client.message import NSQMessage, bound_message_class
from airflow_provider_nsq.client.runners.steps import (
    Abort,
    Close,
    Connect,
    Now,
    Opened,
    Runnable,
    Send,
    StartClose,
    Step,
    Wait,
    drive,
)
from airflow_provider_nsq.protocol.errors import (
    NSQConnectionError,
    NSQStateError,
)

_ids = itertools.count()


class FakeConnection:
    """What the consumer reads of a driver, and the writes a runner does on it."""

    def __init__(self, config: ClientConfig, clock: FakeClock, max_rdy_count: int = 2500):
        self.config = config
        self.clock = clock
        self.max_rdy_count = max_rdy_count
        self.server_info: dict[str, Any] = {"msg_timeout": 60_000}
        self.failure: Exception | None = None
        self.closed = False
        self.rdy = 0
        self.in_flight = 0
        self.rdy_history: list[tuple[float, int]] = []
        self.touched: list[str] = []
        self.last_received = 0.0
        self._messages: list[NSQMessage] = []
        self._message_class = bound_message_class(self)  # type: ignore[arg-type]

    @property
    def alive(self) -> bool:
        return not self.closed and self.failure is None

    @property
    def has_news(self) -> bool:
        return bool(self._messages) or not self.alive

    def take_messages(self) -> list[NSQMessage]:
        out, self._messages = self._messages, []
        return out

    def deliver(self, count: int) -> list[NSQMessage]:
        """nsqd sends ``count`` messages, as RDY allows."""
        count = min(count, self.rdy - self.in_flight)
        got = [self._message_class(0, 1, b"%016d" % next(_ids), b"body") for _ in range(count)]
        self._messages += got
        self.in_flight += count
        self.last_received = self.clock.now
        return got

    def write(self, verb: str, messages: Any, count: int) -> None:
        if verb == "RDY":
            self.rdy = count
            self.rdy_history.append((self.clock.now, count))
            return
        if verb == "TOUCH":
            self.touched += [m.id for m in messages]
            return
        todo = [m for m in messages if not m.responded]
        for m in todo:
            m.responded = True
        self.in_flight -= len(todo)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0


class ScriptedRunner:
    """Performs steps on fake connections. ``unreachable`` nsqd addresses fail to
    connect; ``on_wait(runner)`` runs at each wait (before the clock moves on)."""

    def __init__(self, max_rdy_count: int = 2500) -> None:
        self.clock = FakeClock()
        self.max_rdy_count = max_rdy_count
        self.unreachable: set[str] = set()
        self.opened: list[FakeConnection] = []
        self.connects: list[tuple[float, tuple[str, ...]]] = []
        self.cls: list[FakeConnection] = []
        self.on_wait: Callable[[ScriptedRunner], None] | None = None

    def run(self, steps: Runnable[Step[Any], Any]) -> Any:
        return drive(steps, self.perform)

    def by_address(self, address: str) -> FakeConnection:
        return next(c for c in reversed(self.opened) if c.config.address == address)

    def perform(self, step: Step[Any]) -> Any:
        clock = self.clock
        if isinstance(step, Now):
            return clock.now
        if isinstance(step, Wait):
            if self.on_wait is not None:
                self.on_wait(self)
            if not any(c.has_news for c in step.connections):
                clock.now += step.timeout
            return clock.now
        if isinstance(step, Send):
            for write in step.writes:
                write.connection.write(write.verb, write.messages, write.count)
            return [None] * len(step.writes)
        if isinstance(step, Connect):
            self.connects.append((clock.now, tuple(c.address for c in step.configs)))
            results: list[Any] = []
            for config in step.configs:
                if config.address in self.unreachable:
                    results.append(NSQConnectionError(f"could not connect to {config.address}"))
                else:
                    conn = FakeConnection(config, clock, self.max_rdy_count)
                    self.opened.append(conn)
                    results.append(conn)
            return Opened(tuple(results), clock.now)
        if isinstance(step, StartClose):
            self.cls += step.connections
            return [None] * len(step.connections)
        assert isinstance(step, (Close, Abort)), step
        for conn in step.connections:
            conn.closed = True
        return None


NSQDS = ["127.0.0.1:4001", "127.0.0.1:4002", "127.0.0.1:4003"]


def consumer_of(nsqds: list[str] = NSQDS, **kwargs: Any) -> ConsumerSteps[Any]:
    kwargs.setdefault("config", ClientConfig(heartbeat_interval_ms=30_000))
    return ConsumerSteps("t", "c", nsqd_tcp_addresses=nsqds, **kwargs)


def rdy_of(runner: ScriptedRunner) -> dict[str, int]:
    return {c.config.address: c.rdy for c in runner.opened if c.alive}


# -- the state table --------------------------------------------------------------


def test_every_illegal_call_is_one_clear_error_naming_the_call_and_the_state() -> None:
    runner = ScriptedRunner()
    windows = consumer_of()
    with pytest.raises(NSQStateError, match=r"read\(\) .* new: call start\(\) before read"):
        runner.run(windows.read_steps(0.1))
    runner.run(windows.consume_steps(max_messages=1, timeout=0.5))
    assert windows.state is ConsumerState.IDLE
    with pytest.raises(NSQStateError, match=r"start\(\) .* idle: a consumer runs windows or one"):
        runner.run(windows.start_steps(5))
    runner.run(windows.close_steps())
    assert windows.state is ConsumerState.CLOSED
    runner.run(windows.close_steps())  # closing again: nothing to do
    with pytest.raises(NSQStateError, match=r"consume\(\) .* closed: the consumer is closed"):
        runner.run(windows.consume_steps(max_messages=1, timeout=0.5))

    stream = consumer_of()
    runner.run(stream.start_steps(5))
    assert stream.state is ConsumerState.STREAMING
    with pytest.raises(NSQStateError, match=r"consume\(\) .* streaming: .* this one streams"):
        runner.run(stream.consume_steps(max_messages=1, timeout=0.5))
    assert runner.run(stream.touch_held_steps()).touched == 0  # possible in every state


def test_a_start_that_failed_leaves_a_consumer_to_close() -> None:
    runner = ScriptedRunner()
    runner.unreachable = set(NSQDS)
    consumer = consumer_of()
    with pytest.raises(NSQConnectionError, match="could not read t/c from any nsqd"):
        runner.run(consumer.start_steps(5))
    assert consumer.state is ConsumerState.STARTING
    with pytest.raises(NSQStateError, match="start\\(\\) did not complete"):
        runner.run(consumer.read_steps(0.1))
    runner.run(consumer.close_steps())
    assert consumer.state is ConsumerState.CLOSED


# -- RDY at start-up: the flake of issue 25 -------------------------------------------


def test_a_connection_that_has_not_delivered_yet_keeps_its_share_at_start_up() -> None:
    # Three nsqds, a budget of 6: each gets RDY 2. Two deliver at once; the third is
    # slow (its nsqd has not sent yet). Re-plans must not take its last RDY away while
    # the others hold their share: it would be starved until the rotation came back.
    runner = ScriptedRunner()
    consumer = consumer_of()
    runner.run(consumer.start_steps(6))
    assert rdy_of(runner) == dict.fromkeys(NSQDS, 2)
    first, slow, third = (runner.by_address(a) for a in NSQDS)
    first.deliver(2)
    third.deliver(2)
    held = runner.run(consumer.read_steps(0.1))
    assert len(held) == 4
    for _ in range(40):  # 4 s of reads: re-plans, a quiet connection, rotations
        assert runner.run(consumer.read_steps(0.1)) == []
        assert slow.rdy >= 1, slow.rdy_history
        assert sum(max(c.rdy, c.in_flight) for c in runner.opened) <= 6
    assert len(slow.deliver(5)) >= 1  # its messages still come


def test_a_share_just_given_is_not_moved_at_the_first_re_plan() -> None:
    # The turn (rotation) starts one interval after the first plan: a re-plan at once
    # would move RDY from a connection whose nsqd has not had time to use it.
    runner = ScriptedRunner()
    consumer = consumer_of()
    started = runner.clock.now
    runner.run(consumer.start_steps(6))
    runner.by_address(NSQDS[0]).deliver(2)
    runner.by_address(NSQDS[2]).deliver(2)
    for _ in range(2):  # 0.2 s: before any connection counts as quiet
        runner.run(consumer.read_steps(0.1))
    assert all(c.rdy_history == [(started, 2)] for c in runner.opened)


def test_with_fewer_rdy_than_nsqds_each_gets_its_turn() -> None:
    runner = ScriptedRunner()
    consumer = consumer_of()
    runner.run(consumer.start_steps(2))
    seen: set[str] = set()
    for _ in range(40):  # every nsqd gets its turn within a few rotation intervals
        runner.run(consumer.read_steps(0.1))
        seen |= {a for a, r in rdy_of(runner).items() if r}
        assert sum(rdy_of(runner).values()) <= 2
    assert seen == set(NSQDS)


def backlogs(runner: ScriptedRunner, counts: list[int]) -> None:
    """Each nsqd has ``counts[i]`` messages: it sends them as its RDY allows."""
    left = dict(zip(NSQDS, counts, strict=False))

    def nsqds_deliver(r: ScriptedRunner) -> None:
        for address, count in left.items():
            left[address] -= len(r.by_address(address).deliver(count))

    runner.on_wait = nsqds_deliver


@pytest.mark.parametrize(
    ("counts", "within"),
    [([5, 0], 0.7), ([5, 10, 15], 1.1)],  # IDLE_AFTER_S, SETTLE_S and a few re-plans
)
def test_a_window_moves_rdy_to_the_nsqds_that_have_messages_without_flapping(
    counts: list[int], within: float
) -> None:
    # The window's budget starts split evenly. A quiet nsqd's share moves once it is
    # quiet and settled; one that holds all the RDY it was sent counts as busy meanwhile
    # (nsqd cannot send it more: its silence says nothing), and one whose RDY was lowered
    # to what it holds does not (it took nothing since), so no share goes back and
    # forth and the window fills at once (it took 2 s and more with a share flapping).
    runner = ScriptedRunner()
    consumer = consumer_of(NSQDS[: len(counts)])
    backlogs(runner, counts)
    started = runner.clock.now
    got = runner.run(consumer.consume_steps(max_messages=sum(counts), timeout=10.0))
    assert len(got) == sum(counts)
    assert runner.clock.now - started < within
    lowered = [
        [b for a, b in itertools.pairwise(n for _, n in c.rdy_history) if b < a]
        for c in runner.opened
    ]
    assert all(len(lows) <= 2 for lows in lowered)  # once, and the pause at the end


# -- reconnects, TOUCH and windows, on the fake clock -------------------------------


def test_an_unreachable_nsqd_is_retried_with_backoff_on_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reconnect backoff draws each wait from 0 to its ceiling (full jitter); here
    # every draw is its ceiling, so the schedule is exact, and the ceilings are recorded.
    drawn: list[tuple[float, float]] = []

    def at_ceiling(low: float, high: float) -> float:
        drawn.append((low, high))
        return high

    monkeypatch.setattr(random, "uniform", at_ceiling)
    runner = ScriptedRunner()
    runner.unreachable = {NSQDS[2]}
    consumer = consumer_of()
    runner.run(consumer.start_steps(6))
    started = runner.clock.now
    while runner.clock.now < started + 3.5:
        runner.run(consumer.read_steps(0.1))
    retries = [t - started for t, addresses in runner.connects[1:] if NSQDS[2] in addresses]
    # backoff 1 s, then 2 s (a retry is looked for every REBALANCE_INTERVAL_S)
    assert [round(t, 1) for t in retries] == [1.0, 3.0]
    runner.unreachable = set()
    while NSQDS[2] not in consumer.connections and runner.clock.now < started + 10:
        runner.run(consumer.read_steps(0.1))
    assert round(runner.clock.now - started, 1) == 7.0  # the next try, 4 s later
    assert drawn == [(0.0, 1.0), (0.0, 2.0), (0.0, 4.0)]  # RECONNECT_START_S, doubling
    for _ in range(5):  # the RDY it gets is taken from the others once theirs settled
        runner.run(consumer.read_steps(0.1))
    assert rdy_of(runner)[NSQDS[2]] >= 1
    assert sum(rdy_of(runner).values()) == 6


def test_a_skipped_nsqd_is_announced_for_a_next_try_only_when_one_will_come(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "airflow_provider_nsq.client.consumer")
    runner = ScriptedRunner()
    runner.unreachable = set(NSQDS)
    with pytest.raises(NSQConnectionError, match="could not read t/c from any nsqd"):
        runner.run(consumer_of().start_steps(6))
    assert "skipped" not in caplog.text  # the error names each nsqd; nothing retries
    caplog.clear()
    runner.unreachable = {NSQDS[2]}
    runner.run(consumer_of().consume_steps(max_messages=1, timeout=0.5))
    assert f"nsqd at {NSQDS[2]} skipped for this window of t/c" in caplog.text
    assert "next try" not in caplog.text  # a window does not retry; the next one does
    caplog.clear()
    stream = consumer_of()
    runner.run(stream.start_steps(6))
    assert re.search(
        rf"nsqd at {NSQDS[2]} skipped for t/c: .*\(next try in \d+\.\ds\)", caplog.text
    )
    started = runner.clock.now
    while len(runner.connects) < 4 and runner.clock.now < started + 2:
        runner.run(stream.read_steps(0.1))
    assert NSQDS[2] in runner.connects[-1][1]  # and the stream did try it again


def waits_of(runner: ScriptedRunner) -> list[float]:
    """Record the timeout of every wait ``runner`` performs from now on."""
    waits: list[float] = []
    perform = runner.perform

    def recording(step: Step[Any]) -> Any:
        if isinstance(step, Wait):
            waits.append(round(step.timeout, 3))
        return perform(step)

    runner.perform = recording  # type: ignore[method-assign]
    return waits


def test_a_stream_on_one_nsqd_waits_for_a_delivery_without_waking_meanwhile() -> None:
    # With one nsqd nothing changes with the clock alone (its RDY share is the whole
    # budget): a read waits once, for a delivery or its timeout. With two, who is busy
    # changes with time, so the read wakes to look at the RDY split.
    runner = ScriptedRunner()
    one = consumer_of(NSQDS[:1])
    runner.run(one.start_steps(5))
    waits = waits_of(runner)
    assert runner.run(one.read_steps(3.0)) == []
    assert waits == [3.0]
    two = consumer_of(NSQDS[:2])
    runner.run(two.start_steps(5))
    waits.clear()
    runner.run(two.read_steps(0.5))
    assert len(waits) >= 5 and max(waits) <= 0.1


def test_one_nsqd_is_sent_its_rdy_once_however_many_messages_come() -> None:
    runner = ScriptedRunner()
    consumer = consumer_of(NSQDS[:1])
    started = runner.clock.now
    runner.run(consumer.start_steps(5))
    conn = runner.opened[0]
    for _ in range(20):
        conn.deliver(3)
        got = runner.run(consumer.read_steps(1.0))
        runner.clock.now += 0.3  # quiet, then busy again: nothing the split needs
        conn.write("FIN", got, 0)  # nsqd refills RDY by itself as messages are answered
    assert conn.rdy_history == [(started, 5)]


def test_touch_held_touches_each_held_message_once_a_third_of_msg_timeout_passed() -> None:
    runner = ScriptedRunner()
    consumer = consumer_of(NSQDS[:1])
    runner.run(consumer.start_steps(3))
    conn = runner.opened[0]
    conn.server_info["msg_timeout"] = 60_000
    held = conn.deliver(3)
    runner.run(consumer.read_steps(0.1))
    due_after = 60 * TOUCH_AFTER_SHARE
    touched, next_in = runner.run(consumer.touch_held_steps())
    assert touched == 0 and next_in == pytest.approx(due_after, abs=0.2)
    runner.clock.now += next_in
    assert runner.run(consumer.touch_held_steps()).touched == 3
    assert sorted(conn.touched) == sorted(m.id for m in held)
    runner.run(consumer.close_steps())
    assert conn.in_flight == 0  # close REQ'd them


def test_a_window_ends_at_its_deadline_on_the_clock_and_fins_what_it_got() -> None:
    runner = ScriptedRunner()
    consumer = consumer_of(NSQDS[:2])

    def deliver_once(r: ScriptedRunner) -> None:
        r.on_wait = None
        r.by_address(NSQDS[0]).deliver(2)

    runner.on_wait = deliver_once
    started = runner.clock.now
    got = runner.run(consumer.consume_steps(max_messages=10, timeout=2.0))
    assert len(got) == 2
    assert runner.clock.now - started == pytest.approx(2.0)  # its timeout, not more
    assert {c.config.address for c in runner.cls} == set(NSQDS[:2])  # CLS'd: it did not fill
    assert all(m.responded for m in got)  # ack="fin"
    assert not consumer.subscribed


def test_a_full_window_pauses_with_rdy_0_and_keeps_its_subscriptions() -> None:
    runner = ScriptedRunner()
    consumer = consumer_of(NSQDS[:2])
    runner.on_wait = lambda r: [r.by_address(a).deliver(2) for a in NSQDS[:2]]
    got = runner.run(consumer.consume_steps(max_messages=4, timeout=5.0))
    assert len(got) == 4 and not runner.cls
    assert consumer.subscribed and rdy_of(runner) == dict.fromkeys(NSQDS[:2], 0)
    runner.run(consumer.consume_steps(max_messages=4, timeout=0.5))
    assert len(runner.connects) == 1  # the second window read on the same connections


def test_contact_says_how_long_each_nsqd_has_been_silent() -> None:
    runner = ScriptedRunner()
    runner.unreachable = {NSQDS[2]}
    consumer = consumer_of()
    runner.run(consumer.start_steps(6))
    runner.by_address(NSQDS[0]).last_received = runner.clock.now - 3
    contact = runner.run(consumer.contact_steps())
    assert contact[NSQDS[0]].connected and contact[NSQDS[0]].silent_for == pytest.approx(3)
    assert contact[NSQDS[1]].connected and contact[NSQDS[1]].silent_for is None
    assert not contact[NSQDS[2]].connected and contact[NSQDS[2]].silent_for is None
    later = runner.clock.now + 10
    assert runner.run(consumer.contact_steps(later))[NSQDS[0]].silent_for == pytest.approx(13)
