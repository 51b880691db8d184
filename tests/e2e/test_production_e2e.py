"""End to end in one real Airflow (api-server, scheduler, dag-processor, triggerer;
PostgreSQL, LocalExecutor, loopback only) running tests/e2e/production_dags/nsq_production.py
against the test nsqd, with Airflow's StatsD metrics sent to a UDP listener here and
nsqadmin played by a small HTTP server here:

- an NSQSensor in ``mode="reschedule"`` without nsqd's HTTP API keeps its backoff across
  reschedules: the scheduler's reschedule records show each wait doubling, and the
  message was delivered once per window, not once per ``poke_interval``;
- ``asset_outlet="host:port"`` on a publish operator starts the DAG scheduled on
  ``nsq_asset(topic, address="host:port")``;
- the nsqadmin links of the publish operators, the sensors and the event-driven DAG's
  task, as the API server hands them to the UI (the extra-links endpoint); and, when
  Chromium and Playwright are installed, as the UI shows them in a browser, clicked
  (a screenshot is saved);
- the ``nsq.*`` metrics with their values and tags, from the task processes and from the
  triggerer (a consume task dead-letters a poison message among them).

One Airflow serves every test of this module, each waiting for the runs it reads
(``pytest -s`` prints the figures).
Skipped only when Airflow itself cannot start here, with the reason.
"""

from __future__ import annotations

import http.server
import json
import os
import secrets
import shutil
import socket
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from airflow_provider_nsq.client import ClientConfig, NSQConnection, NSQConsumer
from airflow_provider_nsq.sensors.nsq import tcp_pause
from airflow_provider_nsq.testing.polling import wait_for

from .real_airflow import RealAirflow, utc_timestamp
from .statsd_listener import StatsDListener

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DAG_FILE = Path(__file__).parent / "production_dags" / "nsq_production.py"
DAG_IDS = (
    "nsq_prod_publish",
    "nsq_prod_publish_error",
    "nsq_prod_downstream",
    "nsq_prod_sensor",
    "nsq_prod_reschedule",
    "nsq_prod_events",
    "nsq_prod_consume",
)
#: DAGs started by an asset event, not by the fixture.
STARTED_BY_ASSETS = ("nsq_prod_downstream", "nsq_prod_events")
RESCHEDULE_TIMEOUT_S = 35
EVENT_MESSAGES = 5
#: Where the browser check saves its screenshot (for people; the test asserts the page).
SCREENSHOT_DIR = os.environ.get("NSQ_SCREENSHOT_DIR")


class FakeNSQAdmin:
    """Stands in for nsqadmin: answers every page, remembers which were asked for."""

    def __init__(self) -> None:
        paths = self.paths = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                paths.append(self.path)
                body = f"<html><body><h1>nsqadmin stand-in: {self.path}</h1></body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/nsqadmin"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Production:
    airflow: RealAirflow
    statsd: StatsDListener
    admin: FakeNSQAdmin
    topics: dict[str, str]
    runs: dict[str, str] = field(default_factory=dict)  # dag_id -> run_id

    def run_state(self, dag_id: str) -> str | None:
        rows = self.airflow.query(
            "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, self.runs[dag_id]
        )
        return rows[0][0] if rows else None

    def finished_runs(self, dag_id: str) -> list[tuple[str, str]]:
        return [
            (row[0], row[1])
            for row in self.airflow.query(
                "SELECT run_id, state FROM dag_run WHERE dag_id = ? AND state IN "
                "('success', 'failed')",
                dag_id,
            )
        ]

    def wait_finished(self, *dag_ids: str) -> None:
        """Wait until the named DAGs' runs have finished (the runs the fixture started,
        or for the DAGs an asset starts, their first run), and note those run ids."""

        def finished() -> bool:
            self.airflow.check_alive()
            for dag_id in dag_ids:
                if dag_id in STARTED_BY_ASSETS:
                    runs = self.finished_runs(dag_id)
                    if not runs:
                        return False
                    self.runs.setdefault(dag_id, runs[0][0])
                elif self.run_state(dag_id) not in ("success", "failed"):
                    return False
            return True

        wait_for(finished, 300, 1, message=f"the runs of {', '.join(dag_ids)} finished")

    def wait_event_fins(self) -> None:
        """The triggerer FINs a batch once Airflow confirms its event stored (3.3), a
        moment after the run it started may already have finished."""
        self.wait_finished("nsq_prod_events")
        wait_for(
            lambda: self.statsd.total("airflow.nsq.event.finished") >= EVENT_MESSAGES,
            60,
            0.5,
            message="the event trigger reports its FINs",
        )

    def links(self, dag_id: str, run_id: str, task_id: str) -> dict[str, str | None]:
        path = (
            f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/links"
        )
        return self.airflow.api("GET", path)["extra_links"]


