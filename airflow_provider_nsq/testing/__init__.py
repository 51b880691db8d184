"""NSQ for tests, with no NSQ server installed (see docs/testing.md).

What tests import:

- :mod:`.pytest_plugin`: the fixtures (``nsqd``, ``nsqd_factory``, ``nsqlookupd``,
  ``nsq_topology``, ``nsq_topic``, ``tls_files``), registered as the pytest plugin ``nsq``;
- :mod:`.broker`: the embedded nsqd-compatible broker (``EmbeddedNSQD``;
  ``python -m airflow_provider_nsq.testing.broker``);
- :mod:`.lookupd`: the embedded nsqlookupd (``EmbeddedNSQLookupd``;
  ``python -m airflow_provider_nsq.testing.lookupd``);
- :mod:`.topology` and :mod:`.embedded_topology`: an nsqlookupd and several nsqds;
- :mod:`.faults`: a proxy that cuts, stalls and drops traffic (``FaultProxy``);
- :mod:`.auth`: an AUTH server and authorizer for nsqd's AUTH;
- :mod:`.certificates`: a throw-away CA and certificates.

:mod:`.servers` is what those servers are built from; tests need not import it.
"""
