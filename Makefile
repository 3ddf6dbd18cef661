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

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m seglake.demo

test: $(STAMP)
	$(PY) -m pytest -q tests

# ruff check only: the tree was never run through `ruff format` as a whole, and reformatting
# it at once would collide with work in progress (format the files you change instead).
lint: $(STAMP)
	$(VENV)/bin/ruff check lib jobs tests bench

bench: $(STAMP)
	$(PY) bench/encode.py

fuzz: $(STAMP)
	SEGLAKE_FUZZ_EXAMPLES=20000 $(PY) -m pytest -q tests/unit/test_fuzz.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis demo-lake
