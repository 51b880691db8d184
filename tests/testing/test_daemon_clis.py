"""The embedded daemons' command lines: the version line, help for every flag, and
docs/testing.md listing exactly the flags the parsers take."""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_nsq.testing.broker.__main__ import build_parser as broker_parser
from airflow_provider_nsq.testing.lookupd.__main__ import build_parser as lookupd_parser
from tests.support.listening import listening_ports

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"

#: Each CLI: its module, the Go daemon it imitates, its parser, its table in the docs.
CLIS = {
    "broker": (
        "airflow_provider_nsq.testing.broker",
        "nsqd",
        broker_parser,
        "### The broker's flags",
    ),
    "lookupd": (
        "airflow_provider_nsq.testing.lookupd",
        "nsqlookupd",
        lookupd_parser,
        "### The lookupd's flags",
    ),
}
#: What nsqd and nsqlookupd 1.3.0 print for -version: ``nsqd v1.3.0 (built w/go1.19.8)``.
VERSION_LINE = re.compile(
    r"(?P<daemon>\S+) v(?P<version>\d+\.\d+\.\d+) \(built w/(?P<built>[^)]+)\)"
)


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and "--help" not in a.option_strings]


def _default(action: argparse.Action) -> str:
    match = re.search(r" \(default (.+)\)$", action.help or "")
    return match.group(1) if match else ""


def _doc_table(heading: str) -> dict[str, tuple[str, str]]:
    """flag -> (value, default) as the table under ``heading`` lists them."""
    text = DOC.read_text()
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    rows: dict[str, tuple[str, str]] = {}
    for line in text[start : end if end >= 0 else None].splitlines():
        if not line.startswith("| `-"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        value = cells[1].strip("`").replace("\\|", "|")
        for flag in re.findall(r"`(-[^`]+)`", cells[0]):
            rows[flag] = (value, cells[2])
    return rows


@pytest.mark.parametrize("cli", CLIS)
def test_the_docs_list_every_flag_with_its_value_and_default(cli: str) -> None:
    _, _, build, heading = CLIS[cli]
    documented = _doc_table(heading)
    parsed = {
        flag: (action.metavar or "", _default(action))
        for action in _options(build())
        for flag in action.option_strings
    }
    assert sorted(documented) == sorted(parsed)
    assert documented == parsed


@pytest.mark.parametrize("cli", CLIS)
def test_every_flag_says_what_it_does_and_its_default(cli: str) -> None:
    _, _, build, _ = CLIS[cli]
    for action in _options(build()):
        if isinstance(action, argparse._VersionAction):
            continue
        assert _default(action), f"{action.option_strings[0]}: no '(default ...)' in its help"
        assert action.metavar, f"{action.option_strings[0]}: no unit or value shape"
    durations = [a for a in _options(build()) if a.metavar == "DURATION"]
    assert durations and "Go duration" in (build().epilog or "")


@pytest.mark.parametrize("cli", CLIS)
@pytest.mark.parametrize("flag", ["--version", "-version"])
def test_version_prints_the_go_daemons_line(cli: str, flag: str) -> None:
    module, daemon, _, _ = CLIS[cli]
    result = subprocess.run(
        [sys.executable, "-m", module, flag], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    match = VERSION_LINE.fullmatch(result.stdout.strip())
    assert match, result.stdout
    assert (match["daemon"], match["version"]) == (daemon, "1.3.0")
    assert "airflow-provider-nsq" in match["built"]


@pytest.mark.parametrize("cli", CLIS)
def test_the_log_says_where_each_listener_is_as_the_go_daemons_do(cli: str, tls_files) -> None:
    """Scripts that start nsqd and nsqlookupd read the ports from their log (gnsq's test
    harness does): the same lines, and nsqd's ``--data-path`` accepted (nothing is
    written there), so such a script can start the embedded daemons instead."""
    module, _, _, _ = CLIS[cli]
    flags = ["--tcp-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0"]
    protocols: tuple[str, ...] = ("TCP", "HTTP")
    if cli == "broker":
        flags += ["--data-path", "/nonexistent", "--https-address", "127.0.0.1:0"]
        flags += ["--tls-cert", tls_files.server_cert, "--tls-key", tls_files.server_key]
        protocols += ("HTTPS",)
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *flags], stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        ports = listening_ports(proc.stderr, protocols)
        for port in ports.values():
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert not Path("/nonexistent").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
