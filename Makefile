# gputui: `make run` starts the monitor, `make test` runs the whole suite
# (`make test-quick`: without the slow tests that start training jobs).
# They create .venv on first use.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
# pytest-xdist workers for the test targets; each test file runs on one of them
# (module fixtures, such as a torchrun job, are started once).  0: no workers.
TEST_WORKERS ?= 2
XDIST  := -n $(TEST_WORKERS) --dist loadfile

.PHONY: run test test-quick lint bench screenshots demo clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PIP) install -e '.[test]'
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed-test pyproject.toml
	$(PIP) install -e '.[test,dev]'
	touch $@

## run: start the live monitor; with no NVIDIA driver, the embedded demo recording
run: $(VENV)/.installed
	$(VENV)/bin/gputui --demo-if-no-gpu $(ARGS)

## test: the whole test suite (GPU tests are skipped without a GPU)
test: $(VENV)/.installed-test
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

## test-quick: the suite less the tests marked slow (those that start training jobs)
test-quick: $(VENV)/.installed-test
	$(PY) -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

## lint: ruff, mypy and the import contracts
lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check gputui tests bench
	$(VENV)/bin/ruff format --check gputui tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

## bench: the CPU-side benchmarks that run anywhere (GPU ones: see docs/benchmarks.md)
bench: $(VENV)/.installed-test
	$(PY) bench/bench_tui.py replay --rounds 1
	$(PY) bench/bench_tui.py launch --demo --rounds 3
	$(PY) bench/bench_hook.py --cpu
	$(PY) bench/bench_attach.py --modes headless
	$(PY) bench/bench_findings.py
	$(PY) bench/bench_containers.py

## screenshots: render screenshots/ from the embedded demo recording
screenshots: $(VENV)/.installed-dev
	$(PY) bench/screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
