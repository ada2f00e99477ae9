# Two entry points (see README): `make book` builds the HTML, `make test` runs every test.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt pyproject.toml | cksum | cut -d' ' -f1)
NBVAL := --nbval-lax --nbval-current-env --nbval-cell-timeout=1800 --ignore-glob='*.ipynb'
JOBS ?= 2
# Kernels and tests import sensbook from this checkout, whatever the editable install points at.
export PYTHONPATH := $(CURDIR)

.PHONY: setup book book-ci test unit chapters sync clean bench
setup: $(STAMP)
$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.txt > $(VENV)/pip.log 2>&1 \
	  || (cat $(VENV)/pip.log; exit 1)
	rm -f $(VENV)/.installed-*; touch $@

# The HTML book at the scale readers see (SENSBOOK_SCALE=book), built from clean with -W.
book: setup
	rm -rf _build
	SENSBOOK_SCALE=$${SENSBOOK_SCALE:-book} SENSBOOK_PROGRESS=0 $(BIN)/jupyter-book build . -W -n --keep-going
	@echo "open _build/html/index.html"

book-ci: setup
	rm -rf _build
	SENSBOOK_SCALE=ci SENSBOOK_PROGRESS=0 $(BIN)/jupyter-book build . -W -n --keep-going

# Every test: unit tests, every chapter under nbval at ci scale, and the ci-scale HTML build.
test: setup unit chapters book-ci

unit: setup
	SENSBOOK_SCALE=ci SENSBOOK_PROGRESS=0 $(BIN)/python -m pytest -q -n $(JOBS) tests

chapters: setup
	SENSBOOK_SCALE=ci SENSBOOK_PROGRESS=0 $(BIN)/python -m pytest -q $(NBVAL) -n $(JOBS) --dist loadfile book

# After editing a chapter's .md: refresh its paired .ipynb (Colab opens that one).
sync: setup
	$(BIN)/jupytext --sync book/ch*.md

clean:
	rm -rf _build

# Performance figures on this machine (CPU, and CUDA when present); a few minutes on 2 cores.
# On a shared machine: make bench BENCH_ARGS="--threads 1 --clock cpu"
bench: setup
	$(BIN)/python benchmarks/bench.py $(BENCH_ARGS)
