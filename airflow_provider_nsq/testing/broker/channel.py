"""A channel: its queue, in-flight messages, deferred messages and consumers.

nsqd behaviour kept here (docs/nsqd-facts.md section 6):

- RDY is a window: a consumer gets messages while its in-flight count is below its RDY;
  messages are spread over the ready consumers in turn.
- A message that is not FINished within the consumer's msg_timeout goes back to the
  queue and is delivered again with attempts + 1. A disconnect does **not** requeue: the
  message waits for its timeout, as in nsqd (``inflight_after_disconnect``).
- ``REQ id 0`` requeues at once; ``REQ id N`` defers N ms. TOUCH restarts the full
  msg_timeout, capped at max_msg_timeout since delivery.

Timers: one heap per channel holding in-flight deadlines and deferral ends, and one
``loop.call_at`` handle for its earliest entry. They fire at the nominal time or a little
later, never earlier (nsqd's scanner adds up to 100 ms; tests must not rely on that).
Entries made stale by FIN/REQ/TOUCH stay in the heap until popped or compacted.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from .message import DEFERRED, DONE, IN_FLIGHT, QUEUED, BrokerMessage, Item, timer_tokens
from .options import BrokerOptions


class QueueFull(Exception):
    """A publish would take a queue past mem_queue_size (the broker refuses it)."""


class Consumer(Protocol):
    """What a channel needs from a subscribed client session."""

    @property
    def pump_msg_timeout(self) -> int: ...

    def can_take(self) -> bool: ...

    def deliver(
        self,
        item: Item,
        now: float,
        in_flight: dict[bytes, BrokerMessage],
        heap: list[tuple[float, int, BrokerMessage]],
        push: Callable[..., None],
        timeout: float,
    ) -> bool: ...

    def message_timed_out(self) -> None: ...

    def channel_emptied(self) -> None: ...

    def close_connection(self) -> None: ...

    def stats(self) -> dict[str, Any]: ...


class Channel:
    """One channel of topic ``topic_name``; ``on_last_consumer_gone`` is called when an
    ``#ephemeral`` channel loses its last consumer (its topic deletes it)."""

    def __init__(
        self,
        topic_name: str,
        name: str,
        options: BrokerOptions,
        loop: asyncio.AbstractEventLoop,
        on_last_consumer_gone: Callable[[], object],
    ) -> None:
        self.topic_name = topic_name
        self.name = name
        self.options = options
        self.ephemeral = name.endswith("#ephemeral")
        self.loop = loop
        self._on_last_consumer_gone = on_last_consumer_gone
        self.queue: deque[Item] = deque()
        self.in_flight: dict[bytes, BrokerMessage] = {}
        self.deferred_count = 0
        self.clients: list[Consumer] = []
        self.paused = False
        self.deleted = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self._heap: list[tuple[float, int, BrokerMessage]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = math.inf

    # -- capacity (mem_queue_size, see docs/testing.md) ------------------------------

    def room(self) -> int:
        """How many more messages this channel accepts from publishers."""
        limit = self.options.mem_queue_size
        return limit - len(self.queue) - self.deferred_count

    # -- putting messages in ----------------------------------------------------------

    def put_many(self, items: list[Item], now: float, fresh: bool = False) -> None:
        """Add published messages (already admitted against mem_queue_size).

        ``fresh``: all are never-delivered tuples, the common case of a PUB/MPUB.
        """
        if fresh:
            self.queue.extend(items)
        else:
            for item in items:
                if type(item) is tuple:
                    self.queue.append(item)
                else:
                    msg = item.copy()  # type: ignore[union-attr]
                    self._defer(msg, now + msg.defer_ms / 1000.0)
        self.message_count += len(items)
        self.dispatch()
        self._arm()

    def _defer(self, msg: BrokerMessage, when: float) -> None:
        msg.state = DEFERRED
        msg.client = None
        token = next(timer_tokens)
        msg.token = token
        self.deferred_count += 1
        heapq.heappush(self._heap, (when, token, msg))

    # -- consumers -------------------------------------------------------------------

    def add_client(self, client: Consumer) -> None:
        limit = self.options.max_channel_consumers
        if limit and len(self.clients) >= limit:
            raise ValueError(
                f"consumers for {self.topic_name}:{self.name} exceeds limit of {limit}"
            )
        self.clients.append(client)

    def remove_client(self, client: Consumer) -> None:
        try:
            self.clients.remove(client)
        except ValueError:
            return
        # docs/nsqd-facts.md section 5: an #ephemeral channel goes with
        # its last consumer.
        if self.ephemeral and not self.clients and not self.deleted:
            self._on_last_consumer_gone()

    def dispatch(self) -> None:
        """Hand queued messages to ready consumers, in turn, within their RDY windows."""
        queue = self.queue
        if not queue or self.paused or not self.clients:
            return
        ready = [c for c in self.clients if c.can_take()]
        if not ready:
            return
        now = self.loop.time()
        in_flight = self.in_flight
        heap = self._heap
        push = heapq.heappush
        popleft = queue.popleft
        if len(ready) == 1:
            client = ready[0]
            timeout = client.pump_msg_timeout / 1000.0
            while queue:
                msg = popleft()
                if not client.deliver(msg, now, in_flight, heap, push, timeout):
                    break
        else:
            while queue and ready:
                still = []
                for client in ready:
                    if not queue:
                        break
                    msg = popleft()
                    timeout = client.pump_msg_timeout / 1000.0
                    if client.deliver(msg, now, in_flight, heap, push, timeout):
                        still.append(client)
                ready = still
        self._arm()

    # -- FIN / REQ / TOUCH ------------------------------------------------------------

    def _pop_in_flight(self, client: Consumer, msg_id: bytes) -> BrokerMessage:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise LookupError("ID not in flight")
        if msg.client is not client:
            raise LookupError("client does not own message")
        del self.in_flight[msg_id]
        return msg

    def finish(self, client: Consumer, msg_id: bytes) -> None:
        msg = self._pop_in_flight(client, msg_id)
        msg.state = DONE
        msg.token = 0
        msg.client = None

    def requeue(self, client: Consumer, msg_id: bytes, delay_ms: int) -> None:
        msg = self._pop_in_flight(client, msg_id)
        self.requeue_count += 1
        if delay_ms <= 0:
            msg.state = QUEUED
            msg.token = 0
            msg.client = None
            self.queue.append(msg)
        else:
            self._defer(msg, self.loop.time() + delay_ms / 1000.0)
            self._arm()

    def touch(self, client: Consumer, msg_id: bytes, msg_timeout_ms: int) -> None:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise LookupError("ID not in flight")
        if msg.client is not client:
            raise LookupError("client does not own message")
        now = self.loop.time()
        deadline = now + msg_timeout_ms / 1000.0
        # docs/nsqd-facts.md section 6: the total time since delivery
        # stays within max-msg-timeout.
        latest = msg.delivered_at + self.options.max_msg_timeout / 1000.0
        deadline = min(deadline, latest)
        token = next(timer_tokens)
        msg.token = token
        heapq.heappush(self._heap, (deadline, token, msg))
        self._arm()

    # -- timers ------------------------------------------------------------------------

    def _arm(self) -> None:
        heap = self._heap
        if not heap:
            return
        when = heap[0][0]
        if when < self._timer_when:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_when = when
            self._timer = self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_when = math.inf
        if self.deleted:
            return
        now = self.loop.time()
        heap = self._heap
        queue = self.queue
        pop = heapq.heappop
        while heap and heap[0][0] <= now:
            _, token, msg = pop(heap)
            if msg.token != token:
                continue  # finished, requeued or touched since
            msg.token = 0
            if msg.state == IN_FLIGHT:
                # msg_timeout ran out: back to the queue, attempts + 1 on redelivery.
                del self.in_flight[msg.id]
                owner = msg.client
                msg.client = None
                self.timeout_count += 1
                if owner is not None:
                    owner.message_timed_out()  # type: ignore[attr-defined]
            elif msg.state == DEFERRED:
                self.deferred_count -= 1
            else:
                continue
            msg.state = QUEUED
            queue.append(msg)
        self.dispatch()
        self._arm()

    def compact(self) -> None:
        # FINished messages leave stale heap entries until their deadline; keep the heap
        # proportional to the live entries so memory stays bounded at high rates.
        heap = self._heap
        live = len(self.in_flight) + self.deferred_count
        if len(heap) > 4096 and len(heap) > 4 * live:
            self._heap = [e for e in heap if e[2].token == e[1]]
            heapq.heapify(self._heap)

    # -- admin (HTTP API) -----------------------------------------------------------

    def empty(self) -> None:
        """Drop queued, deferred and in-flight messages (nsqd's /channel/empty)."""
        for msg in self.in_flight.values():
            msg.state = DONE
            msg.token = 0
            msg.client = None
        for _, _, msg in self._heap:
            msg.token = 0
        self.queue.clear()
        self.in_flight.clear()
        self._heap.clear()
        self.deferred_count = 0
        for client in self.clients:
            client.channel_emptied()

    def close(self) -> None:
        """Delete: drop everything and close the consumers' connections, as nsqd does."""
        self.deleted = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.empty()
        for client in list(self.clients):
            client.close_connection()
        self.clients.clear()

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if not paused:
            self.dispatch()

    def stats(self, include_clients: bool = True) -> dict[str, Any]:
        return {
            "channel_name": self.name,
            "depth": len(self.queue),
            "backend_depth": 0,
            "in_flight_count": len(self.in_flight),
            "deferred_count": self.deferred_count,
            "message_count": self.message_count,
            "requeue_count": self.requeue_count,
            "timeout_count": self.timeout_count,
            "client_count": len(self.clients),
            "clients": [c.stats() for c in self.clients] if include_clients else None,
            "paused": self.paused,
            "e2e_processing_latency": {"count": 0, "percentiles": None},
        }
