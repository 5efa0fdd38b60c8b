# The two commands of the README. Each creates .venv with the pinned dependencies when absent.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv gpu-test

$(STAMP): requirements/dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/polyrec hw detect
	$(BIN)/polyrec hw list

test: $(STAMP)
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q tests --ignore=tests/gpu

# On the GPU machine (no venv there: its image has torch and triton).
gpu-test:
	PYTHONPATH=. python3 -m pytest -q tests/gpu
