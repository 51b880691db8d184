"""Administration of a topic or a channel over every nsqd that has it, as nsqadmin does
it: create, delete, empty, pause, unpause, with what happened on each nsqd.

Which nsqds (:class:`NSQAdmin`):

- given ones (a connection's nsqds, or the one a caller named): those, and no
  nsqlookupd is touched (an nsqd tells its lookupds itself what it deleted);
- else the producers every nsqlookupd lists for the topic, asked first. Create and
  delete then also change each nsqlookupd's registry, as nsqadmin's
  ``CreateTopicChannel`` / ``DeleteTopic`` / ``DeleteChannel`` do (nsq 1.3.0
  ``internal/clusterinfo/data.go``): the producers are listed *before* the lookupds
  forget the topic, then the lookupds, then each producer. A topic no nsqd has yet is
  created in the lookupds' registry only: each nsqd creates the channels its lookupds
  list when it first gets the topic.

Every nsqd is asked at once. One that cannot be reached, or answers an error, does not
stop the others: the result names it, and :meth:`AdminResult.check` raises
:class:`~...protocol.errors.NSQAdminError` naming it once all were done. Creating what
exists (``exists``) and deleting what is gone (``not_found``) succeed unless the caller
asks to fail. Written once as steps (:mod:`..runners.steps`); :meth:`NSQAdmin.run` and
:meth:`NSQAdmin.arun` only drive them.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...protocol.errors import NSQAdminError, NSQError, NSQValueError
from ...protocol.names import validate_channel_name, validate_topic_name
from ..runners.asyncio_runner import arun
from ..runners.blocking_runner import run
from ..runners.steps import Gather, HTTPStep
from ..settings.address import parse_address, parse_addresses
from ..settings.connection_settings import ConnectionSettings
from .lookupd_api import LookupdClient
from .nsqd_api import AdminAction, AdminOutcome, NSQDHTTPClient


@dataclass(frozen=True)
class AdminResult:
    """What one administration call did: per nsqd (its HTTP ``host:port``) and per
    nsqlookupd, the outcome (``created``, ``exists``, ``deleted``, ``emptied``,
    ``paused``, ``unpaused``, ``not_found``); ``errors``: those that could not be done,
    with why."""

    action: AdminAction
    topic: str
    channel: str | None
    nsqds: dict[str, AdminOutcome] = field(default_factory=dict)
    lookupds: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def what(self) -> str:
        """``topic T`` or ``channel T/C``."""
        if self.channel is None:
            return f"topic {self.topic!r}"
        return f"channel {self.topic!r}/{self.channel!r}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe (for XCom): ``action``, ``topic``, ``channel``, ``nsqds``,
        ``lookupds``, ``errors``."""
        return {
            "action": f"{self.action}_{'topic' if self.channel is None else 'channel'}",
            "topic": self.topic,
            "channel": self.channel,
            "nsqds": dict(self.nsqds),
            "lookupds": dict(self.lookupds),
            "errors": dict(self.errors),
        }

    def check(self, *, fail_if_exists: bool = False, fail_if_not_exists: bool = False) -> None:
        """Raise :class:`NSQAdminError` when something could not be done (naming each
        nsqd or lookupd and why), when ``fail_if_exists`` and it existed on an nsqd, or
        when ``fail_if_not_exists`` and an nsqd did not have it (or no nsqd has the
        topic at all)."""
        problems = [f"{address} ({why})" for address, why in self.errors.items()]
        existed = sorted(a for a, outcome in self.nsqds.items() if outcome == "exists")
        if fail_if_exists and existed:
            problems.append(f"it exists already on {', '.join(existed)}")
        missing = sorted(a for a, outcome in self.nsqds.items() if outcome == "not_found")
        if fail_if_not_exists and missing:
            problems.append(f"it does not exist on {', '.join(missing)}")
        if fail_if_not_exists and not self.nsqds and not self.errors:
            problems.append(f"no nsqd has topic {self.topic!r}")
        if problems:
            raise NSQAdminError(
                f"{self.action} {self.what}: done where it could be, but: " + "; ".join(problems),
                self,
            )


