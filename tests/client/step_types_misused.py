"""Sequences handed to a runner that cannot run them: mypy must report each line marked
``# rejected: <error code>``, and nothing else (``test_step_types.py`` runs it). Never
imported: each of these would fail at run time, and mypy finds them first."""

from __future__ import annotations

from airflow_provider_nsq.client import AsyncNSQConnection, AsyncNSQConsumer, NSQConsumer
from airflow_provider_nsq.client.http.lookupd_api import LookupdClient
from airflow_provider_nsq.client.runners.asyncio_runner import AsyncRunner, arun
from airflow_provider_nsq.client.runners.blocking_runner import BlockingRunner, run
from airflow_provider_nsq.client.runners.steps import Close, Gather, Wait, WriteSteps


async def asyncio_runner_given_blocking_sequences(
    blocking: NSQConsumer, runner: AsyncRunner
) -> None:
    await runner.run(blocking.read_steps())  # rejected: arg-type
    await runner.run(blocking.close_steps())  # rejected: arg-type


def blocking_runner_given_asyncio_sequences(aio: AsyncNSQConsumer, runner: BlockingRunner) -> None:
    runner.run(aio.start_steps(10))  # rejected: arg-type
    runner.run(aio.consume_steps())  # rejected: arg-type


def waiting_sequences_run_now(aio: AsyncNSQConsumer, runner: AsyncRunner) -> None:
    aio.run_now(aio.read_steps())  # rejected: arg-type
    aio.run_now(aio.close_steps())  # rejected: arg-type
    runner.run_now(aio.consume_steps())  # rejected: arg-type


def write_sequence_that_waits(conns: tuple[AsyncNSQConnection, ...]) -> WriteSteps[None]:
    yield Wait(1.0, conns)  # rejected: misc
    yield Close(conns)  # rejected: misc


def consumer_sequence_gathered(blocking: NSQConsumer) -> Gather[object]:
    return Gather((blocking.read_steps(),))  # rejected: arg-type


async def accepted(blocking: NSQConsumer, aio: AsyncNSQConsumer, lookupd: LookupdClient) -> None:
    BlockingRunner().run(blocking.read_steps())
    blocking.run_now(blocking.touch_held_steps())
    await AsyncRunner().run(aio.read_steps())
    aio.run_now(aio.set_max_in_flight_steps(5))
    run(lookupd.lookup_steps("t"))
    await arun(lookupd.lookup_steps("t"))
