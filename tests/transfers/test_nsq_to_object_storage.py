"""NSQToObjectStorageOperator: 10,000 messages land in files under a ``file://`` path,
each exactly once, the channel empty afterwards; JSON lines or raw bodies, gzip, files
rotated by count, bytes and age; a task SIGKILLed mid-run and tried again loses
nothing; what a killed try left half-stored is removed by the next; the files in XCom
for downstream tasks. (An S3-compatible store: test_nsq_to_s3.py.)"""

from __future__ import annotations

import base64
import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from airflow_provider_nsq.client import NSQConnection
from airflow_provider_nsq.protocol.errors import NSQValueError
from airflow_provider_nsq.testing.polling import wait_for
from airflow_provider_nsq.transfers.archive_files import owner_of, temporary_name
from airflow_provider_nsq.transfers.nsq_to_object_storage import NSQToObjectStorageOperator
from tests.support.airflow_runs import ROOT, TEST_DAGS, load_dag, run_dag
from tests.support.nsqd_contents import channel_is_empty, client_config

CONTEXT = {"ti": types.SimpleNamespace(dag_id="archive", task_id="land", run_id="r1", map_index=-1)}


def publish(nsqd, topic: str, bodies: list[bytes]) -> None:
    with NSQConnection(client_config(nsqd)) as conn:
        for start in range(0, len(bodies), 500):
            conn.multi_publish(topic, bodies[start : start + 500])


def records(files: list[str]) -> list[dict]:
    found = []
    for url in files:
        path = Path(url.removeprefix("file://"))
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        found += [json.loads(line) for line in data.splitlines()]
    return found


def operator(topic: str, path: Path, **kwargs) -> NSQToObjectStorageOperator:
    defaults = {"task_id": "land", "channel": "archive", "idle_timeout": 1.0}
    return NSQToObjectStorageOperator(topic=topic, path=f"file://{path}/", **{**defaults, **kwargs})


def test_ten_thousand_messages_land_once_each_and_the_channel_is_empty(
    nsqd, nsq_default, nsq_topic, tmp_path
):
    nsqd.create_channel(nsq_topic, "archive")
    bodies = [f"order {n}".encode() for n in range(10_000)]
    publish(nsqd, nsq_topic, bodies)
    started = time.monotonic()
    files = operator(nsq_topic, tmp_path / "out").execute(CONTEXT)
    took = time.monotonic() - started
    assert len(files) == 10
    assert files == sorted(files)  # named in the order written
    landed = records(files)
    assert sorted(r["body"] for r in landed) == sorted(b.decode() for b in bodies)
    assert len({(r["nsqd"], r["id"]) for r in landed}) == 10_000  # each exactly once
    assert channel_is_empty(nsqd, nsq_topic, "archive")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        Path(f).name for f in files
    ]  # no temporary file left
    first = landed[0]
    assert set(first) == {
        "id", "body", "body_encoding", "attempts", "timestamp", "topic", "channel", "nsqd"
    }  # fmt: skip
    assert (first["topic"], first["channel"], first["attempts"]) == (nsq_topic, "archive", 1)
    print(f"\n10,000 messages archived in {took:.2f}s")


def test_raw_bodies_gzip_and_files_rotated_by_bytes(nsqd, nsq_default, nsq_topic, tmp_path):
    nsqd.create_channel(nsq_topic, "archive")
    bodies = [b"x" * 99 for _ in range(50)]  # 100 bytes a line
    publish(nsqd, nsq_topic, bodies)
    files = operator(
        nsq_topic, tmp_path, file_format="raw", compression="gzip", max_bytes_per_file=1000
    ).execute(CONTEXT)
    assert len(files) == 5 and all(f.endswith(".txt.gz") for f in files)
    lines = [line for f in files for line in gzip.decompress(Path(f[7:]).read_bytes()).splitlines()]
    assert lines == bodies


def test_a_body_that_is_not_utf8_is_base64(nsqd, nsq_default, nsq_topic, tmp_path):
    nsqd.create_channel(nsq_topic, "archive")
    publish(nsqd, nsq_topic, [b"\xff\xfe binary"])
    (record,) = records(operator(nsq_topic, tmp_path).execute(CONTEXT))
    assert record["body_encoding"] == "base64"
    assert base64.b64decode(record["body"]) == b"\xff\xfe binary"


def test_a_file_open_too_long_is_stored_while_the_task_goes_on(
    nsqd, nsq_default, nsq_topic, tmp_path
):
    nsqd.create_channel(nsq_topic, "archive")
    publish(nsqd, nsq_topic, [b"early"])
    op = operator(nsq_topic, tmp_path, max_seconds_per_file=0.5, idle_timeout=3.0)
    files = op.execute(CONTEXT)
    assert len(files) == 1 and records(files)[0]["body"] == "early"