class NSQAdmin:
    """Administration over a set of nsqds (see the module's docstring).

    :param nsqds: the nsqds to act on; None: those ``lookupd`` lists for the topic.
    :param lookupd: the nsqlookupds (their registry changes on create and delete when
        ``nsqds`` is None).
    :param timeout: seconds each nsqd a lookup finds may take per request.
    """

    def __init__(
        self,
        nsqds: Sequence[NSQDHTTPClient] | None = None,
        lookupd: LookupdClient | None = None,
        *,
        timeout: float = 5.0,
    ) -> None:
        if nsqds is None and lookupd is None:
            raise ValueError("NSQAdmin needs nsqds to act on, or an nsqlookupd to find them")
        self.nsqds = None if nsqds is None else list(nsqds)
        self.lookupd = lookupd if nsqds is None else None
        self.timeout = timeout

    @classmethod
    def from_settings(
        cls, settings: ConnectionSettings, nsqd: str | Sequence[str] | None = None
    ) -> NSQAdmin:
        """The administration a connection's settings describe: the nsqds named in
        ``nsqd`` (``host:http_port``, or several: a list or a comma-separated string);
        else every nsqd its nsqlookupds list for the topic; else its own nsqds, each on
        the connection's ``http_port`` (``https_port`` with TLS on). Raises
        :class:`NSQValueError` when that names no HTTP API."""
        config = settings.client
        timeout = config.connect_timeout
        if nsqd is not None:
            named = parse_addresses(nsqd, "nsqd")
            if not named:
                raise NSQValueError("nsqd names no nsqd: give host:http_port")
            apis = []
            for address in named:
                host, port = parse_address(address, None, "nsqd (host:http_port)")
                https = port if settings.https_port else None
                api = NSQDHTTPClient.from_config(
                    config, http_port=port, https_port=https, host=host
                )
                assert api is not None  # a port was given
                apis.append(api)
            return cls(apis, timeout=timeout)
        if settings.lookupd_http_addresses:
            lookupd = LookupdClient(settings.lookupd_http_addresses, timeout=timeout)
            return cls(lookupd=lookupd, timeout=timeout)
        return cls(_connection_apis(settings), timeout=timeout)

    def __repr__(self) -> str:
        where = self.lookupd if self.nsqds is None else ", ".join(n.address for n in self.nsqds)
        return f"<NSQAdmin {where}>"

    def run(self, action: AdminAction, topic: str, channel: str | None = None) -> AdminResult:
        """Do ``action`` on ``topic`` (or its ``channel``) everywhere; what happened
        (call :meth:`AdminResult.check` to raise on what could not be done)."""
        return run(self.steps(action, topic, channel))

    async def arun(
        self, action: AdminAction, topic: str, channel: str | None = None
    ) -> AdminResult:
        """:meth:`run` for asyncio (no thread; every nsqd at once)."""
        return await arun(self.steps(action, topic, channel))

    def steps(
        self, action: AdminAction, topic: str, channel: str | None = None
    ) -> Generator[HTTPStep, Any, AdminResult]:
        """:meth:`run` as steps."""
        validate_topic_name(topic)
        if channel is not None:
            validate_channel_name(channel)
        result = AdminResult(action, topic, channel)
        nsqds = self.nsqds
        if nsqds is None:
            assert self.lookupd is not None
            producers = yield from self.lookupd.lookup_steps(topic)  # before lookupds forget it
            nsqds = [
                NSQDHTTPClient(p.broadcast_address, p.http_port, timeout=self.timeout)
                for p in producers
            ]
            if action in ("create", "delete"):
                registry = yield from self.lookupd.registry_steps(action, topic, channel)
                for address, outcome in registry.items():
                    if isinstance(outcome, NSQError):
                        result.errors[f"nsqlookupd {address}"] = str(outcome)
                    else:
                        result.lookupds[address] = outcome
        nsqds = list({api.address: api for api in nsqds}.values())  # each nsqd once
        outcomes = yield Gather(tuple(api.admin_steps(action, topic, channel) for api in nsqds))
        for api, outcome in zip(nsqds, outcomes, strict=True):
            if isinstance(outcome, NSQError):
                result.errors[f"nsqd {api.address}"] = str(outcome)
            else:
                result.nsqds[api.address] = outcome
        return result


def _connection_apis(settings: ConnectionSettings) -> list[NSQDHTTPClient]:
    """The HTTP API of each nsqd of a connection without nsqlookupd: its host, the
    connection's ``http_port`` (``https_port`` with TLS). Two nsqds on one host cannot
    both be there: refused, rather than acting twice on one and never on the other."""
    apis: dict[str, NSQDHTTPClient] = {}
    for address in settings.nsqds:
        host, _ = parse_address(address, None, "nsqd TCP address")
        api = NSQDHTTPClient.from_config(
            settings.client, http_port=settings.http_port, https_port=settings.https_port, host=host
        )
        if api is None:
            raise NSQValueError(
                "the connection gives no http_port (nsqd's HTTP API, 4151 by default) and no "
                "lookupd_http_addresses: administration needs one of them, or nsqd="
                "'host:http_port'"
            )
        if api.address in apis:
            raise NSQValueError(
                f"the connection's nsqds {', '.join(settings.nsqds)} share host {host!r}: "
                f"their HTTP APIs cannot all be on http_port {api.port}; give the "
                "connection lookupd_http_addresses, or name each nsqd ('host:http_port')"
            )
        apis[api.address] = api
    return list(apis.values())
