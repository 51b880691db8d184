"""``make demo`` (scripts/demo.py) runs the Spark jobs on the master it is given and says
that one: the ``spark_default`` connection it sets is where its lines read the master."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setattr(os, "environ", os.environ.copy())  # the demo sets Airflow's
    spec = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "demo", module)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("argv", "master"),
    [
        ([], "local[*]"),
        (["--spark-master", "spark://spark.internal:7077"], "spark://spark.internal:7077"),
    ],
)
def test_the_demo_says_the_master_spark_submit_is_given(demo, tmp_path, argv, master) -> None:
    args = demo.parse_args(argv)
    nsq = demo.NSQ(
        nsqds=[("127.0.0.1", 4150)], lookupd_http=None, description="", http_ports=[4151]
    )
    demo.configure_airflow(str(tmp_path), nsq, False, args.spark_master)
    assert json.loads(os.environ["AIRFLOW_CONN_SPARK_DEFAULT"]) == {
        "conn_type": "spark",
        "host": master,
    }
    assert demo.spark_master() == master
