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

.PHONY: run test test-quick test-torch lint bench screenshots clean

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

## test: the whole test suite (GPU tests are skipped without a GPU; the Prometheus and
## `cluster --ssh` tests skip without Debian's prometheus and openssh-server, which
## .ci/run installs with apt-get when it runs as root)
test: $(VENV)/.installed-test
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

## test-quick: the suite less the tests marked slow (those that start training jobs)
test-quick: $(VENV)/.installed-test
	$(PY) -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

#: the test files that run torch: the hook, its sampler, torch.compile, captures,
#: FLOP counts and traces (slow ones included)
TORCH_TESTS := tests/unit/test_compile_watch.py tests/unit/test_hook_recorder.py \
	tests/unit/test_hook_workers.py tests/unit/test_model_flops.py tests/unit/test_op_costs.py \
	tests/unit/test_roofline.py tests/unit/test_sampler.py tests/unit/test_trace_file.py \
	tests/unit/test_profile_protocol.py tests/unit/test_ceilings.py \
	$(sort $(wildcard tests/integration/test_hook*.py)) tests/integration/test_trace_capture.py \
	tests/integration/test_attach_cli.py tests/integration/test_attach_memory.py \
	tests/integration/test_attach_report.py tests/integration/test_faults.py \
	tests/integration/test_ranks.py tests/integration/test_hostile_text.py \
	tests/integration/test_analyze_cli.py tests/tui/test_tui_attach.py tests/tui/test_tui_python.py

## test-torch: the tests that run torch, with another interpreter and its torch (the
## oldest supported is 2.4): make test-torch TORCH_PY=/path/to/venv/bin/python.  That
## Python needs pytest, pytest-xdist, pytest-asyncio, hypothesis, textual, psutil,
## nvidia-ml-py and rich; gputui comes from this checkout
test-torch:
	@test -n "$(TORCH_PY)" || { echo "make test-torch: set TORCH_PY=/path/to/python" >&2; exit 2; }
	$(TORCH_PY) -c "import torch; print('torch', torch.__version__)"
	PYTHONPATH=$(CURDIR) $(TORCH_PY) -m pytest -q -p no:cacheprovider $(XDIST) $(PYTEST_ARGS) \
		$(TORCH_TESTS)

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
