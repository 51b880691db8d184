"""NSQ for tests, with no NSQ server installed (see docs/testing.md).

What tests import:

- :mod:`.pytest_plugin`: the fixtures (``nsqd``, ``nsqd_factory``, ``nsqlookupd``,
  ``nsq_topology``, ``nsq_topic``, ``tls_files``), loaded by a ``conftest.py`` that asks
  (``pytest_plugins = ["airflow_provider_nsq.testing.pytest_plugin"]``); the only module
  of this package that imports pytest;
- :mod:`.handles`: what the ``nsqd`` and ``nsqlookupd`` fixtures give (``NSQDServer``,
  ``NSQLookupdServer``, and ``DaemonHandle``, what they share), for embedded or real
  daemons;
- :mod:`.topologies`: a lookupd and several nsqds, ``NSQTopology`` (what the
  ``nsq_topology`` fixture gives) and ``EmbeddedTopology`` (in-process, without pytest);
- :mod:`.broker`: the embedded nsqd-compatible broker (``EmbeddedNSQD``;
  ``python -m airflow_provider_nsq.testing.broker``);
- :mod:`.lookupd`: the embedded nsqlookupd (``EmbeddedNSQLookupd``;
  ``python -m airflow_provider_nsq.testing.lookupd``);
- :mod:`.faults`: a proxy that cuts, stalls and drops traffic (``FaultProxy``);
- :mod:`.auth_server`: an AUTH server and a static authorizer for nsqd's AUTH;
- :mod:`.certificates`: a throw-away CA and certificates;
- :mod:`.polling`: ``wait_for`` (and ``async_wait_for``), the one bounded wait.

What those servers are built from; tests need not import it: :mod:`.servers` (the HTTP
server, the embedded-daemon base, listeners, command lines) and :mod:`.wire` (the
daemons' side of the wire, without I/O: what only a server reads).
"""
