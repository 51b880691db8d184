"""What importing the hook costs a DAG file: a publishing DAG never pays for the
consumer (a third of the client), which loads on the first consume window."""

from __future__ import annotations

import json
import subprocess
import sys

_LOADED = """
import json, sys
from airflow_provider_nsq.hooks.nsq import NSQHook
before = sorted(m for m in sys.modules if m.startswith("airflow_provider_nsq"))
NSQHook().finish()  # answering nothing still resolves the consumer
after = sorted(m for m in sys.modules if m.startswith("airflow_provider_nsq"))
print(json.dumps([before, after]))
"""


def test_importing_the_hook_leaves_the_consumer_for_first_use():
    done = subprocess.run(
        [sys.executable, "-c", _LOADED], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = json.loads(done.stdout.splitlines()[-1])
    assert "airflow_provider_nsq.client.consumer" not in before
    assert "airflow_provider_nsq.client.consumer" in after
