"""Archive a channel to object storage every hour: the messages land in JSON-lines files
(gzip) under an hourly folder, each FINished only once its file is stored; a downstream
task gets the list of files through XCom.

Needs: the provider (no extra), the ``nsq_default`` connection, and for ``s3://`` the
Amazon provider with s3fs (``pip install "apache-airflow-providers-amazon[s3fs]"``) and an
``aws`` connection (here ``aws_archive``); ``file://`` needs nothing::

    export AIRFLOW_CONN_NSQ_DEFAULT='nsq://nsqd.example.com:4150'
    export AIRFLOW_VAR_NSQ_ARCHIVE_ROOT='s3://aws_archive@my-bucket/nsq/'  # or file:///data/nsq/
"""

from __future__ import annotations

import datetime

from airflow.sdk import ObjectStoragePath, dag, task

from airflow_provider_nsq.transfers.nsq_to_object_storage import NSQToObjectStorageOperator


@dag(
    schedule="@hourly",
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # one archiver per channel at a time
    tags=["nsq", "example"],
)
def nsq_to_object_storage():
    files = NSQToObjectStorageOperator(
        task_id="archive_orders",
        topic="orders",
        channel="archive",  # durable: what arrives between runs waits here
        path="{{ var.value.get('nsq_archive_root', 'file:///tmp/nsq-archive/') }}"
        "orders/{{ data_interval_start.strftime('%Y/%m/%d/%H') }}/",
        compression="gzip",
        max_messages_per_file=2000,
        max_bytes_per_file=128 * 1024 * 1024,
        max_messages=200_000,  # then the next run goes on
        idle_timeout=datetime.timedelta(seconds=10),
    )

    @task
    def count(urls: list[str]) -> int:
        """A downstream task reading the files it was handed."""
        import gzip

        total = 0
        for url in urls:
            with ObjectStoragePath(url).open("rb") as raw:
                total += len(gzip.decompress(raw.read()).splitlines())
        return total

    count(files.output)


nsq_to_object_storage()
