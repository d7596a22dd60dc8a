# DeepContext: two commands set everything up on a fresh machine.
#   make demo   - create .venv, install with every integration, profile the demo, print the report
#   make test   - install what the tests need, check the style (make lint) and run the whole suite
#   make bench  - run the benchmarks (ratios against peers measured in the same run)
#   make test-cuda - only the tests that need a CUDA device
#   make test-native - the C++ style and clang-tidy, then the native collector under ASan+UBSan and TSan

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
# Pinned versions we test (torch 2.13.0 is the CPU build).
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt
PYTEST_ARGS ?=

.PHONY: demo test lint test-cuda test-native bench install install-test browser clean

$(BIN)/python:
	@echo "== creating $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed-all: $(BIN)/python pyproject.toml constraints.txt $(wildcard native/*) $(wildcard dc_core/include/*) $(wildcard dc_torch/csrc/*)
	@echo "== installing DeepContext with every integration (torch, lightning, transformers, jax, tensorboard) into $(VENV): several minutes on a fresh machine"
	$(PIP) install -q -e ".[all]"
	@echo "== building the PyTorch operator-capture extension against the torch just installed"
	@# Build the RecordFunction extension against the torch just installed (cached by version and ABI).
	$(BIN)/python -m dc_torch.native || echo "warning: native operator capture not built; the Python capture path will be used"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed-all
	@echo "== installing the test tools (pytest, hypothesis, playwright, …)"
	$(PIP) install -q -e ".[all,test]"
	touch $@

install: $(VENV)/.installed-all

# speedscope's published file-format schema (npm), for the export tests.
SPEEDSCOPE_VERSION := 1.25.0
SPEEDSCOPE_SCHEMA  := $(VENV)/share/speedscope/file-format-schema.json

$(SPEEDSCOPE_SCHEMA):
	@echo "== fetching speedscope's file-format schema (npm speedscope@$(SPEEDSCOPE_VERSION))"
	mkdir -p $(dir $@)
	@command -v npm >/dev/null || { [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; } \
	  || echo "warning: npm missing; the speedscope schema test will fail under CI=true"
	-cd $(dir $@) && npm pack --silent speedscope@$(SPEEDSCOPE_VERSION) >/dev/null \
	  && tar -xzf speedscope-$(SPEEDSCOPE_VERSION).tgz --strip-components=3 package/dist/release/file-format-schema.json \
	  && rm speedscope-$(SPEEDSCOPE_VERSION).tgz && touch file-format-schema.json

install-test: $(VENV)/.installed-test browser $(SPEEDSCOPE_SCHEMA)

# The browser test drives Debian's chromium with Playwright; CI installs it here.
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium; the browser test will fail under CI=true"; \
	  else echo "note: /usr/bin/chromium missing; the browser test is skipped outside CI"; fi; \
	fi

demo: install
	$(BIN)/deepcontext demo

test: install-test lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Python style (pyproject.toml's [tool.ruff]): imports sorted, unused names, line length, layout.
lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The CUDA paths (Kineto kernels, the caching allocator, NVML) on a machine with a GPU.
test-cuda: install-test
	$(BIN)/python -m pytest -m requires_cuda -rs

# The C++ checked against .clang-format and .clang-tidy (with the versions pinned in
# constraints.txt), then the collector built with -fsanitize=address,undefined
# and, apart, thread, in build/native-*: its C++ unit tests, then the
# collector's contract tests and the native capture's tests against each
# sanitized module.
test-native: install-test
	@command -v cmake >/dev/null || $(PIP) install -q cmake
	$(PIP) install -q ninja pybind11 clang-format clang-tidy
	PATH="$(CURDIR)/$(BIN):$$PATH" PYTHON="$(CURDIR)/$(BIN)/python" tests/native/run.sh

bench: install
	@# synthetic.py writes the runs the scale benchmarks read; it is not one itself
	@set -e; for f in $(filter-out benchmarks/synthetic.py,$(wildcard benchmarks/*.py)); do echo "== $$f"; $(BIN)/python $$f; done

clean:
	rm -rf build $(VENV) test-artifacts runs
