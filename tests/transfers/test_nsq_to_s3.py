"""NSQToObjectStorageOperator on an S3-compatible store: moto's S3 server, started here
on 127.0.0.1, reached through Airflow's ``s3://`` object storage (the Amazon provider
and s3fs) and an ``aws`` connection that points at it. Skipped, saying what is missing,
where moto's server, s3fs or the Amazon provider is not installed."""

from __future__ import annotations

import json
import types

import pytest

from airflow_provider_nsq.client import NSQConnection
from tests.support.net import free_port
from tests.support.nsqd_contents import channel_is_empty, client_config

moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")
pytest.importorskip("s3fs", reason="s3fs is not installed")
pytest.importorskip(
    "airflow.providers.amazon.aws.fs.s3",
    reason="apache-airflow-providers-amazon (s3:// object storage) is not installed",
)

BUCKET = "nsq-archive"
CONTEXT = {"ti": types.SimpleNamespace(dag_id="archive", task_id="s3", run_id="r1", map_index=-1)}


@pytest.fixture(scope="module")
def s3_endpoint():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port())
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """A bucket on the moto server, and the ``aws_moto`` connection to it."""
    import boto3

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",  # never ask an instance metadata service
    }.items():
        monkeypatch.setenv(name, value)
    connection = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"endpoint_url": s3_endpoint, "region_name": "us-east-1"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AWS_MOTO", json.dumps(connection))
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    yield client
    for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def test_a_channel_lands_in_s3_once_each_with_no_temporary_object_left(
    s3, nsqd, nsq_default, nsq_topic
):
    from airflow_provider_nsq.transfers.nsq_to_object_storage import (
        NSQToObjectStorageOperator,
    )

    nsqd.create_channel(nsq_topic, "archive")
    bodies = [f"order {n}".encode() for n in range(500)]
    with NSQConnection(client_config(nsqd)) as conn:
        conn.multi_publish(nsq_topic, bodies)
    prefix = f"{nsq_topic}/"
    files = NSQToObjectStorageOperator(
        task_id="s3",
        topic=nsq_topic,
        channel="archive",
        path=f"s3://{BUCKET}/{prefix}",
        object_storage_conn_id="aws_moto",
        max_messages_per_file=100,
        idle_timeout=1.0,
    ).execute(CONTEXT)
    # Each URL names the connection: ObjectStoragePath(url) downstream reads it as is.
    base = f"s3://aws_moto@{BUCKET}/"
    assert len(files) == 5 and all(f.startswith(f"{base}{prefix}part-") for f in files)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert keys == sorted(f.removeprefix(base) for f in files)  # no temporary object left
    landed = []
    for key in keys:
        text = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
        landed += [json.loads(line)["body"] for line in text.splitlines()]
    assert sorted(landed) == sorted(b.decode() for b in bodies)
    assert channel_is_empty(nsqd, nsq_topic, "archive")
