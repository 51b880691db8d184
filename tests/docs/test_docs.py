"""Every ```python block of README.md and docs/*.md runs here, one test per block
(``README.md:44``, ``docs/spark.md:20`` ...), against the embedded broker (or the real
nsqd of ``NSQD_ADDRESS``).

How a block runs:

- The blocks of one page share a namespace and run in page order, as a reader reads
  them: a later block may use what an earlier one defined or imported. Run alone (``-k``),
  a block first runs the blocks above it.
- The notes beside a block (``tests/docs/markdown_blocks.py``) add hidden setup code, a
  check, an expected exception, or skip it with a reason the page also states.
- ``nsq_default`` is the test nsqd (with its HTTP port) for every block.
- Pages name the servers a reader has; the test replaces exactly the strings in
  ``PLACEHOLDERS`` with the test servers' addresses (and data paths with a temp dir)
  before compiling. Nothing else in a block is changed.
- ``spark``, when a block (or its notes) uses the name, is the test session's shared
  local[2] SparkSession (``tests/conftest.py``), with the ``nsq`` source registered.
- A block that defines an Airflow DAG (``@dag`` or ``DAG(``) is also saved, as it is,
  as a DAG file in a DAG bundle of its own, as a user's DAG file would be, so
  ``dag.test()`` runs it: such a block must be a whole DAG file.
- A function a block defines whose name starts with ``test_`` is called afterwards, with
  pytest fixtures for its arguments, as pytest would call it in the reader's project.
- Notes reach the test servers through ``testbed`` (a :class:`Testbed`); a DAG whose
  tasks cannot share the test process runs in a new one
  (``testbed.test_dag_in_new_process``).
"""

from __future__ import annotations

import builtins
import json
import os
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from inspect import signature
from pathlib import Path
from typing import Any

import pytest

from .markdown_blocks import PythonBlock, Snippet, python_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [block for page in PAGES for block in python_blocks(ROOT, page)]


class Testbed:
    """The test's servers and helpers, as ``testbed`` in a page's namespace."""

    __test__ = False  # not a test class, whatever its name says

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.request = request
        self.tmp_path = tmp_path
        self.dag_file: Path | None = None  # the block's DAG file, once saved

    def fixture(self, name: str) -> Any:
        return self.request.getfixturevalue(name)

    @property
    def nsqd(self) -> Any:
        """The session's nsqd: the one ``nsq_default`` names."""
        return self.fixture("nsqd")

    def fresh_channel(self, topic: str, channel: str) -> None:
        """Create ``channel`` and drop what it holds: a page's topics have fixed names,
        and an nsqd that outlives the suite (``NSQD_ADDRESS``) keeps what earlier runs
        left there."""
        self.nsqd.create_channel(topic, channel)
        status, body = self.nsqd.http(
            "POST", "/channel/empty", {"topic": topic, "channel": channel}
        )
        assert status == 200, (status, body)

    @cached_property
    def topology(self) -> Any:
        """An nsqlookupd with one nsqd registered, for blocks that name nsqlookupds."""
        return self.fixture("nsq_topology")(n=1)

    def read(self, topic: str, channel: str, count: int, timeout: float = 10.0) -> list[bytes]:
        """The bodies one subscribe window on the test nsqd gets (up to ``count``), FIN'd."""
        from airflow_provider_nsq.client import ClientConfig, NSQConsumer

        config = ClientConfig(host=self.nsqd.host, port=self.nsqd.tcp_port)
        with NSQConsumer(topic, channel, config=config) as consumer:
            messages = consumer.consume(max_messages=count, timeout=timeout)
        return [message.body for message in messages]

    def test_dag_in_new_process(self, dag_function: str, timeout: float = 300.0) -> str:
        """``dag_function().test()`` of the block's DAG file in a new Python process (this
        one's environment); returns the run's state. For tasks that cannot share the test
        process: a Spark Connect session cannot start beside its classic SparkContext."""
        assert self.dag_file is not None, "the block defines no DAG"
        script = textwrap.dedent(
            f"""
            import importlib.util
            spec = importlib.util.spec_from_file_location("docs_dag", {str(self.dag_file)!r})
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            print("STATE", getattr(module, {dag_function!r})().test().state)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=self.tmp_path,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        states = [line[6:] for line in done.stdout.splitlines() if line.startswith("STATE ")]
        assert done.returncode == 0 and states, (done.stdout + done.stderr)[-5000:]
        return states[0]

    def call_test(self, function: Callable[..., Any]) -> Any:
        """Call a test function as pytest would: a fixture for each argument."""
        arguments = {name: self.fixture(name) for name in signature(function).parameters}
        return function(**arguments)


#: A page's placeholder -> what it stands for in the test.
PLACEHOLDERS: dict[str, Callable[[Testbed], str]] = {
    "nsqd.example.com:4150": lambda t: t.nsqd.tcp_address,
    "nsqd.internal:4150": lambda t: t.nsqd.tcp_address,
    'host="127.0.0.1", port=4150': lambda t: f'host="{t.nsqd.host}", port={t.nsqd.tcp_port}',
    "ClientConfig(port=4150)": lambda t: (
        f'ClientConfig(host="{t.nsqd.host}", port={t.nsqd.tcp_port})'
    ),
    "lookupd-1.internal:4161,lookupd-2.internal:4161": (
        lambda t: ",".join(t.topology.lookupd_http_addresses)
    ),
    '"/data/': lambda t: f'"{t.tmp_path}/',
}

_DEFINES_DAG = re.compile(r"^@dag\b|\bDAG\(", re.MULTILINE)


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _uses_name(block: PythonBlock, name: str) -> bool:
    """Whether the block or its notes read the global ``name``."""
    for snippet in (block.setup, block.code, block.check):
        if snippet is None:
            continue
        try:
            code = compile(snippet.code, block.page, "exec")
        except SyntaxError:
            continue  # the block's own test reports it, with its line
        if any(name in c.co_names for c in _code_objects(code)):
            return True
    return False


@dataclass
class PageRun:
    """A page's namespace, and which of its blocks have run in it."""

    namespace: dict[str, Any]
    ran: set[int] = field(default_factory=set)


_pages: dict[str, PageRun] = {}


@pytest.fixture(scope="module")
def docs_dag_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs-dags")


@pytest.fixture(autouse=True)
def docs_environment(nsqd: Any, docs_dag_bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``nsq_default`` is the test nsqd; the docs' DAG files form a bundle of their own."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{nsqd.tcp_address}?http_port={nsqd.http_port}"
    )
    key = "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"
    bundles = json.loads(os.environ.get(key) or "[]")
    docs = {
        "name": "docs",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(docs_dag_bundle)},
    }
    monkeypatch.setenv(key, json.dumps([docs, *bundles]))


