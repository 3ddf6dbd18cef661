# seglake: the two commands are `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: venv jars weed demo test lint bench fuzz clean kafka s3

venv: $(STAMP) jars

# jars/: pinned Maven lists, fetched with mvn into .jars/ (ignored, cached): kafka/ is
# Apache Kafka's broker and tools (the tests and benches that put Kafka in the loop),
# spark/ is what Spark's classpath gets when present (Spark's Kafka connector, delta-spark;
# only the jars pyspark lacks). Without java or mvn the Kafka tests skip, saying why.
JARS := .jars
SPARK_JARS := spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2,delta-spark_4.2_2.13,delta-storage
jars: $(JARS)/.fetched

$(JARS)/.fetched: jars/kafka/pom.xml jars/spark/pom.xml
	@if ! command -v mvn >/dev/null || ! command -v java >/dev/null; then \
	  echo "jars: no mvn or java here: the Kafka broker, connector and Delta tests will skip"; \
	else \
	  rm -rf $(JARS) && \
	  mvn -q -B -Dstyle.color=never -f jars/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory=$(abspath $(JARS))/kafka && \
	  mvn -q -B -Dstyle.color=never -f jars/spark/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DincludeArtifactIds=$(SPARK_JARS) -DoutputDirectory=$(abspath $(JARS))/spark && \
	  touch $@; \
	fi

# .bin/weed: SeaweedFS (Apache-2.0), the S3-compatible server of the object-storage tests,
# benches and `make s3`, built from the pinned Go module version (go install refuses the
# module for its replace directives, so it is built inside the module cache; ~10 CPU-minutes
# cold, seconds from go's build cache). Without go the object-storage tests skip, saying why.
WEED_VERSION := v0.0.0-20261109003541-7506e5f91cd6
WEED := .bin/weed
weed: $(WEED)

$(WEED):
	@if ! command -v go >/dev/null; then \
	  echo "weed: no go here: the object-storage tests will skip"; \
	else \
	  GOFLAGS=-mod=mod go mod download github.com/seaweedfs/seaweedfs@$(WEED_VERSION) && \
	  cd "$$(go env GOMODCACHE)/github.com/seaweedfs/seaweedfs@$(WEED_VERSION)" && \
	  GOFLAGS=-mod=mod go build -trimpath -o $(abspath $(WEED)) ./weed; \
	fi

# native/: the optional C kernel of the record codec, installed into site-packages (a
# packed venv carries it to executors); without a C compiler seglake runs its numpy code.
$(STAMP): pyproject.toml native/pyproject.toml native/setup.py native/seglake_native.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,test]'
	$(PY) -m pip install --quiet --force-reinstall --no-deps ./native \
	  || echo "seglake_native (C kernel) not built: seglake runs its numpy code"
	touch $(STAMP)

demo: $(STAMP) jars
	$(PY) -m seglake.demo

# notebooks/explore.ipynb executed and saved with its outputs (plots), on a small sample
# lake (demo-lake/notebook-lake; SEGLAKE_LAKE=path for another)
.PHONY: notebook
notebook: $(STAMP) jars
	$(PY) -m seglake.notebook

# A Kafka broker (KRaft, broker+controller) on 127.0.0.1 over ./kafka-data (KAFKA_DATA=dir):
# prints its bootstrap address, Ctrl-C stops it cleanly (seglake/kafka_broker.py, as the tests).
KAFKA_DATA ?= kafka-data
kafka: $(STAMP) jars
	$(PY) -m seglake.kafka_broker $(KAFKA_DATA)

# SeaweedFS's S3 on 127.0.0.1 over ./s3-data (S3_DIR=dir; S3_PORT=port, else a free one),
# in the foreground: prints its endpoint and the AWS_... lines a client needs; Ctrl-C or
# SIGTERM stops it (seglake/s3_server.py, as the tests).
S3_DIR ?= s3-data
S3_PORT ?=
s3: $(STAMP) $(WEED)
	$(PY) -m seglake.s3_server $(S3_DIR) $(S3_PORT)

# Two pytest processes side by side on a 2-core machine: the Spark tests (one local[2]
# session, the brokers; mostly JVMs waiting) and the Spark-free ones (single-threaded
# Python), whose output follows the Spark part's; the target fails if either fails. The
# Spark files whose time is mostly drivers of their own (a standalone cluster, killed
# drivers, spark-submit.sh, a notebook kernel) run in the second process after the
# Spark-free ones (a local[2] session of its own if they need one): each process then
# takes about half the time instead of one taking two thirds.
SPARK_SOLO = tests/spark/test_cluster.py tests/spark/test_crash.py \
  tests/spark/test_job_errors.py tests/spark/test_notebook.py
test: lint jars $(WEED)
	@echo "tests/unit, tests/compat, then SPARK_SOLO's Spark files run beside the rest of tests/spark; their output follows"
	@$(PY) -m pytest -q --durations=10 tests/unit tests/compat $(SPARK_SOLO) \
	    > .test-unit.log 2>&1 & unit=$$!; \
	  trap 'kill $$unit 2>/dev/null' INT TERM; \
	  $(PY) -m pytest -q --durations=15 tests/spark $(SPARK_SOLO:%=--ignore=%); spark=$$?; \
	  wait $$unit; rc=$$?; cat .test-unit.log; \
	  [ $$spark -eq 0 ] && [ $$rc -eq 0 ]

# ruff (lint and format) on the whole tree, mypy on lib/seglake (config: pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check lib jobs tests bench
	$(VENV)/bin/ruff format --check lib jobs tests bench
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/run.py $(if $(QUICK),--quick)

# make test runs the same fuzz targets briefly (300 examples a property, 30 a file kind)
fuzz: $(STAMP)
	SEGLAKE_FUZZ_EXAMPLES=20000 $(PY) -m pytest -q tests/unit/test_fuzz.py tests/unit/test_fuzz_files.py

clean:
	rm -rf $(VENV) $(JARS) .bin .pytest_cache .hypothesis demo-lake
