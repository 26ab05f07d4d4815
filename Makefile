# The two commands of the README: `make run` (set-up + quickstart) and `make test` (set-up + tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_DIR ?= runs/quickstart

.PHONY: setup run test bench report-check clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(VENV)/bin/arena run scenarios/quickstart.yaml --out $(RUN_DIR)

test: setup
	$(PY) -m pytest -q

clean:
	rm -rf runs .pytest_cache
