"""How soon what a dead triggerer held comes back: the msg_timeout a trigger asks nsqd for.

nsqd does not requeue a client's in-flight messages when its connection closes: they
come back when their msg_timeout expires (nsqd's ``--msg-timeout``, 60 s by default),
whatever Airflow does meanwhile. A triggerer that dies holding a batch (the event
trigger collecting it, or waiting for its asset event to be stored; a deferred sensor
peeking over TCP) would make every other triggerer wait that long for it, though Airflow
hands the dead one's triggers over after ``[triggerer] triggerer_health_check_threshold``
(30 s by default, often set lower).

So a trigger asks nsqd, in IDENTIFY, for a short msg_timeout of its own connections
(:data:`TRIGGER_MSG_TIMEOUT_MS`) and keeps what it holds alive with TOUCH, through the
consumer's one TOUCH policy (``touch_held()``: a third of msg_timeout after delivery or
the last TOUCH). The held batch of a dead triggerer is back on the channel at most that
long after the kill, by the time Airflow has moved the triggers.

A connection that sets ``msg_timeout_ms`` keeps its own value (0: nsqd's
``--msg-timeout``): the trigger then fails over no sooner than that.
``NSQConsumeOperator`` asks for the same, for a task whose worker dies.
"""

from __future__ import annotations

from typing import Any

from ..hooks.nsq import NSQHook

#: The msg_timeout (ms) a trigger asks for when the connection sets none. 10 s: the held
#: batch of a dead triggerer is back within 10 s of the kill, about when Airflow (a 10 s
#: health threshold) has moved its triggers to another triggerer. Not shorter: a TOUCH
#: is due every third of it (3.3 s), leaving two thirds (6.7 s) for the TOUCH to get out
#: of a triggerer whose event loop is busy with other triggers before nsqd redelivers
#: (a duplicate); nsqd's own floor is 1 s.
TRIGGER_MSG_TIMEOUT_MS = 10_000


def trigger_consumer_options(hook: NSQHook) -> dict[str, Any]:
    """The consumer's keyword arguments for a trigger: the connection's
    (:meth:`NSQHook.consumer_options`, read its settings first), with msg_timeout
    :data:`TRIGGER_MSG_TIMEOUT_MS` unless the connection sets one."""
    options = hook.consumer_options()
    config = options["config"]
    if config.msg_timeout_ms is None:
        options["config"] = config.replace(msg_timeout_ms=TRIGGER_MSG_TIMEOUT_MS)
    return options