def _publish(nsqd, topic: str, count: int) -> None:
    with NSQConnection(ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        for n in range(count):
            conn.publish(topic, json.dumps({"n": n}).encode())


@pytest.fixture(scope="module")
def production(nsqd, postgres, tmp_path_factory) -> Iterator[Production]:
    token = secrets.token_hex(4)
    topics = {
        "publish": f"prod_pub_{token}",
        "sensor": f"prod_sensor_{token}",
        "reschedule": f"prod_resched_{token}",
        "events": f"prod_events_{token}",
        "consume": f"prod_consume_{token}",
    }
    nsqd.create_channel(topics["sensor"], "etl")
    _publish(nsqd, topics["sensor"], 3)
    nsqd.create_channel(topics["reschedule"], "etl")
    _publish(nsqd, topics["reschedule"], 1)  # min_messages=2: never enough
    nsqd.create_channel(topics["events"], "airflow")
    nsqd.create_channel(topics["consume"], "apply")
    with NSQConnection(ClientConfig(host=nsqd.host, port=nsqd.tcp_port)) as conn:
        conn.multi_publish(topics["consume"], [b"ok", b"poison", b"ok"])
    statsd, admin = StatsDListener(), FakeNSQAdmin()
    admin_q = quote(admin.url, safe="")
    nsq = f"nsq://{nsqd.tcp_address}"
    with socket.socket() as s:  # a closed port: nothing listens there
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    env = {
        "AIRFLOW_CONN_NSQ_DEFAULT": f"{nsq}?http_port={nsqd.http_port}&nsqadmin_url={admin_q}",
        "AIRFLOW_CONN_NSQ_TCP_ONLY": f"{nsq}?nsqadmin_url={admin_q}",
        "AIRFLOW_CONN_NSQ_DOWN": f"nsq://127.0.0.1:{closed}?connect_timeout=2",
        **statsd.airflow_env(),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",  # the API, the UI: no login
        "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300",
        "NSQ_PROD_PUBLISH_TOPIC": topics["publish"],
        "NSQ_PROD_SENSOR_TOPIC": topics["sensor"],
        "NSQ_PROD_RESCHEDULE_TOPIC": topics["reschedule"],
        "NSQ_PROD_EVENTS_TOPIC": topics["events"],
        "NSQ_PROD_RESCHEDULE_TIMEOUT_S": str(RESCHEDULE_TIMEOUT_S),
        "NSQ_PROD_CONSUME_TOPIC": topics["consume"],
        "NSQ_PROD_NSQD": nsqd.tcp_address,
    }
    database = postgres.create_database(f"production_{token}")
    airflow = RealAirflow(tmp_path_factory.mktemp("airflow"), [DAG_FILE], env, database)
    result = Production(airflow, statsd, admin, topics)
    airflow.migrate()
    try:
        airflow.start_all()

        def parsed() -> bool:
            airflow.check_alive()
            errors = airflow.import_errors()
            assert not errors, f"the DAG file does not import: {errors[0]}"
            found = {r[0] for r in airflow.query("SELECT dag_id FROM dag")}
            return set(DAG_IDS) <= found

        wait_for(parsed, 240, 1, message="the DAG processor parsed the DAGs")
        for dag_id in (
            "nsq_prod_publish",
            "nsq_prod_publish_error",
            "nsq_prod_sensor",
            "nsq_prod_consume",
        ):
            run = airflow.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})
            result.runs[dag_id] = run["dag_run_id"]
        run = airflow.api(
            "POST", "/api/v2/dags/nsq_prod_reschedule/dagRuns", {"logical_date": None}
        )
        result.runs["nsq_prod_reschedule"] = run["dag_run_id"]

        def subscribed() -> bool:
            airflow.check_alive()
            return bool((nsqd.channel_stats(topics["events"], "airflow") or {}).get("clients"))

        wait_for(subscribed, 240, 1, message="the triggerer subscribes to the watched channel")
        _publish(nsqd, topics["events"], EVENT_MESSAGES)
        # Each test waits for the runs it reads (Production.wait_finished): the
        # reschedule run alone takes RESCHEDULE_TIMEOUT_S, the others overlap with it.
        yield result
    finally:
        airflow.stop_all()
        statsd.close()
        admin.close()


