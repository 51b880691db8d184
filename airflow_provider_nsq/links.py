"""Links from a task to nsqadmin (NSQ's web console), shown as buttons on the task
instance in the Airflow UI: the page of the topic a publish operator wrote to, and the
page of the topic and channel a sensor, or the watcher that started an event-driven
DAG, read from.

They need the connection's ``nsqadmin_url`` extra (nsqadmin's base URL); without it
the link is empty and the UI shows no button.

Airflow 3 computes an operator's links when its task ends, in the worker, and keeps the
URLs in XCom (``_link_<class name>``), which the API server hands to the UI; so the
links see the task's rendered topic and channel and read the connection there. A link
that cannot be made (no connection, no extra) is empty, never an error of the task.

Tasks of an event-driven DAG are not NSQ operators; :func:`link_to_nsqadmin` adds the
channel link to any of them: it points at the topic and channel of the DAG's NSQ
watcher (``MessageQueueTrigger(scheme="nsq", ...)`` or ``NSQEventTrigger``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, TypeVar
from urllib.parse import quote

from airflow.providers.common.compat.sdk import BaseOperatorLink

from .hooks.admin import NSQAdminHook
from .templated import is_templated
from .triggers.nsq_event import NSQEventTrigger

__all__ = ["NSQAdminChannelLink", "NSQAdminTopicLink", "link_to_nsqadmin"]

log = logging.getLogger(__name__)

_EVENT_TRIGGER = f"{NSQEventTrigger.__module__}.{NSQEventTrigger.__qualname__}"

T = TypeVar("T")


def nsqadmin_page(base_url: str, topic: str, channel: str | None = None) -> str:
    """nsqadmin's page of ``topic`` (``/topics/<topic>``), or of ``channel`` on it
    (``/topics/<topic>/<channel>``), under ``base_url`` (which may have a path, as with
    nsqadmin's ``--base-path``)."""
    url = f"{base_url.rstrip('/')}/topics/{quote(topic, safe='')}"
    return url if channel is None else f"{url}/{quote(channel, safe='')}"


def _nsqadmin_url(nsq_conn_id: str) -> str | None:
    return NSQAdminHook(nsq_conn_id=nsq_conn_id).nsqadmin_url


def _link(nsq_conn_id: object, topic: object, channel: object = None) -> str:
    """The page, or "" when it cannot be made (logged, never raised: this runs as the
    task ends)."""
    values = (nsq_conn_id, topic) if channel is None else (nsq_conn_id, topic, channel)
    if not all(isinstance(v, str) and v and not is_templated(v) for v in values):
        return ""  # the task ended before its templates were rendered
    try:
        base = _nsqadmin_url(str(nsq_conn_id))
    except Exception as exc:
        log.warning("No nsqadmin link: connection %r could not be read (%s)", nsq_conn_id, exc)
        return ""
    if not base:
        return ""
    return nsqadmin_page(base, str(topic), None if channel is None else str(channel))


def watched_channels(dag: Any) -> Iterator[tuple[str, str, str]]:
    """``(nsq_conn_id, topic, channel)`` of each NSQ watcher of the assets ``dag`` is
    scheduled on (through their triggers' ``serialize()``)."""
    condition = getattr(getattr(dag, "timetable", None), "asset_condition", None)
    for asset in _assets(condition):
        for watcher in asset.watchers or ():
            trigger = getattr(watcher, "trigger", None)
            try:
                classpath, kwargs = trigger.serialize()  # type: ignore[union-attr]
            except Exception:
                continue  # not a trigger instance, or not ours
            if classpath == _EVENT_TRIGGER:
                yield (
                    kwargs.get("nsq_conn_id") or NSQAdminHook.default_conn_name,
                    kwargs["topic"],
                    kwargs["channel"],
                )


def _assets(condition: Any) -> Iterator[Any]:
    """The assets of a schedule's condition (an asset, or AssetAll/AssetAny of them)."""
    if condition is None:
        return
    if hasattr(condition, "watchers"):
        yield condition
    for part in getattr(condition, "objects", None) or ():
        yield from _assets(part)


class NSQAdminTopicLink(BaseOperatorLink):
    """nsqadmin's page of the operator's ``topic`` (publish operators)."""

    name = "nsqadmin: topic"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return _link(getattr(operator, "nsq_conn_id", None), getattr(operator, "topic", None))


class NSQAdminChannelLink(BaseOperatorLink):
    """nsqadmin's page of a topic's channel: the operator's own ``topic`` and ``channel``
    (the sensor), else those of the DAG's NSQ watcher (event-driven DAGs)."""

    name = "nsqadmin: channel"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        channel = getattr(operator, "channel", None)
        if channel is not None:
            return _link(getattr(operator, "nsq_conn_id", None), operator.topic, channel)
        try:
            watched = next(watched_channels(getattr(operator, "dag", None)), None)
        except Exception as exc:
            log.warning("No nsqadmin link: the DAG's watchers could not be read (%s)", exc)
            return ""
        return "" if watched is None else _link(*watched)


def link_to_nsqadmin(task: T) -> T:
    """Give ``task`` (an operator, or the output of a ``@task`` call) the link to the
    nsqadmin page of the channel its DAG's NSQ watcher reads; returns ``task``."""
    operator: Any = getattr(task, "operator", task)  # an XComArg's operator
    links = tuple(operator.operator_extra_links)
    if not any(isinstance(link, NSQAdminChannelLink) for link in links):
        operator.operator_extra_links = (*links, NSQAdminChannelLink())
    return task