def _compile(snippet: Snippet, block: PythonBlock, testbed: Testbed) -> tuple[str, types.CodeType]:
    source = snippet.code
    for placeholder, value in PLACEHOLDERS.items():
        if placeholder in source:
            source = source.replace(placeholder, value(testbed))
    # Blank lines in front, so a traceback names the page's own line numbers.
    padded = "\n" * (snippet.line - 1) + source
    return source, compile(padded, str(ROOT / block.page), "exec")


def _exception_named(name: str, namespace: dict[str, Any]) -> type[BaseException]:
    found = namespace.get(name)
    if found is None:
        from airflow_provider_nsq.protocol import errors

        found = getattr(errors, name, None) or getattr(builtins, name, None)
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise LookupError(f"'test raises: {name}': no exception class of that name")
    return found


def _run(block: PythonBlock, namespace: dict[str, Any], testbed: Testbed, bundle: Path) -> None:
    namespace["testbed"] = testbed
    if _uses_name(block, "spark"):
        pytest.importorskip("pyspark", reason="the [spark] extra is not installed")
        namespace["spark"] = testbed.fixture("spark")
    if block.setup is not None:
        exec(_compile(block.setup, block, testbed)[1], namespace)
    before = dict(namespace)
    source, code = _compile(block.code, block, testbed)
    if _DEFINES_DAG.search(source):
        testbed.fixture("airflow_db")
        stem = re.sub(r"\W", "_", f"{block.page}_{block.line}")
        testbed.dag_file = bundle / f"{stem}.py"
        testbed.dag_file.write_text(source, encoding="utf-8")
    if block.raises is not None:
        with pytest.raises(_exception_named(block.raises, namespace)):
            exec(code, namespace)
    else:
        exec(code, namespace)
    defined = [value for name, value in namespace.items() if before.get(name) is not value]
    for value in defined:
        if isinstance(value, types.FunctionType) and value.__name__.startswith("test_"):
            testbed.call_test(value)
    if block.check is not None:
        exec(_compile(block.check, block, testbed)[1], namespace)


def _param(block: PythonBlock) -> Any:
    marks = [pytest.mark.spark] if _uses_name(block, "spark") else []
    return pytest.param(block, id=str(block), marks=marks)


@pytest.mark.parametrize("block", [_param(block) for block in BLOCKS])
def test_block(
    block: PythonBlock, request: pytest.FixtureRequest, tmp_path: Path, docs_dag_bundle: Path
) -> None:
    if block.not_run is not None:
        pytest.skip(f"not run: {block.not_run}")
    testbed = Testbed(request, tmp_path)
    page = _pages.setdefault(block.page, PageRun({"__name__": f"docs:{block.page}"}))
    for earlier in BLOCKS:
        if (
            earlier.page == block.page
            and earlier.line < block.line
            and earlier.line not in page.ran
            and earlier.not_run is None
        ):
            page.ran.add(earlier.line)
            try:
                _run(earlier, page.namespace, testbed, docs_dag_bundle)
            except Exception as exc:
                raise AssertionError(f"{earlier}, which {block} follows, failed") from exc
    page.ran.add(block.line)
    _run(block, page.namespace, testbed, docs_dag_bundle)


def test_every_block_is_found() -> None:
    """Each ```python fence of README.md and docs/*.md is a test (none silently missed)."""
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        fences = page.read_text(encoding="utf-8").count("```python")
        assert fences == sum(block.page == name for block in BLOCKS), name
