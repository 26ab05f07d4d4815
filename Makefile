# The two commands of the README: `make run` (set-up + quickstart) and `make test` (set-up + tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_DIR ?= runs/quickstart
# The torch wheel set-up installs first; the project accepts any torch in [2.3, 3). GPU users pass their own,
# e.g. `make setup TORCH="torch==2.5.1"`, or install torch themselves before `pip install -e .`.
TORCH ?= torch==2.13.0

.PHONY: setup kernels run test test-kernels-off test-fast lint docs bench report-check gpu-check gpu-check-lm clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

# Set-up ends by building the optional compiled CPU kernels for this machine with the system's C compiler (a few
# seconds, once; `arena kernels build`). Without a compiler it says so and set-up goes on: the arena then trains in
# pure PyTorch, with the same results, slower (docs/running.md, "Compiled kernels").
setup: $(STAMP)
	-@$(PY) -m arena.engine.kernels build

kernels: setup

run: setup
	$(VENV)/bin/arena run scenarios/quickstart.yaml --out $(RUN_DIR)

# Everything, what CI runs (< 8 min on a quiet 2-core machine): four pytest-xdist workers (the suite waits on
# subprocesses, Ray and timeouts: two workers kept 1.14 cores busy of 2; four took 502 s where three took 553 s),
# a test file to each in turn, longest first (a file's module fixtures are built once); each worker's sandboxed
# attacks take users of their own. Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE): the suite's
# dozens of arena processes then compile the package once, and pytest keeps its rewritten test modules.
test: setup
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 4 --dist loadfile

# The suite again with the compiled kernels off (ARENA_KERNELS=off), as on a machine without a C compiler or on a
# GPU: every path in pure PyTorch, the tests that compare a kernel with its eager pass skipped. Whole by default
# (2026-12-06: 1,678 passed, 137 skipped, 429 s beside two other jobs), as CI runs it; KERNELS_OFF_TESTS narrows
# it to some test paths.
KERNELS_OFF_TESTS ?=
test-kernels-off: setup
	ARENA_KERNELS=off PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 4 --dist loadfile $(KERNELS_OFF_TESTS)

# The inner loop: tests that need no Ray cluster, no subprocess of the arena and are not slow (< 1 min), in two
# xdist workers.
test-fast: setup
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 2 --dist loadfile -m "not slow and not ray and not subprocess"

# ruff (style, imports, annotations) and mypy (types) to the code's own conventions.
lint: setup
	$(VENV)/bin/ruff check arena plugins tests benchmarks
	$(VENV)/bin/mypy

# The documentation site, built strictly (a broken link or a missing page is an error).
docs: setup
	$(PY) -m mkdocs build --strict --quiet --site-dir build/site

# Render the quickstart's report in headless Chromium (installed if missing), check it, keep a screenshot.
report-check: setup
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)
	$(VENV)/bin/arena run scenarios/quickstart.yaml --out $(RUN_DIR)
	ARENA_REPORT_RUN_DIR=$(RUN_DIR) ARENA_REPORT_SCREENSHOT=$(RUN_DIR)/report/screenshot.png \
		$(PY) -m pytest -q tests/report/test_report_browser.py
	@echo "report: $(RUN_DIR)/report/index.html; screenshot: $(RUN_DIR)/report/screenshot.png"

# Time each performance claim against its alternative; writes benchmarks/results.md (~15 min on 2 cores), keeping
# the GPU check's section (pair k) from the last `make gpu-check`.
bench: setup
	$(PY) -m pip install --quiet -e '.[bench,test]'
	$(PY) -m benchmarks --carry benchmarks/results.md

# On a machine with a GPU (< 3 min there): both engines (batched and loop) on the digits CNN pool and on the
# CIFAR-10 scenario shrunk, CPU vs CUDA to tolerance, seconds per model, the scenario's extrapolated time; writes
# pair k into benchmarks/results.md with the device's name and keeps every other section. Without CUDA it compares
# the CPU with itself and says so.
gpu-check: setup
	$(PY) -m pip install --quiet -e '.[bench,test]'
	$(PY) -m benchmarks --only k --threads 0 --carry benchmarks/results.md

# On a machine with a GPU: the language track's ~124M-parameter GPT-2 (seconds per step and peak memory of
# non-private, DP-SGD LoRA and DP-SGD full fine-tuning) and a tiny GPT-2 CPU vs CUDA to tolerance (pair n).
gpu-check-lm: setup
	$(PY) -m pip install --quiet -e '.[bench,test,language]'
	$(PY) -m benchmarks --only n --threads 0 --carry benchmarks/results.md

clean:
	rm -rf runs .pytest_cache
