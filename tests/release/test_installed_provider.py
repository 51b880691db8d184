"""The provider as a user installs it: a DAG with the publish operator and the sensor.

In the version matrix (noxfile.py; ``make test`` runs its floor session) the tests run
from a copy of ``tests/`` against the wheel that ``make dist`` built, installed in a fresh
environment beside one Airflow version; ``NSQ_PROVIDER_WHEEL`` names that wheel. There,
this file and ``test_provider_info.py`` (``airflow providers list``, the ``nsq``
connection type) are the check of the artifact.
"""

from __future__ import annotations

import json
import os
from importlib.metadata import distribution
from pathlib import Path

import pytest

import airflow_provider_nsq
from tests.support.airflow_runs import TEST_DAGS, load_dag, run_dag
from tests.support.nsqd_contents import channel_is_empty


def test_the_provider_comes_from_the_built_wheel():
    wheel = os.environ.get("NSQ_PROVIDER_WHEEL")
    if not wheel:
        pytest.skip("only where the matrix installed the wheel from `make dist` (noxfile.py)")
    dist = distribution("airflow-provider-nsq")
    assert dist.version == airflow_provider_nsq.__version__
    assert Path(wheel).name.startswith(f"airflow_provider_nsq-{dist.version}-")
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    assert origin.get("url", "").endswith("/" + Path(wheel).name), origin
    assert not origin.get("dir_info", {}).get("editable"), origin
    installed = Path(str(dist.locate_file("airflow_provider_nsq/__init__.py")))
    assert Path(airflow_provider_nsq.__file__).resolve() == installed.resolve()


def test_a_dag_publishes_then_the_sensor_hands_the_message_on(
    airflow_db, nsqd, nsq_default, nsq_topic
):
    dag = load_dag(TEST_DAGS / "nsq_sensor_dags.py", "nsq_publish_and_wait")

    result = run_dag(dag, topic=nsq_topic, channel="sensor")

    assert result.state == "success", result
    assert result.xcom["publish"]["topic"] == nsq_topic
    (record,) = result.xcom["received"]
    assert json.loads(record["body"]) == {"order": result.run_id}
    nsqd.wait_for(lambda: channel_is_empty(nsqd, nsq_topic, "sensor"))