# -- 1. asset outlets ----------------------------------------------------------------------


def test_a_publish_with_asset_outlet_starts_the_dag_scheduled_on_the_topic(nsqd, production):
    production.wait_finished("nsq_prod_publish", "nsq_prod_downstream")
    assert production.run_state("nsq_prod_publish") == "success"
    runs = production.finished_runs("nsq_prod_downstream")
    assert [state for _, state in runs] == ["success"]
    events = production.airflow.query(
        "SELECT a.uri FROM asset_event e JOIN asset a ON a.id = e.asset_id "
        "WHERE e.source_dag_id = 'nsq_prod_publish'"
    )
    assert events == [(f"nsq://{nsqd.tcp_address}/{production.topics['publish']}",)]


# -- 2. links to nsqadmin ------------------------------------------------------------------


def test_the_api_server_hands_the_ui_the_nsqadmin_links(production):
    # The links come from the operators: the reschedule run's task need not have finished.
    production.wait_finished(*(d for d in DAG_IDS if d != "nsq_prod_reschedule"))
    admin, topics = production.admin.url, production.topics
    publish = production.runs["nsq_prod_publish"]
    for task_id in ("pub", "dpub", "mpub"):
        links = production.links("nsq_prod_publish", publish, task_id)
        assert links == {"nsqadmin: topic": f"{admin}/topics/{topics['publish']}"}
    sensor = production.links("nsq_prod_sensor", production.runs["nsq_prod_sensor"], "wait")
    assert sensor == {"nsqadmin: channel": f"{admin}/topics/{topics['sensor']}/etl"}
    skipped = production.links(
        "nsq_prod_reschedule", production.runs["nsq_prod_reschedule"], "wait"
    )
    assert skipped == {"nsqadmin: channel": f"{admin}/topics/{topics['reschedule']}/etl"}
    events = production.links("nsq_prod_events", production.runs["nsq_prod_events"], "process")
    assert events == {"nsqadmin: channel": f"{admin}/topics/{topics['events']}/airflow"}
    # A connection without nsqadmin_url: no link (the UI shows no button).
    failed = production.links(
        "nsq_prod_publish_error", production.runs["nsq_prod_publish_error"], "pub"
    )
    assert failed == {"nsqadmin: topic": None}


def _playwright():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install playwright)"
    )
    return chromium, sync_api


def test_the_ui_shows_the_link_and_it_opens_nsqadmin(production, tmp_path):
    chromium, sync_api = _playwright()
    production.wait_finished("nsq_prod_sensor")
    run_id = production.runs["nsq_prod_sensor"]
    # The task instance's Details tab, where the UI lists its extra links.
    page_url = (
        f"{production.airflow.url}/dags/nsq_prod_sensor/runs/{quote(run_id)}/tasks/wait/details"
    )
    expected = f"{production.admin.url}/topics/{production.topics['sensor']}/etl"
    shots = Path(SCREENSHOT_DIR) if SCREENSHOT_DIR else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    screenshot = shots / "nsqadmin-link-on-task-instance.png"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh profile
            executable_path=chromium,
            headless=True,
            viewport={"width": 1400, "height": 900},
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page()
            page.goto(page_url, timeout=60_000)
            link = page.get_by_role("link", name="nsqadmin: channel")
            try:
                link.wait_for(timeout=60_000)
            except Exception:
                page.screenshot(path=str(shots / "failure.png"), full_page=True)
                raise AssertionError(
                    f"no nsqadmin link on {page.url}; the page says:\n"
                    f"{page.inner_text('body')[:3000]}\n(screenshot: {shots / 'failure.png'})"
                ) from None
            assert link.get_attribute("href") == expected
            page.screenshot(path=str(screenshot), full_page=True)
            with page.expect_popup(timeout=30_000) as popup_info:
                link.click()
            popup = popup_info.value
            popup.wait_for_load_state()
            assert popup.url == expected
            assert "nsqadmin stand-in" in popup.inner_text("h1")
        finally:
            browser.close()
    assert f"/nsqadmin/topics/{production.topics['sensor']}/etl" in production.admin.paths
    print(f"\nscreenshot of the task instance with its nsqadmin link: {screenshot}")


