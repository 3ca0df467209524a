# Two entry points for a fresh machine that has Python 3.11 and pip (see README):
#   make reproduce   set up .venv, then `snakemake --cores all` (render every table/figure from committed results)
#   make test        set up .venv, then the fast CPU test suite (make test-slow: the slow-marked rest; CI runs both)
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup reproduce test test-slow test-all lint clean-venv

$(BIN)/lethe: pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (the artifact's environment is CPython 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,workflow]"
	@touch $(BIN)/lethe

setup: $(BIN)/lethe

reproduce: setup
	$(BIN)/snakemake --cores all

# Two pytest processes: Triton's CPU interpreter and its real (ahead-of-time) compiler cannot share one process
# (after either has run, the other fails inside Triton), so the AOT tests run on their own.
AOT_TESTS := tests/aot tests/kernels/gdn_native

# `make test` is the fast CPU suite (minutes on 2 cores); tests marked `slow` (end-to-end sandboxed runs, builds,
# real-size probes) run in `make test-slow`. CI (.ci/run) runs both; `make test-all` is the same pair.
test: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m "not gpu and not slow" tests $(addprefix --ignore=,$(AOT_TESTS))
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m "not gpu and not slow" $(AOT_TESTS)

test-slow: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m "slow and not gpu" tests $(addprefix --ignore=,$(AOT_TESTS))
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m "slow and not gpu" $(AOT_TESTS)

test-all: test test-slow

lint: setup
	$(BIN)/ruff check src tests kernels workflow/scripts
	$(BIN)/snakemake --lint
	$(BIN)/snakemake --lint --config compute=all

clean-venv:
	rm -rf $(VENV)
