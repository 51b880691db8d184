"""NSQ topics as assets (the ``nsq`` URI scheme Airflow checks through the provider info,
``nsq_asset``, ``asset_outlet="host:port"``) and their OpenLineage datasets."""

from __future__ import annotations

import warnings

import pytest

from airflow_provider_nsq.assets import asset_uri, create_asset, nsq_asset
from airflow_provider_nsq.operators.nsq import NSQMultiPublishOperator, NSQPublishOperator
from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.sensors.nsq import NSQSensor


@pytest.fixture
def lookupd_conn(monkeypatch) -> str:
    uri = "nsq://nsqd-1:4150?lookupd_http_addresses=http%3A%2F%2FLookupD-1%3A4161%2F%2Clookupd-2"
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_CLUSTER", uri)
    return "nsq_cluster"


@pytest.fixture
def nsqd_conn(monkeypatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_SINGLE", "nsq://nsqd.example.com:4155")
    return "nsq_single"


def test_the_scheme_is_registered_with_airflow():
    from airflow_provider_nsq import assets

    try:  # Airflow >= 3.2: the task SDK's own manager
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime as Manager
    except ImportError:
        from airflow.providers_manager import ProvidersManager as Manager

    manager = Manager()
    assert manager.asset_uri_handlers["nsq"] is assets.sanitize_uri
    assert manager.asset_factories["nsq"] is assets.create_asset
    assert manager.asset_to_openlineage_converters["nsq"] is assets.convert_asset_to_openlineage


def test_airflow_normalises_nsq_asset_uris_with_the_providers_handler():
    from airflow.sdk import Asset

    assert Asset("nsq://NSQD.example.com:4150/orders").uri == "nsq://nsqd.example.com:4150/orders"
    assert Asset("nsq://[::1]:4161/orders").uri == "nsq://[::1]:4161/orders"


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("nsq://nsqd/orders", "host:port"),
        ("nsq://nsqd:http/orders", "host:port"),
        ("nsq://nsqd:4150", "topic name"),
        ("nsq://nsqd:4150/a/b", "topic name"),
        ("nsq://nsqd:4150/orders?channel=etl", "channel belongs to the watcher"),
    ],
)
def test_a_bad_nsq_asset_uri_fails_when_declared_with_the_reason(uri, reason):
    from airflow.sdk import Asset

    with pytest.raises(ValueError, match=reason):
        Asset(uri)


def test_user_info_never_stays_in_an_nsq_asset_uri():
    from airflow.sdk import Asset

    # Airflow 3.0 drops it itself (with a warning); 3.3 leaves it to the normaliser.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            uri = Asset("nsq://user@nsqd:4150/orders").uri
        except ValueError as exc:
            assert "user info" in str(exc)
            return
    assert uri == "nsq://nsqd:4150/orders"
    assert any("auth info" in str(w.message) for w in caught)


def test_an_asset_with_an_address_reads_no_connection(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NSQ_DEFAULT", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing deprecated, nothing read
        asset = nsq_asset("orders", address="NSQD.example.com:4155", name="orders", group="nsq")
    assert asset.uri == "nsq://nsqd.example.com:4155/orders"
    assert (asset.name, asset.group) == ("orders", "nsq")
    assert create_asset(authority="nsqd.example.com:4155", topic="orders") == nsq_asset(
        "orders", address="nsqd.example.com:4155"
    )


def test_an_asset_needs_the_clusters_address():
    with pytest.raises(TypeError, match="address"):
        nsq_asset("orders")  # type: ignore[call-arg]


def test_asset_outlet_declares_the_topics_asset(nsqd_conn):
    op = NSQPublishOperator(
        task_id="pub",
        topic="orders",
        message="x",
        nsq_conn_id="nsq_gone",
        asset_outlet="nsqd.example.com:4155",
    )
    assert [a.uri for a in op.outlets] == [asset_uri("nsqd.example.com:4155", "orders")]
    plain = NSQMultiPublishOperator(
        task_id="mpub", topic="orders", messages=["a"], nsq_conn_id=nsqd_conn
    )
    assert plain.outlets == []


def test_asset_outlet_is_the_address_never_read_from_the_connection(nsqd_conn):
    with pytest.raises(NSQValueError, match=r'asset_outlet="host:port"') as raised:
        NSQPublishOperator(
            task_id="pub", topic="orders", message="x", nsq_conn_id=nsqd_conn, asset_outlet=True
        )
    assert "never read from the connection" in str(raised.value)


def test_an_asset_outlet_address_needs_a_literal_topic():
    with pytest.raises(NSQValueError, match="asset_outlet='nsqd:4150' needs a literal topic"):
        NSQPublishOperator(
            task_id="pub", message="x", topic="{{ params.topic }}", asset_outlet="nsqd:4150"
        )


# -- OpenLineage (the openlineage extra) -----------------------------------------------


@pytest.fixture
def openlineage():
    return pytest.importorskip(
        "airflow.providers.openlineage",
        reason="needs apache-airflow-providers-openlineage (the openlineage extra)",
    )


def test_publish_operators_name_their_topic_as_an_output_dataset(openlineage, lookupd_conn):
    op = NSQPublishOperator(task_id="pub", topic="orders", message="x", nsq_conn_id=lookupd_conn)
    lineage = op.get_openlineage_facets_on_complete(None)
    assert lineage.inputs == []
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("nsq://lookupd-1:4161", "orders")]


def test_the_sensor_names_its_topic_as_an_input_dataset(openlineage, nsqd_conn):
    sensor = NSQSensor(task_id="wait", topic="orders", channel="etl", nsq_conn_id=nsqd_conn)
    lineage = sensor.get_openlineage_facets_on_complete(None)
    assert lineage.outputs == []
    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        ("nsq://nsqd.example.com:4155", "orders")
    ]


def test_an_nsq_asset_is_the_same_dataset_in_openlineage(openlineage, lookupd_conn):
    """What the OpenLineage provider makes of an asset (a task's inlets and outlets, e.g.
    the asset an event-driven DAG watches) is the dataset the operators name."""
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset

    dataset = translate_airflow_asset(nsq_asset("orders", address="lookupd-1:4161"), None)
    assert (dataset.namespace, dataset.name) == ("nsq://lookupd-1:4161", "orders")
    # the dataset a publish operator on the connection naming that lookupd reports
    op = NSQPublishOperator(task_id="pub", topic="orders", message="x", nsq_conn_id=lookupd_conn)
    assert op.get_openlineage_facets_on_complete(None).outputs == [dataset]
