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
	$(BIN)/polyrec train --preset dcnv2-small --data synthetic --steps 600 --batch-size 512 --eval-every 300 --log-every 100 --cpu-threads 1

# Two passes: kernels run through Triton's CPU interpreter; compile-only checks (marked `compile`)
# need real JITFunctions, so they run with the interpreter off. Exit code 5 means "no tests collected".
PYTEST := $(BIN)/python -m pytest -q --ignore=tests/gpu -n 2
test: $(STAMP)
	TRITON_INTERPRET=1 $(PYTEST) -m "not compile" tests
	$(PYTEST) -m compile tests || [ $$? -eq 5 ]

# On the GPU machine (no venv there: its image has torch and triton).
gpu-test:
	PYTHONPATH=. python3 -m pytest -q -p no:cacheprovider tests/gpu
