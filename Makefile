# seglake: the two commands are `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: venv demo test lint bench fuzz clean

venv: $(STAMP)

# native/: the optional C kernel of the record codec, installed into site-packages (a
# packed venv carries it to executors); without a C compiler seglake runs its numpy code.
$(STAMP): pyproject.toml native/pyproject.toml native/setup.py native/seglake_native.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,test]'
	$(PY) -m pip install --quiet --force-reinstall --no-deps ./native \
	  || echo "seglake_native (C kernel) not built: seglake runs its numpy code"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m seglake.demo

test: lint
	$(PY) -m pytest -q tests

# ruff (lint and format) on the whole tree, mypy on lib/seglake (config: pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check lib jobs tests bench
	$(VENV)/bin/ruff format --check lib jobs tests bench
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/run.py $(if $(QUICK),--quick)

fuzz: $(STAMP)
	SEGLAKE_FUZZ_EXAMPLES=20000 $(PY) -m pytest -q tests/unit/test_fuzz.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis demo-lake
