# Two entry points for a fresh machine that has Python 3.11 and pip (see README):
#   make reproduce   set up .venv, then `snakemake --cores all` (render every table/figure from committed results)
#   make test        set up .venv, then the whole CPU test suite
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup reproduce test lint clean-venv

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

test: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m "not gpu" tests $(addprefix --ignore=,$(AOT_TESTS))
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m "not gpu" $(AOT_TESTS)

lint: setup
	$(BIN)/ruff check src tests kernels workflow/scripts
	$(BIN)/snakemake --lint
	$(BIN)/snakemake --lint --config compute=all

clean-venv:
	rm -rf $(VENV)
