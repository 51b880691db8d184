"""The one holder of a consumer while user code runs (client/holding/holder.py): who may
call what, TOUCH on time, answers, give-up to a dead-letter topic, close, over real
sockets (the embedded broker, or a real nsqd with NSQD_ADDRESS)."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from airflow_provider_nsq.client import (
    AsyncNSQConsumer,
    ClientConfig,
    NSQConnection,
    NSQConsumer,
)
from airflow_provider_nsq.client.holding.asyncio_dead_letters import AsyncDeadLetterPublisher
from airflow_provider_nsq.client.holding.blocking_dead_letters import DeadLetterPublisher
from airflow_provider_nsq.client.holding.function_thread import FunctionThread
from airflow_provider_nsq.client.holding.holder import AsyncMessageHolder, MessageHolder
from airflow_provider_nsq.client.message import decode_record_body
from airflow_provider_nsq.protocol.errors import NSQStateError
from airflow_provider_nsq.testing.polling import async_wait_for, wait_for

CHANNEL = "holder"
#: The shortest msg_timeout nsqd accepts in IDENTIFY: held messages would come back
#: after a second without TOUCH.
SHORT_MSG_TIMEOUT_MS = 1000


def config_of(nsqd: Any, **settings: Any) -> ClientConfig:
    return ClientConfig(host=nsqd.host, port=nsqd.tcp_port, **settings)


def publish(nsqd: Any, topic: str, bodies: list[bytes]) -> None:
    nsqd.create_channel(topic, CHANNEL)
    with NSQConnection(config_of(nsqd)) as conn:
        conn.multi_publish(topic, bodies)


def read_all(nsqd: Any, topic: str, channel: str, expected: int, timeout: float = 10.0) -> list:
    """What ``channel`` holds now (FIN'd): ``expected`` messages, then a short look for more."""
    got: list = []
    with NSQConsumer(topic, channel, config=config_of(nsqd)) as consumer:

        def enough() -> bool:
            if len(got) < expected:
                got.extend(consumer.consume(max_messages=expected - len(got), timeout=1.0))
            return len(got) >= expected

        wait_for(enough, timeout, 0, message=lambda: f"{len(got)} of {expected} on {channel}")
    with NSQConsumer(topic, channel, config=config_of(nsqd)) as consumer:
        got += consumer.consume(max_messages=10, timeout=0.5)
    return got


def take(holder: MessageHolder, count: int, timeout: float = 10.0) -> list:
    got: list = []

    def enough() -> bool:
        got.extend(holder.read(0.5))
        return len(got) >= count

    wait_for(enough, timeout, 0, message=lambda: f"{len(got)} of {count} held")
    assert len(got) == count
    return got


# -- who may call what -------------------------------------------------------------------


def test_a_second_caller_touching_a_held_consumer_gets_a_clear_error(nsqd, nsq_topic) -> None:
    publish(nsqd, nsq_topic, [b"a", b"b"])
    consumer = NSQConsumer(nsq_topic, CHANNEL, config=config_of(nsqd))
    holder = MessageHolder(consumer)
    holder.start(10)
    try:
        held = take(holder, 2)
        errors: list[BaseException] = []

        def intrude() -> None:
            try:
                consumer.touch_held()  # straight at the consumer, from another thread
            except BaseException as exc:
                errors.append(exc)

        intruder = threading.Thread(target=intrude)
        intruder.start()
        intruder.join(10)
        assert len(errors) == 1 and isinstance(errors[0], NSQStateError)
        assert "touch_held()" in str(errors[0]) and repr(holder) in str(errors[0])
        # The owner thread too: while a holder holds it, the consumer answers only it.
        with pytest.raises(NSQStateError, match="only the holder calls it"):
            consumer.read(0.1)
        holder.finish(*held)
    finally:
        holder.close()
    assert read_all(nsqd, nsq_topic, CHANNEL, 0) == []  # nothing lost, nothing left


def test_a_blocking_holder_is_called_from_its_owner_thread_only(nsqd, nsq_topic) -> None:
    publish(nsqd, nsq_topic, [b"a"])
    holder = MessageHolder(NSQConsumer(nsq_topic, CHANNEL, config=config_of(nsqd)))
    holder.start(10)
    try:
        held = take(holder, 1)
        errors: list[BaseException] = []

        def answer_elsewhere() -> None:
            try:
                holder.finish(*held)
            except BaseException as exc:
                errors.append(exc)

        other = threading.Thread(target=answer_elsewhere, name="not-the-owner")
        other.start()
        other.join(10)
        assert len(errors) == 1 and isinstance(errors[0], NSQStateError)
        assert "not-the-owner" in str(errors[0])
        assert threading.current_thread().name in str(errors[0])
        holder.finish(*held)
    finally:
        holder.close()


def test_a_consumer_is_held_by_one_holder(nsqd, nsq_topic) -> None:
    consumer = NSQConsumer(nsq_topic, CHANNEL, config=config_of(nsqd))
    holder = MessageHolder(consumer)
    with pytest.raises(NSQStateError, match="held by"):
        MessageHolder(consumer)
    holder.close()


def test_an_asyncio_holder_lets_one_task_read_at_a_time(nsqd, nsq_topic) -> None:
    nsqd.create_channel(nsq_topic, CHANNEL)

    async def run() -> tuple[BaseException, BaseException]:
        consumer = AsyncNSQConsumer(nsq_topic, CHANNEL, config=config_of(nsqd))
        holder = AsyncMessageHolder(consumer)
        await holder.start(10)
        try:
            reading = asyncio.create_task(holder.read(2.0), name="first-reader")
            # The first reader waits for deliveries.
            await async_wait_for(lambda: holder._reading is not None, 5)
            with pytest.raises(NSQStateError) as second:
                await holder.read(0.1)
            with pytest.raises(NSQStateError) as direct:
                await consumer.read(0.1)  # another task, straight at the consumer
            assert await reading == []
            return second.value, direct.value
        finally:
            await holder.close()

    second, direct = asyncio.run(run())
    assert "first-reader" in str(second)
    assert "read()" in str(direct) and "holds" in str(direct)


# -- TOUCH on time, answers, close -------------------------------------------------------


def test_held_messages_outlive_msg_timeout_while_user_code_runs(nsqd, nsq_topic) -> None:
    publish(nsqd, nsq_topic, [b"slow-1", b"slow-2"])
    consumer = NSQConsumer(
        nsq_topic, CHANNEL, config=config_of(nsqd, msg_timeout_ms=SHORT_MSG_TIMEOUT_MS)
    )
    holder = MessageHolder(consumer)
    holder.start(10)
    thread = FunctionThread("slow-user-code")
    try:
        held = take(holder, 2)
        done = threading.Event()
        future: Future = thread.submit(done.wait, 3.5)  # 3.5 msg_timeouts of user code
        assert holder.wait_for(future)
        assert holder.touched >= 2
        holder.finish(*held)
        assert holder.read(1.5) == []  # none came back while held
    finally:
        thread.stop()
        holder.close()
    assert read_all(nsqd, nsq_topic, CHANNEL, 0) == []


def test_an_asyncio_holder_touches_on_a_task_of_its_own(nsqd, nsq_topic) -> None:
    publish(nsqd, nsq_topic, [b"x", b"y", b"z"])

    async def run() -> tuple[int, list]:
        consumer = AsyncNSQConsumer(
            nsq_topic, CHANNEL, config=config_of(nsqd, msg_timeout_ms=SHORT_MSG_TIMEOUT_MS)
        )
        holder = AsyncMessageHolder(consumer)
        await holder.start(10)
        try:
            held: list = []
            async with asyncio.timeout(10):
                while len(held) < 3:
                    held += await holder.read(0.5)
            await asyncio.sleep(3.5)  # user code in the triggerer: the loop is free
            holder.finish(*held)
            return holder.touched, await holder.read(1.5)
        finally:
            await holder.close()

    touched, again = asyncio.run(run())
    assert touched >= 3 and again == []
    assert read_all(nsqd, nsq_topic, CHANNEL, 0) == []


def test_close_requeues_what_was_not_answered(nsqd, nsq_topic) -> None:
    publish(nsqd, nsq_topic, [b"%d" % i for i in range(5)])
    holder = MessageHolder(NSQConsumer(nsq_topic, CHANNEL, config=config_of(nsqd)))
    holder.start(10)
    held = take(holder, 5)
    holder.finish(held[0])
    assert holder.close(drain=True) == 4
    back = read_all(nsqd, nsq_topic, CHANNEL, 4)
    assert sorted(m.body for m in back) == [b"1", b"2", b"3", b"4"]
    assert {m.attempts for m in back} == {2}


# -- giving up: one envelope, published with failover ----------------------------------


def test_give_up_publishes_the_envelope_then_fins(nsqd, nsq_topic) -> None:
    publish(nsqd, nsq_topic, [b"\xffpoison"])
    dead_topic = f"{nsq_topic}.dead"
    nsqd.create_channel(dead_topic, "inspect")
    dead_letters = DeadLetterPublisher(dead_topic, config_of(nsqd))
    holder = MessageHolder(
        NSQConsumer(nsq_topic, CHANNEL, config=config_of(nsqd)), dead_letters=dead_letters
    )
    holder.start(10)
    try:
        (message,) = take(holder, 1)
        failed = holder.give_up(
            message, "max_attempts", error=ValueError("bad row"), by={"task_id": "t"}
        )
        assert failed is None
    finally:
        holder.close()
    assert read_all(nsqd, nsq_topic, CHANNEL, 0) == []  # FIN'd after the publish
    (letter,) = read_all(nsqd, dead_topic, "inspect", 1)
    envelope = json.loads(letter.body)
    assert envelope["reason"] == "max_attempts"
    assert envelope["error"] == {"type": "ValueError", "message": "bad row"}
    assert envelope["by"] == {"task_id": "t"}
    assert envelope["topic"] == nsq_topic and envelope["channel"] == CHANNEL
    assert decode_record_body(envelope) == b"\xffpoison"


def test_an_asyncio_give_up_for_a_rejected_message(nsqd, nsq_topic) -> None:
    publish(nsqd, nsq_topic, [b"nobody wants me"])
    dead_topic = f"{nsq_topic}.dead"
    nsqd.create_channel(dead_topic, "inspect")

    async def run() -> None:
        holder = AsyncMessageHolder(
            AsyncNSQConsumer(nsq_topic, CHANNEL, config=config_of(nsqd)),
            dead_letters=AsyncDeadLetterPublisher(dead_topic, config_of(nsqd)),
        )
        await holder.start(10)
        try:
            held: list = []
            async with asyncio.timeout(10):
                while not held:
                    held += await holder.read(0.5)
            assert await holder.give_up(held[0], "rejected", by={"trigger": "t"}) is None
        finally:
            await holder.close()

    asyncio.run(run())
    assert read_all(nsqd, nsq_topic, CHANNEL, 0) == []
    (letter,) = read_all(nsqd, dead_topic, "inspect", 1)
    envelope = json.loads(letter.body)
    assert (envelope["reason"], envelope["error"]) == ("rejected", None)
    assert envelope["body"] == "nobody wants me" and envelope["by"] == {"trigger": "t"}


def test_without_dead_letters_give_up_says_so_and_leaves_the_message(nsqd, nsq_topic) -> None:
    publish(nsqd, nsq_topic, [b"kept"])
    holder = MessageHolder(NSQConsumer(nsq_topic, CHANNEL, config=config_of(nsqd)))
    holder.start(10)
    (message,) = take(holder, 1)
    failed = holder.give_up(message, "max_attempts", error=ValueError("x"))
    assert isinstance(failed, NSQStateError) and "dead-letter topic" in str(failed)
    assert not message.responded
    assert holder.close() == 1  # handed back, not lost
    assert [m.body for m in read_all(nsqd, nsq_topic, CHANNEL, 1)] == [b"kept"]