# -- 3. reschedule mode without the HTTP API ------------------------------------------------


def test_reschedule_mode_keeps_its_backoff_across_reschedules(nsqd, production):
    production.wait_finished("nsq_prod_reschedule")
    airflow = production.airflow
    run_id = production.runs["nsq_prod_reschedule"]
    (state,) = airflow.query(
        "SELECT state FROM task_instance WHERE dag_id = 'nsq_prod_reschedule' AND run_id = ?",
        run_id,
    )[0]
    # soft_fail: the timeout passed with too few messages
    assert state == "skipped", "\n".join(
        line
        for line in (airflow.root / "scheduler.log").read_text(errors="replace").splitlines()
        if "nsq_prod_reschedule" in line and ("state" in line or "Marking" in line)
    )[-3000:]
    rows = airflow.query(
        "SELECT r.start_date, r.end_date, r.reschedule_date FROM task_reschedule r "
        "JOIN task_instance ti ON ti.id = r.ti_id "
        "WHERE ti.dag_id = 'nsq_prod_reschedule' AND ti.run_id = ? ORDER BY r.id",
        run_id,
    )
    starts = [utc_timestamp(r[0]) for r in rows]
    ends = [utc_timestamp(r[1]) for r in rows]
    wakes = [utc_timestamp(r[2]) for r in rows]
    deadline = starts[0] + RESCHEDULE_TIMEOUT_S
    # Each reschedule (one per poke, each poke one short window) waits for the next
    # window: 20 s, 40 s ... after it (poke_interval=5, window_timeout=1), or until the timeout;
    # with poke_interval alone it would be 5 s each.
    for n, (end, wake) in enumerate(zip(ends, wakes, strict=True), start=1):
        expected = min(tcp_pause(n, 5, 1), deadline + 1 - end)
        assert wake - end == pytest.approx(expected, abs=2.5), (n, wake - end, expected)
    assert 1 <= len(rows) <= 2, rows  # 35 s: windows at 0 and 20+ s
    # Every poke but the last was rescheduled after its window; the last one, at or near
    # the timeout, opened one more, or none. One delivery per window.
    windows = production.statsd.total("airflow.nsq.sensor.checks.tcp", dag_id="nsq_prod_reschedule")
    assert windows in (len(rows), len(rows) + 1)
    (message,) = _read(nsqd, production.topics["reschedule"], "etl", 1)
    assert message.attempts == windows + 1
    print(
        f"\nreschedule mode, no HTTP API: {windows:g} windows in {RESCHEDULE_TIMEOUT_S}s, "
        f"reschedules waited {[round(w - e, 1) for e, w in zip(ends, wakes, strict=True)]}s; "
        f"the message was delivered {message.attempts - 1} times"
    )


def _read(nsqd, topic: str, channel: str, count: int):
    config = ClientConfig(host=nsqd.host, port=nsqd.tcp_port)
    with NSQConsumer(topic, channel, config=config) as consumer:
        return consumer.consume(max_messages=count, timeout=5)


# -- 4. metrics -----------------------------------------------------------------------------