def test_max_messages_ends_the_run_and_leaves_the_rest(nsqd, nsq_default, nsq_topic, tmp_path):
    nsqd.create_channel(nsq_topic, "archive")
    publish(nsqd, nsq_topic, [str(n).encode() for n in range(30)])
    files = operator(nsq_topic, tmp_path, max_messages=12, max_messages_per_file=5).execute(CONTEXT)
    assert [len(records([f])) for f in files] == [5, 5, 2]
    wait_for(lambda: (nsqd.channel_stats(nsq_topic, "archive") or {}).get("depth") == 18, 10)


def test_what_a_killed_try_left_half_stored_is_removed_by_the_next(
    nsqd, nsq_default, nsq_topic, tmp_path
):
    leftover = tmp_path / temporary_name("part-x.jsonl", owner_of(CONTEXT))
    leftover.write_bytes(b'{"half": ')
    elses = tmp_path / temporary_name("part-y.jsonl", "someoneelse0")
    elses.write_bytes(b"another task's")
    operator(nsq_topic, tmp_path, idle_timeout=0.2).execute(CONTEXT)
    assert not leftover.exists()
    assert elses.exists()  # another task instance's: not ours to remove


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"channel": "c#ephemeral"}, "is #ephemeral"),
        ({"file_format": "csv"}, "file_format must be 'jsonl' or 'raw'"),
        ({"compression": "zstd"}, "compression must be 'gzip' or None"),
        ({"max_messages_per_file": 2501}, "max_messages_per_file must be an int 1-2500"),
        ({"idle_timeout": 0}, "idle_timeout must be"),
    ],
)
def test_arguments_are_checked_when_the_dag_is_parsed(kwargs, named, tmp_path):
    with pytest.raises(NSQValueError, match=named):
        operator("t", tmp_path, **kwargs)


_KILLED_TRY = textwrap.dedent(
    """
    import sys, types
    from airflow_provider_nsq.transfers.nsq_to_object_storage import (
        NSQToObjectStorageOperator,
    )
    topic, path = sys.argv[1], sys.argv[2]
    context = {"ti": types.SimpleNamespace(
        dag_id="archive", task_id="land", run_id="r1", map_index=-1)}
    NSQToObjectStorageOperator(
        task_id="land", topic=topic, channel="archive", path=path,
        max_messages_per_file=200, idle_timeout=120,
    ).execute(context)
    """
)


def test_a_task_killed_mid_run_and_tried_again_loses_nothing(
    nsqd, monkeypatch, nsq_topic, tmp_path
):
    # msg_timeout 2 s: what the killed task held comes back soon after the kill.
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT",
        f"nsq://{nsqd.tcp_address}?http_port={nsqd.http_port}&msg_timeout_ms=2000",
    )
    nsqd.create_channel(nsq_topic, "archive")
    bodies = [f"m{n}".encode() for n in range(2_100)]  # 10 files of 200, 100 held after
    publish(nsqd, nsq_topic, bodies)
    out = tmp_path / "out"
    try_one = subprocess.Popen(
        [sys.executable, "-c", _KILLED_TRY, nsq_topic, f"file://{out}/"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])},
    )
    try:
        wait_for(
            lambda: (
                len(list(out.glob("part-*"))) >= 10
                and (nsqd.channel_stats(nsq_topic, "archive") or {}).get("in_flight_count") == 100
            ),
            timeout=120,
        )
        assert try_one.poll() is None, "the first try ended before it was killed"
        os.kill(try_one.pid, signal.SIGKILL)  # mid-file: 100 messages taken, not stored
    finally:
        try_one.kill()
        try_one.wait(timeout=30)
    first = sorted(str(p) for p in out.glob("part-*"))
    assert len(first) == 10 and not list(out.glob(".*"))  # no partial file anywhere
    again = operator(nsq_topic, out, idle_timeout=5.0).execute(CONTEXT)
    landed = records([f"file://{f}" for f in first] + again)
    assert sorted(r["body"] for r in landed) == sorted(b.decode() for b in bodies)
    retried = [r for f in again for r in records([f])]
    assert len(retried) == 100 and {r["attempts"] for r in retried} == {2}
    assert channel_is_empty(nsqd, nsq_topic, "archive")


DAGS = TEST_DAGS / "nsq_archive_dags.py"


@pytest.mark.usefixtures("airflow_db")
def test_a_downstream_task_gets_the_files_from_xcom(nsqd, nsq_default, nsq_topic, tmp_path):
    nsqd.create_channel(nsq_topic, "archive")
    publish(nsqd, nsq_topic, [b"a", b"b", b"c"])
    run = run_dag(load_dag(DAGS, "nsq_archive"), topic=nsq_topic, path=f"file://{tmp_path}/")
    assert run.state == "success", run
    assert run.xcom["count_lines"] == 3
    assert len(run.xcom["land"]) == 1
