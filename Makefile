# The two commands a new user needs: `make demo` and `make test` (see README.md).
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
# The documentation site's own environment (`make docs`): see below.
DOCS_VENV  ?= .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed-stamp
# Pins that keep the resolver on versions checked together. pyspark and pyspark-client
# (which the Spark provider pulls in) install into one pyspark/ folder: keep them equal.
# The object-storage test's S3 stack (moto's server, the Amazon provider with s3fs) is
# pinned whole: boto3, botocore and aiobotocore each cap the others' versions, and from
# PyPI alone pip backtracked through their releases for 29 minutes and gave up
# (resolution-too-deep); pinned, `make install` resolves in about a minute.
PINS    := "apache-airflow==3.3.2" "pyspark==4.2.0" "pyspark-client==4.2.0" "pandas<3" \
	"apache-airflow-providers-amazon==9.38.0" "moto==5.2.6" "s3fs==2026.9.0" \
	"aiobotocore==3.10.0" "boto3==1.43.117" "botocore==1.43.117"

.PHONY: install hooks check test lint typecheck pytest docs matrix-ci compat dist demo bench bench-check clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]" $(PINS)
	touch $(STAMP)

install: $(STAMP)

# The git hook that runs the checks below on the files of each commit, and refuses the
# commit when one fails. Only when asked: `make install` leaves .git/hooks alone.
# `$(VENV)/bin/pre-commit uninstall` removes it.
hooks: $(STAMP)
	$(VENV)/bin/pre-commit install

# The project's checks, listed once in .pre-commit-config.yaml (the git hook runs the
# same list): ruff lint and format, mypy, the import contracts, the generated blocking
# modules (unasync) being current, the YAML and TOML files,
# the GitHub workflows (actionlint) and issue forms. Local tools from .venv, no download.
lint: $(STAMP)
	$(VENV)/bin/pre-commit run --all-files

# mypy alone, as `make lint` runs it.
typecheck: $(STAMP)
	$(VENV)/bin/pre-commit run mypy --all-files

# The suite on PYTEST_WORKERS processes (pytest-xdist), a test file each at a time: its
# tests mostly wait on sockets, daemons and Airflow, so on 2 cores three workers take
# about half the time of one (1 worker: ~27 min, 3: ~13 min). PYTEST_WORKERS=0 runs it in
# this process, for debugging.
PYTEST_WORKERS ?= 3
pytest: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/pytest --durations=25 \
		-n $(PYTEST_WORKERS) --dist loadfile

# The everyday path: the checks (mypy among them), the docs site and the whole suite on
# the pinned (newest) Airflow; no version matrix, no release build.
check: lint docs pytest

# CI (.ci/run): `make check`, then the matrix sessions tagged "ci" (noxfile.py): the wheel
# from `make dist` beside the oldest supported Airflow (the Airflow-layer tests), and the
# Spark tests on the oldest and the newest PySpark.
test: check matrix-ci

# The documentation site's environment: the [docs] extra's requirements alone (MkDocs,
# Material, mkdocstrings), about 190 MB. Not the package: mkdocstrings (griffe) reads its
# source without importing it, and scripts/docs_*.py import only MkDocs and griffe, so
# neither Airflow nor PySpark is needed to render the site.
$(DOCS_STAMP): pyproject.toml
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install -q --upgrade pip
	$(DOCS_VENV)/bin/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs']))" > $(DOCS_VENV)/requirements.txt
	$(DOCS_VENV)/bin/python -m pip install -q -r $(DOCS_VENV)/requirements.txt
	touch $(DOCS_STAMP)

# The documentation site, built strictly: a broken link or anchor, a missing reference or
# a docstring warning fails it. Open site/index.html, or serve it with
# `$(DOCS_VENV)/bin/mkdocs serve`.
docs: $(DOCS_STAMP)
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir site
	@echo "The site is in site/: open $(abspath site)/index.html"

# The sdist and the wheel, checked as PyPI would (twine) and for their license files.
# RELEASE_TAG (the release workflow sets it to the pushed tag, v0.2.0) must name the
# package's version.
RELEASE_TAG ?=
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*
	$(PY) scripts/check_dist.py dist $(if $(RELEASE_TAG),--tag "$(RELEASE_TAG)")

matrix-ci: dist
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/nox --tags ci

# Every supported Airflow and PySpark version (docs/compatibility.md); CI runs a part.
# NOX_ARGS picks sessions: CI's jobs for the newer Pythons run
# `make compat NOX_ARGS="--python 3.12"` (the newest Airflow and PySpark, the library).
NOX_ARGS ?=
compat: dist
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/nox $(NOX_ARGS)

demo: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) scripts/demo.py

bench: $(STAMP)
	$(PY) benchmarks/codec.py
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/event_batching.py
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) benchmarks/spark_writer.py --rows 100000
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) benchmarks/spark_reader.py --messages 200000
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) benchmarks/spark_source_ceiling.py --rows 200000

# What one PUB, MPUB, connect, consumed message, asyncio PUB and message through the consume
# operator cost, counted, and how many files and cross-file calls a PUB and an event take
# (valgrind's instructions, strace's system calls, Python calls; a tool that is missing
# skips its count and says so): fails when one is over its budget in
# benchmarks/op_cost.py or benchmarks/path_length.py. Counts, not times: the same on a
# busy machine. A few minutes.
bench-check: $(STAMP)
	$(PY) benchmarks/op_cost.py --check --ops pub,mpub,connect,consume,async-pub,operator-consume \
		--measure instructions,syscalls,calls
	$(PY) benchmarks/path_length.py --check

clean:
	rm -rf $(VENV) $(DOCS_VENV) .mypy_cache .ruff_cache .pytest_cache .nox build dist site *.egg-info
