"""NSQ for tests, with no NSQ server installed (see docs/testing.md).

What tests import:

- :mod:`.pytest_plugin`: the fixtures (``nsqd``, ``nsqd_factory``, ``nsqlookupd``,
  ``nsq_topology``, ``nsq_topic``, ``tls_files``), registered as the pytest plugin ``nsq``;
  the only module of this package that imports pytest;
- :mod:`.nsqd_server`, :mod:`.lookupd_server`, :mod:`.topology`: what the fixtures give
  (``NSQDServer``, ``NSQLookupdServer``, ``NSQTopology``), for embedded or real daemons;
- :mod:`.broker`: the embedded nsqd-compatible broker (``EmbeddedNSQD``;
  ``python -m airflow_provider_nsq.testing.broker``);
- :mod:`.lookupd`: the embedded nsqlookupd (``EmbeddedNSQLookupd``;
  ``python -m airflow_provider_nsq.testing.lookupd``);
- :mod:`.embedded_topology`: an embedded nsqlookupd and several nsqds, in-process;
- :mod:`.faults`: a proxy that cuts, stalls and drops traffic (``FaultProxy``);
- :mod:`.auth`: an AUTH server and authorizer for nsqd's AUTH;
- :mod:`.certificates`: a throw-away CA and certificates;
- :mod:`.polling` (``wait_for``) and :mod:`.daemon_handle` (what the handles share).

What those servers are built from; tests need not import it: :mod:`.servers` (the HTTP
server, the embedded-daemon base, listeners, command lines) and :mod:`.wire` (the
daemons' side of the wire, without I/O: what only a server reads).
"""
