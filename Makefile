# tff_quant: `make demo` (the main job) and `make test` (the whole suite).
# Each target sets up what it needs: the .venv (re-made when a requirements file
# changes) and, where apt-get is available, the Debian Fashion-MNIST files.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
export TF_CPP_MIN_LOG_LEVEL ?= 2
# Python writes the bytecode of what it imports, so later processes read it.
# Where the environment sets PYTHONDONTWRITEBYTECODE (this CI image does),
# every process that imports TensorFlow compiled its ~2,000 files again:
# 18 s of CPU each, measured, and the suite's binaries start hundreds.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test setup data benchmarks clean

$(STAMP): requirements.txt requirements-tff.txt requirements-dev.txt setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# --no-compile: Python compiles what it imports, when it does (pip would
	@# compile every file of TensorFlow first: about a minute).
	$(PY) -m pip install -q --no-compile -r requirements.txt -r requirements-dev.txt
	@# TFF 0.87 pins jax/jaxlib 0.4.14, which the index lacks: its deps are pinned
	@# in requirements.txt (jax 0.4.13), so TFF itself goes in without them.
	$(PY) -m pip install -q --no-compile --no-deps -r requirements-tff.txt
	$(PY) -m pip install -q --no-compile --no-deps -e .
	@touch $(STAMP)

setup: $(STAMP) data

data:
	@if [ ! -f $(FMNIST) ]; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq dataset-fashion-mnist; \
	  else echo "apt-get not found: put the Fashion-MNIST IDX files in a folder and pass --data_dir"; fi; \
	fi

demo: setup
	$(PY) -m experiments.fl_emnist --dataset=fashion_mnist --mechanism=rqm \
	  --rounds=20 --clients_per_round=30 --total_clients=300 --eval_every=5 \
	  --model=small_cnn --clip_norm=1.0 --client_lr=0.05 --batch_size=32 --max_test_examples=5000 \
	  --target_epsilon=10 --rotate --coordinate_clip_multiple=3 --clients_per_slot=15 \
	  --root_output_dir=runs/demo --experiment_name=demo_rqm --fresh

# The suite runs in pytest-xdist workers, 3 per 2 cores (TEST_WORKERS=0 runs
# it in one process): a worker waits on the processes it starts (binaries,
# TFF's workers) part of its time, and with one per core ~13% of the CPU
# stayed idle (benchmarks/test_workers, docs/performance.md). Tests that run
# a binary check only their own session's processes
# (tests/experiments/binaries.py), so parallel workers do not see each other's.
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n + n / 2 )))
test: setup
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal --durations=25

benchmarks: setup
	$(PY) -m benchmarks.encode_throughput
	$(PY) -m benchmarks.accounting_speed
	$(PY) -m benchmarks.round_overhead

clean:
	rm -rf $(VENV) runs build *.egg-info

# Bazel 4.2.3 (Debian's bazel-bootstrap), offline: builds every target of BUILD
# and runs BAZEL_TESTS (docs/bazel.md). Not part of `test` or CI.
# The server runs niced with one job (.bazelrc) and is shut down at the end.
BAZEL := nice -n 19 bazel --output_base=$(CURDIR)/bazel-output-base
BAZEL_TESTS ?= //:tests_mechanisms //:tests_accounting
.PHONY: bazel-test
bazel-test: $(STAMP)
	@if ! command -v bazel >/dev/null 2>&1 || [ ! -d /usr/share/bazel/rules/java ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bazel-bootstrap bazel-rules-java; \
	fi
	$(BAZEL) build //... && $(BAZEL) test $(BAZEL_TESTS); \
	  status=$$?; $(BAZEL) shutdown; exit $$status
