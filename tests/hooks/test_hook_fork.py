"""A hook used before a fork, as in a Celery worker (its pool processes, and each task's
process, are forks): the child opens connections of its own and never touches the
parent's, which go on working. Over real sockets, the parent and the child at once."""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_nsq.hooks.nsq import NSQHook
from tests.support.nsqd_contents import read

MESSAGES = 200
CHILD_TIMEOUT_S = 60.0


def _in_child(work: Callable[[], dict[str, Any]]) -> tuple[int, Callable[[], dict[str, Any]]]:
    """Fork; the child runs ``work`` and reports its result (or its error) through a
    pipe. Returns the child's PID and a call that waits (bounded) for its report."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        os.close(read_end)
        try:
            report = work()
        except BaseException as exc:
            report = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write_end, json.dumps(report).encode())
        os._exit(0)
    os.close(write_end)

    def wait() -> dict[str, Any]:
        chunks = []
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([read_end], [], [], left)[0]:
                    os.kill(pid, 9)
                    raise AssertionError(f"the child did not report within {CHILD_TIMEOUT_S:g}s")
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(read_end)
            os.waitpid(pid, 0)
        return json.loads(b"".join(chunks) or b"{}")

    return pid, wait


@pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"
)
def test_a_child_forked_after_the_hook_was_used_gets_a_working_client_of_its_own(
    nsqd, nsq_default, nsq_topic
):
    nsqd.create_channel(nsq_topic, "parent")
    nsqd.create_channel(nsq_topic, "child")
    hook = NSQHook()
    # The parent's hook holds a publishing connection and a kept subscription (a full
    # window keeps it, RDY 0, for the next window on the channel).
    hook.publish(nsq_topic, "before")
    assert [m.body for m in hook.consume(nsq_topic, "parent", max_messages=1)] == [b"before"]
    assert [m.body for m in hook.consume(nsq_topic, "child", max_messages=1)] == [b"before"]

    def child() -> dict[str, Any]:
        for n in range(MESSAGES):
            hook.publish(nsq_topic, f"child-{n}")
        taken = hook.consume(nsq_topic, "child", max_messages=5, timeout=5)
        hook.close()  # must not close (CLS) the parent's subscription
        return {"taken": len(taken)}

    _, child_report = _in_child(child)
    # Meanwhile the parent publishes over its own connection, as a worker's parent would.
    for n in range(MESSAGES):
        hook.publish(nsq_topic, f"parent-{n}")
    assert child_report() == {"taken": 5}

    # The parent's connections still work: its kept subscription reads on, its
    # publishing connection is the one it opened before the fork.
    assert hook.get_conn().connects == 1
    taken = hook.consume(nsq_topic, "parent", max_messages=2 * MESSAGES, timeout=5)
    hook.close()
    bodies = sorted(m.body.decode() for m in taken)
    expected = sorted(
        [*(f"child-{n}" for n in range(MESSAGES)), *(f"parent-{n}" for n in range(MESSAGES))]
    )
    assert bodies == expected  # every publish of both, each once
    left = read(nsqd, nsq_topic, "child", count=2 * MESSAGES, timeout=3)
    assert len(left) == 2 * MESSAGES - 5  # what the child's window did not take
