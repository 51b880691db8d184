# The two commands a new user needs: `make demo` and `make test` (see README.md).
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
# Pins that keep the resolver on versions checked together. pyspark and pyspark-client
# (which the Spark provider pulls in) install into one pyspark/ folder: keep them equal.
PINS    := "apache-airflow==3.3.2" "pyspark==4.2.0" "pyspark-client==4.2.0" "pandas<3"

.PHONY: install test lint typecheck pytest demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,spark,apache-spark,messaging]" $(PINS)
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/pytest

test: lint typecheck pytest

demo: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) scripts/demo.py

bench: $(STAMP)
	$(PY) benchmarks/codec.py
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/event_batching.py
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) benchmarks/spark_writer.py --rows 100000
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) benchmarks/spark_reader.py --messages 200000
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) benchmarks/spark_source_ceiling.py --rows 200000

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build *.egg-info
