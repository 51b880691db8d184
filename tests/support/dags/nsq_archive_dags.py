"""A DAG that archives a channel into files (path and topic from params) and a
downstream task that reads the files it got through XCom."""

from __future__ import annotations

import datetime

from airflow.sdk import ObjectStoragePath, dag, task

from airflow_provider_nsq.transfers.nsq_to_object_storage import NSQToObjectStorageOperator


@dag(
    dag_id="nsq_archive",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={"topic": "nsq_archive_test", "path": "file:///tmp/nsq-archive/"},
    default_args={"retries": 0},
)
def archive():
    files = NSQToObjectStorageOperator(
        task_id="land",
        topic="{{ params.topic }}",
        channel="archive",
        path="{{ params.path }}",
        idle_timeout=1.0,
    )

    @task
    def count_lines(urls: list[str]) -> int:
        return sum(len(ObjectStoragePath(url).read_text().splitlines()) for url in urls)

    count_lines(files.output)


archive()
