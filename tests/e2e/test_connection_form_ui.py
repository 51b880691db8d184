"""The README quick start's "See it in the UI" step, in a real Airflow and a real browser.

Its commands run as written (with the test nsqd's host and ports): the first block
enables the Test button and stores the ``nsq_ui`` connection; then, instead of
``airflow standalone``, which also starts log servers listening on every interface, the
component that serves the UI, its form and its Test button: ``airflow api-server`` on
127.0.0.1 (what the README says is enough for them). Then, as the README says:

- the password is in ``$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated``;
- Admin -> Connections lists ``nsq_ui``, whose form shows NSQ's fields, and whose Test
  button says what the README shows;
- the form takes what docs/connections.md allows (``heartbeat_interval_ms`` -1 and 0,
  ``msg_timeout_ms`` 0), and such a connection tests successfully;
- the REST test of a connection with a typo in an extra names "this connection", not the
  random id Airflow tests it under; ``/api/v2/providers`` links the documentation.

The browser part skips, saying why, without Chromium or Playwright; all of it skips when
Airflow cannot start here. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.docs.test_quickstart import IN_A_BROWSER, README
from tests.support.project_metadata import project_urls

from .real_airflow import RealAirflow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

_UI_STEP = re.compile(r"^### See it in the UI\n(.*?)(?=^##)", re.MULTILINE | re.DOTALL)
_BLOCK = re.compile(
    rf"(?P<marker>^{re.escape(IN_A_BROWSER)}\n)?^```(?P<kind>bash|text)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
#: The pop-up of the Test button (Airflow's UI, English).
SUCCESS = "Test Connection Successful"


@dataclass(frozen=True)
class UIStep:
    """The README's UI step: the commands a user pastes, the one left to this test
    (``airflow standalone``), and the lines the Test button's pop-up shows."""

    commands: str
    left_to_this_test: str
    shown: list[str]


def ui_step() -> UIStep:
    found = _UI_STEP.search(README.read_text(encoding="utf-8"))
    assert found, "README.md's quick start has no '### See it in the UI' step"
    blocks = list(_BLOCK.finditer(found.group(1)))
    commands = [b["body"] for b in blocks if b["kind"] == "bash" and not b["marker"]]
    (left,) = [b["body"] for b in blocks if b["kind"] == "bash" and b["marker"]]
    (shown,) = [b["body"].splitlines() for b in blocks if b["kind"] == "text" and b["marker"]]
    return UIStep(commands[0], left, shown)


def _for(nsqd: Any, text: str) -> str:
    """The README's text for this test's nsqd: its host and ports for 127.0.0.1:4150/4151."""
    text = re.sub(r"\b4150\b", str(nsqd.tcp_port), text)
    text = re.sub(r"\b4151\b", str(nsqd.http_port), text)
    return text.replace("127.0.0.1", nsqd.host)


@dataclass
class UI:
    airflow: RealAirflow
    password: str
    step: UIStep


@pytest.fixture(scope="module")
def ui(nsqd, tmp_path_factory) -> Iterator[UI]:
    if not README.exists():
        pytest.skip(
            "README.md is not beside these tests (a copy of tests/ run against the "
            "installed wheel): the README's step is checked in the main suite"
        )
    step = ui_step()
    assert step.left_to_this_test.split("#")[0].strip() == "airflow standalone"
    airflow = RealAirflow(tmp_path_factory.mktemp("airflow"), [], {})
    # The tests' own setting (tests/conftest.py): here only the README's export turns
    # the Test button on.
    airflow.env.pop("AIRFLOW__CORE__TEST_CONNECTION", None)
    airflow.migrate()
    try:
        # The README's commands, then the API server in the same shell (its exports).
        airflow.start("api-server", shell=_for(nsqd, step.commands))
        airflow.wait_for_api()
        generated = airflow.home / "simple_auth_manager_passwords.json.generated"
        password = json.loads(generated.read_text())["admin"]
        airflow.login("admin", password)
        yield UI(airflow, password, step)
    finally:
        airflow.stop_all()


def test_the_step_stores_the_connection_the_ui_lists(nsqd, ui):
    conn = ui.airflow.api("GET", "/api/v2/connections/nsq_ui")
    assert (conn["conn_type"], conn["host"], conn["port"]) == ("nsq", nsqd.host, nsqd.tcp_port)
    assert json.loads(conn["extra"]) == {"http_port": nsqd.http_port}


def test_the_rest_test_of_a_typo_names_this_connection_not_airflows_random_id(nsqd, ui):
    answer = ui.airflow.api(
        "POST",
        "/api/v2/connections/test",
        {
            "connection_id": "nsq_ui",
            "conn_type": "nsq",
            "host": nsqd.host,
            "port": nsqd.tcp_port,
            "extra": json.dumps({"http_prot": nsqd.http_port}),
        },
    )
    assert answer["status"] is False
    message = answer["message"]
    assert message.startswith("this connection: extra 'http_prot': unknown; known: "), message
    assert "NSQ connection '" not in message  # no id at all: not Airflow's random one


