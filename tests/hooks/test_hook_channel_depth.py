"""``NSQHook.channel_depth`` creates a missing durable channel, as its docstring says:
what is published after the first check waits on the channel for the next one (without
it, a topic that has other channels would give them everything)."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_nsq.hooks.nsq import NSQHook


def _depth(style: str, topic: str, channel: str):
    hook = NSQHook()
    if style == "blocking":
        return hook.channel_depth(topic, channel)
    return asyncio.run(hook.achannel_depth(topic, channel))


@pytest.mark.parametrize("style", ["blocking", "asyncio"])
def test_the_first_check_creates_the_channel_so_later_messages_wait_on_it(
    style, nsqd, nsq_default, nsq_topic
):
    nsqd.create_channel(nsq_topic, "other")  # another consumer's channel
    nsqd.http_publish(nsq_topic, b"before")  # goes to "other" only

    first = _depth(style, nsq_topic, "sensor")
    assert (first.exists, first.ready) == (False, 0)
    assert nsqd.channel_stats(nsq_topic, "sensor") is not None  # created by the check

    nsqd.http_publish(nsq_topic, b"after")
    nsqd.wait_for(lambda: _depth(style, nsq_topic, "sensor").ready == 1)
    assert nsqd.channel_stats(nsq_topic, "other")["depth"] == 2


def test_an_ephemeral_channel_is_never_created(nsqd, nsq_default, nsq_topic):
    nsqd.create_topic(nsq_topic)
    depth = NSQHook().channel_depth(nsq_topic, "sensor#ephemeral")
    assert (depth.exists, depth.ready) == (False, 0)
    assert nsqd.channel_stats(nsq_topic, "sensor#ephemeral") is None
