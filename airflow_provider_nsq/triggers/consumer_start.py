"""The event trigger's consumer, started and held (a
:class:`~airflow_provider_nsq.client.holding.holder.AsyncMessageHolder`): over every
nsqd of the connection, trying again while none can be reached (a triggerer that starts
before nsqd must not fail its assets), and saying where it reads from once started."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..client import AsyncNSQConsumer
from ..client.backoff import reconnect_backoff
from ..client.consumer import UNREACHABLE
from ..client.holding.asyncio_dead_letters import AsyncDeadLetterPublisher
from ..client.holding.holder import AsyncMessageHolder
from ..protocol.errors import NSQTLSError

log = logging.getLogger(__name__)


def _no_dead_letters() -> AsyncDeadLetterPublisher | None:
    return None


async def start_holder(
    options: dict[str, Any],
    topic: str,
    channel: str,
    max_in_flight: int,
    lookupd_poll_interval: float,
    dead_letters: Callable[[], AsyncDeadLetterPublisher | None] = _no_dead_letters,
) -> AsyncMessageHolder:
    """A started :class:`AsyncNSQConsumer` with ``options`` (the connection's, for a
    trigger: :meth:`~airflow_provider_nsq.hooks.nsq.NSQHook.held_consumer_options`) over every nsqd of the
    connection (found through its nsqlookupds when it names any, else its nsqd list:
    ``host:port``, then ``nsqd_tcp_addresses``), held by an
    :class:`~airflow_provider_nsq.client.holding.holder.AsyncMessageHolder` that
    TOUCHes what it holds and gives messages up to ``dead_letters()`` (a publisher of
    its own for each try).

    While no nsqd (or no nsqlookupd) can be reached it keeps trying, with the consumer's
    backoff: a triggerer that starts before nsqd must not fail its assets. What retrying
    cannot fix (nsqd refused the subscription or AUTH, a bad setting) is raised. Once
    started, the consumer itself reconnects dropped nsqds and re-asks nsqlookupd every
    ``lookupd_poll_interval`` seconds.
    """
    backoff = reconnect_backoff()
    while True:
        consumer = AsyncNSQConsumer(
            topic, channel, lookupd_poll_interval=lookupd_poll_interval, **options
        )
        holder = AsyncMessageHolder(consumer, dead_letters=dead_letters())
        try:
            await holder.start(max_in_flight)  # closes what it opened if it fails
        except NSQTLSError:
            raise  # every nsqd refused the TLS handshake: retrying will not fix it
        except UNREACHABLE as exc:
            wait = backoff.next()
            log.warning("Cannot read %s/%s yet (%s); retrying in %gs", topic, channel, exc, wait)
            await asyncio.sleep(wait)
            continue
        break
    report_start(consumer, max_in_flight, options["lookupd_http_addresses"])
    return holder


def report_start(consumer: AsyncNSQConsumer, max_in_flight: int, lookupds: list[str]) -> None:
    """Log where a started consumer reads from, and warn when the nsqds cannot hold
    ``max_in_flight``."""
    topic, channel = consumer.topic, consumer.channel
    connections = consumer.connections
    capacity = sum(c.max_rdy_count for c in connections.values())
    if connections and max_in_flight > capacity:
        # The consumer never sends an nsqd a RDY above its limit (nsqd would drop the
        # connection): fewer messages are in flight than asked for.
        log.warning(
            "max_in_flight=%s exceeds nsqd's max RDY count (%s over %s nsqd(s), "
            "--max-rdy-count): at most %s messages of %s/%s are in flight at once",
            max_in_flight,
            capacity,
            len(connections),
            capacity,
            topic,
            channel,
        )
    log.info(
        "Reading %s/%s from %s (max in flight %s): %s",
        topic,
        channel,
        f"nsqlookupd {', '.join(lookupds)}" if lookupds else "the connection's nsqd(s)",
        max_in_flight,
        ", ".join(connections) or "no nsqd has the topic yet",
    )