def test_the_metrics_reach_statsd_with_their_values(production):
    production.wait_finished(*DAG_IDS)
    production.wait_event_fins()
    statsd, topics = production.statsd, production.topics
    pub = {"dag_id": "nsq_prod_publish", "topic": topics["publish"]}
    assert statsd.total("airflow.nsq.publish.pub.messages", task_id="pub", **pub) == 1
    assert statsd.total("airflow.nsq.publish.pub.bytes", task_id="pub", **pub) == len(
        b'{"event":"done"}'
    )
    assert statsd.total("airflow.nsq.publish.dpub.messages", task_id="dpub", **pub) == 1
    assert statsd.total("airflow.nsq.publish.dpub.bytes", task_id="dpub", **pub) == 5
    assert statsd.total("airflow.nsq.publish.mpub.messages", task_id="mpub", **pub) == 3
    assert statsd.total("airflow.nsq.publish.mpub.bytes", task_id="mpub", **pub) == 6
    errors = [
        t for n, t, _, _ in statsd.samples("airflow.nsq.publish.pub.errors") if n.endswith("errors")
    ]
    assert [(t["dag_id"], t["error"]) for t in errors] == [
        ("nsq_prod_publish_error", "NSQConnectionError")
    ]

    sensor = {"dag_id": "nsq_prod_sensor", "topic": topics["sensor"], "channel": "etl"}
    assert statsd.total("airflow.nsq.sensor.checks.http", **sensor) >= 1
    assert statsd.values("airflow.nsq.sensor.depth", **sensor)[-1] == 3
    assert statsd.total("airflow.nsq.sensor.window.taken", **sensor) == 3
    assert statsd.total("airflow.nsq.sensor.window.delivered", **sensor) == 3
    assert statsd.total("airflow.nsq.sensor.window.requeued", **sensor) == 0
    (xcom_bytes,) = statsd.values("airflow.nsq.sensor.window.xcom_bytes", **sensor)
    assert 3 * 150 < xcom_bytes < 3 * 400

    resched = {"dag_id": "nsq_prod_reschedule", "topic": topics["reschedule"], "channel": "etl"}
    windows = statsd.total("airflow.nsq.sensor.checks.tcp", **resched)
    assert windows >= 2
    assert statsd.total("airflow.nsq.sensor.window.taken", **resched) == windows  # 1 each
    assert statsd.total("airflow.nsq.sensor.window.requeued", **resched) == windows

    events = {"topic": topics["events"], "channel": "airflow"}
    assert statsd.total("airflow.nsq.event.received", **events) >= EVENT_MESSAGES
    assert statsd.total("airflow.nsq.event.finished", **events) >= EVENT_MESSAGES
    delays = statsd.values("airflow.nsq.event.delay", **events)
    assert delays and all(0 < d < 120_000 for d in delays)  # milliseconds

    consume = {"dag_id": "nsq_prod_consume", "topic": topics["consume"], "channel": "apply"}
    assert statsd.total("airflow.nsq.consume.applied", task_id="apply", **consume) == 2
    assert statsd.total("airflow.nsq.consume.requeued", **consume) == 1  # poison, delivery 1
    assert statsd.total("airflow.nsq.consume.dead_lettered", **consume) == 1  # delivery 2
    # At most one a second and one when the task ends (the mean of the calls since the
    # last), never one per message: 4 calls (ok, poison, its redelivery, ok).
    assert 1 <= len(statsd.values("airflow.nsq.consume.apply_duration", **consume)) <= 4
    delays = statsd.values("airflow.nsq.consume.delay", **consume)
    assert len(delays) == 2 and all(0 < d < 300_000 for d in delays)  # milliseconds

    by_name: dict[str, float] = defaultdict(float)
    for name, _, value, kind in statsd.samples("airflow.nsq."):
        if kind == "c":
            by_name[name] += value
        else:
            by_name[name] = value  # gauges and timers: the last one
    print("\nnsq metrics received by StatsD (counters summed; gauges, timers: last value):")
    for name in sorted(by_name):
        print(f"  {name} = {by_name[name]:g}")


def test_every_metric_sent_is_a_documented_one(production):
    production.wait_finished(*DAG_IDS)
    production.wait_event_fins()
    from airflow_provider_nsq.metrics import METRICS

    sent = {name.removeprefix("airflow.") for name, *_ in production.statsd.samples("airflow.nsq.")}
    assert sent <= set(METRICS)
    # This run has no filter, no dead-letter topic for events, no failed store, no poison
    # message without a dead-letter topic and no deferred sensor
    # (test_high_availability_e2e.py has those); the event producer is off (its own
    # tests, test_event_producer*.py, count its metrics).
    unused = {
        "nsq.event_producer.published",
        "nsq.event_producer.dropped",
        "nsq.consume.dead_letter_failed",
        "nsq.consume.exhausted",
        "nsq.sensor.window.filtered",
        "nsq.event.requeued",
        "nsq.event.dead_lettered",
        "nsq.publish.dpub.errors",
        "nsq.publish.mpub.errors",
        *(name for name in METRICS if name.startswith("nsq.sensor.health.")),
    }
    assert sent == set(METRICS) - unused
