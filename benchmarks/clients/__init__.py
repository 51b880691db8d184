"""The clients ``throughput.py`` compares, one worker module each.

Every module has ``pub``, ``mpub``, ``consume`` and ``connect`` functions taking a
:class:`~clients.base.Context` and returning a result dict (see ``base.py``); a workload
a client cannot run raises :class:`~clients.base.NotApplicable`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClientInfo:
    name: str  # what --clients takes
    module: str  # under this package
    label: str  # the table's row title
    group: str  # "project", "third-party" or "reference"
    imports: tuple[str, ...] = ()  # third-party packages it needs (from the bench venv)
    airflow: bool = False  # imports Airflow: needs a private AIRFLOW_HOME
    nsqds: int = 1  # > 1: a topology, that many nsqds found through an nsqlookupd


CLIENTS: tuple[ClientInfo, ...] = (
    ClientInfo("blocking", "project_blocking", "project: blocking NSQConnection", "project"),
    ClientInfo("hook", "project_hook", "project: via NSQHook", "project", airflow=True),
    ClientInfo("asyncio", "project_async", "project: AsyncNSQConnection", "project"),
    ClientInfo(
        "operator",
        "project_operator",
        "project: NSQConsumeOperator per message",
        "project",
        airflow=True,
    ),
    ClientInfo(
        "operator-batch",
        "project_operator_batch",
        "project: NSQConsumeOperator per batch of 500",
        "project",
        airflow=True,
    ),
    ClientInfo(
        "event-trigger",
        "project_event_trigger",
        "project: NSQEventTrigger, messages to payloads",
        "project",
        airflow=True,
    ),
    ClientInfo(
        "topology",
        "project_topology",
        "project: NSQConsumer, 3 nsqds via lookupd",
        "project",
        nsqds=3,
    ),
    ClientInfo("pynsq", "pynsq_client", "pynsq (tornado)", "third-party", imports=("nsq",)),
    ClientInfo("gnsq", "gnsq_client", "gnsq (gevent)", "third-party", imports=("gnsq",)),
    ClientInfo("plain-socket", "plain_socket", "plain socket (floor)", "reference"),
    ClientInfo(
        "conn-per-msg", "conn_per_message", "new connection + IDENTIFY per call", "reference"
    ),
    ClientInfo("go", "go_bench", "Go bench_writer/bench_reader (--go-bench)", "reference"),
)

BY_NAME = {c.name: c for c in CLIENTS}
GROUPS = ("project", "third-party", "reference")