def test_the_providers_page_links_the_documentation(ui):
    urls = project_urls()
    (provider,) = [
        p
        for p in ui.airflow.api("GET", "/api/v2/providers")["providers"]
        if p["package_name"] == "airflow-provider-nsq"
    ]
    assert provider["documentation_url"] == urls["Documentation"]


def _playwright() -> tuple[str, Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install playwright)"
    )
    return chromium, sync_api


def _sign_in(page: Any, ui: UI) -> None:
    page.goto(f"{ui.airflow.url}/connections", timeout=60_000)  # the login page first
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(ui.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/connections", timeout=60_000)


_TOASTS = "[data-scope=toast][data-part=root]"
#: The text of the first pop-up that was not there before (their ids, ``seen``), if any.
_NEW_TOAST = f"""seen => {{
    const fresh = [...document.querySelectorAll("{_TOASTS}")].filter(e => !seen.includes(e.id));
    return fresh.length ? fresh[0].innerText : null;
}}"""


def _test_button_says(page: Any, conn_id: str) -> str:
    """Press the Test Connection button of ``conn_id``'s row; the text of the pop-up it
    brings (earlier ones may still show)."""
    seen = page.locator(_TOASTS).evaluate_all("toasts => toasts.map(t => t.id)")
    row = page.get_by_role("row").filter(has_text=conn_id)
    with page.expect_response("**/api/v2/connections/test", timeout=60_000):
        row.get_by_role("button", name="Test Connection").click()
    return str(page.wait_for_function(_NEW_TOAST, arg=seen, timeout=30_000).json_value())


def _add_connection(page: Any, nsqd: Any, conn_id: str, extras: dict[str, str]) -> None:
    """Add Connection, type NSQ, nsqd's host and port, ``extras`` typed into their fields,
    each kept as typed when the field loses focus (a field's minimum would change it)."""
    page.get_by_role("button", name="Add Connection").click()
    dialog = page.get_by_role("dialog")
    dialog.locator("input[name=connection_id]").fill(conn_id)
    dialog.get_by_role("combobox").first.click()
    page.get_by_role("option", name="NSQ", exact=True).click()
    dialog.locator("input[name=host]").fill(nsqd.host)
    dialog.locator("input[name=port]").fill(str(nsqd.tcp_port))
    dialog.get_by_role("button", name="Extra Fields", exact=True).click()
    for name, value in extras.items():
        field = dialog.locator(f"input[name=element_{name}]")
        field.fill(value)
        field.blur()
        assert field.input_value() == value, (name, value, field.input_value())
    dialog.get_by_role("button", name="Save").click()
    dialog.wait_for(state="detached", timeout=30_000)


def test_the_form_opens_takes_what_the_docs_allow_and_tests_green(nsqd, ui, tmp_path):
    chromium, sync_api = _playwright()
    readme_says = [_for(nsqd, line) for line in ui.step.shown]
    version = re.compile(r"^nsqd \S+ at ")  # a real nsqd (NSQD_ADDRESS) has its own
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh profile
            executable_path=chromium,
            headless=True,
            viewport={"width": 1400, "height": 1000},
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page()
        try:
            _sign_in(page, ui)
            # The README's connection: its form, then its Test button.
            row = page.get_by_role("row").filter(has_text="nsq_ui")
            row.get_by_role("button", name="Edit Connection").click()
            dialog = page.get_by_role("dialog")
            for label in ("nsqd host", "nsqd TCP port", "AUTH secret"):
                assert dialog.get_by_text(label, exact=True).is_visible(), label
            assert dialog.locator("input[name=host]").input_value() == nsqd.host
            assert dialog.locator("input[name=port]").input_value() == str(nsqd.tcp_port)
            dialog.get_by_role("button", name="Extra Fields", exact=True).click()
            http_port = dialog.locator("input[name=element_http_port]")
            assert http_port.input_value() == str(nsqd.http_port)
            page.keyboard.press("Escape")
            dialog.wait_for(state="detached", timeout=30_000)

            said = _test_button_says(page, "nsq_ui").splitlines()
            assert said[0] == readme_says[0] == SUCCESS, said
            assert version.sub("", said[1]) == version.sub("", readme_says[1]), said

            # What docs/connections.md allows, typed into a new connection's form.
            off = {"heartbeat_interval_ms": "-1", "msg_timeout_ms": "0"}
            _add_connection(page, nsqd, "nsq_form_off", off)
            _add_connection(page, nsqd, "nsq_form_default", {"heartbeat_interval_ms": "0"})
            stored = json.loads(ui.airflow.api("GET", "/api/v2/connections/nsq_form_off")["extra"])
            assert (stored["heartbeat_interval_ms"], stored["msg_timeout_ms"]) == (-1, 0)
            stored = json.loads(
                ui.airflow.api("GET", "/api/v2/connections/nsq_form_default")["extra"]
            )
            assert stored["heartbeat_interval_ms"] == 0
            for conn_id in ("nsq_form_off", "nsq_form_default"):
                said = _test_button_says(page, conn_id).splitlines()
                assert said[0] == SUCCESS, (conn_id, said)
                assert version.match(said[1]) and f"at {nsqd.tcp_address};" in said[1], said
            page.screenshot(path=str(tmp_path / "connections.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()
