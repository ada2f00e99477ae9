# Two entry points (see README): `make book` builds the HTML, `make test` runs every test.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt constraints.txt pyproject.toml | cksum | cut -d' ' -f1)
NBVAL := --nbval-lax --nbval-current-env --nbval-cell-timeout=1800 --ignore-glob='*.ipynb'
JOBS ?= 2
# Kernels and tests import sensbook from this checkout, whatever the editable install points at.
export PYTHONPATH := $(CURDIR)
# Python keeps its byte-code cache (under .venv/pycache, out of the source tree) even where the
# environment turns it off (PYTHONDONTWRITEBYTECODE=1, as on this project's machines): without
# it every process of a build or a test run (the sweep's workers, each chapter's kernel, each
# nbval run) compiles torch, numpy, scipy and matplotlib from source again (measured on the
# 2-core AMD EPYC: importing sensbook, matplotlib and scipy.stats takes 12 CPU s without a
# cache, 4.5 s with one).
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX ?= $(CURDIR)/$(VENV)/pycache

.PHONY: experiments mutants book-portable portable-ci
.PHONY: setup assets book book-ci book-publish test unit unit-cuda chapters colab-test site-test chromium sync clean bench slurm-test
# The browser test drives this Chromium (Debian's package; Playwright never downloads browsers).
CHROMIUM ?= /usr/bin/chromium
export SENSBOOK_CHROMIUM := $(CHROMIUM)
setup: $(STAMP)
# constraints.txt: the one resolution the book is built and tested with (package ranges stay loose)
$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile --disable-pip-version-check -c constraints.txt -r requirements.txt > $(VENV)/pip.log 2>&1 \
	  || (cat $(VENV)/pip.log; exit 1)
	rm -f $(VENV)/.installed-*; touch $@

# MathJax and the widget JavaScript, served by the book itself (offline-complete HTML): fetched
# from the npm registry (pinned, integrity-checked) into the git-ignored _site_assets/.
assets: setup
	$(BIN)/python tools/site_assets.py site

# The HTML book at the scale readers see (SENSBOOK_SCALE=book), built from clean with -W.
# First every experiment of every chapter is computed (or read: results/ keeps them, keyed on
# the code that computes them) by two worker processes of one thread each, so the cores are
# never oversubscribed; then the notebooks execute, one thread each, reading those results.
# A second `make book` finds everything stored and only executes and renders the chapters.
# The chapters run $(JOBS) at a time into a fresh notebook cache (tools/execute.py), which the
# build then renders: every chapter still runs on every build.
book: setup assets experiments
	rm -rf _build
	OMP_NUM_THREADS=1 SENSBOOK_SCALE=$${SENSBOOK_SCALE:-book} SENSBOOK_PROGRESS=0 \
	  $(BIN)/python tools/execute.py --cache _build/.jupyter_cache --config _build/config.yml --jobs $(JOBS)
	OMP_NUM_THREADS=1 SENSBOOK_SCALE=$${SENSBOOK_SCALE:-book} SENSBOOK_PROGRESS=0 \
	  $(BIN)/jupyter-book build . --config _build/config.yml -W -n --keep-going
	@echo "open _build/html/index.html"

# Every experiment at the book's scale ($$SENSBOOK_SCALE, default book), stored in results/.
experiments: setup
	SENSBOOK_SCALE=$${SENSBOOK_SCALE:-book} $(BIN)/sensbook sweep all --workers $(JOBS)

# The chapters at ci scale against deliberately broken copies of the package (tools/mutants.py):
# each mutant must make some chapter fail, except the harmless must-survive one (the learning
# rate times 1 + 1e-6: rounding only), under which every training chapter must still pass.
# Not part of `make test` (11 min on 2 cores, plus about 7 for the harmless one).
mutants: setup
	$(BIN)/python tools/mutants.py $(MUTANTS)

# Do the book's asserts hold on every reader's CPU? (tools/portable.py, issue 43.) Float32
# training is chaotic and torch's CPU kernel paths (ATEN_CPU_CAPABILITY=default|avx2|avx512)
# differ in the last bits: for each path this machine offers, every chapter is executed under
# nbval against its own store results-<scale>-<path>/ (every experiment recomputed on that
# path), and a table chapter x path -> pass/fail is printed. Book scale: about three `make book`s.
book-portable: setup
	$(BIN)/python tools/portable.py --scale $${SENSBOOK_SCALE:-book} --jobs $(JOBS)

# Part of `make test`: the chapters that train, at ci scale, on every path but the native one
# (which `make chapters` runs), each path with its own store.
portable-ci: setup
	$(BIN)/python tools/portable.py --scale ci --chapters training --skip-native --jobs $(JOBS)

book-ci: setup assets
	rm -rf _build
	OMP_NUM_THREADS=1 SENSBOOK_SCALE=ci SENSBOOK_PROGRESS=0 \
	  $(BIN)/python tools/execute.py --cache _build/.jupyter_cache --config _build/config.yml --jobs $(JOBS)
	SENSBOOK_SCALE=ci SENSBOOK_PROGRESS=0 $(BIN)/jupyter-book build . --config _build/config.yml -W -n --keep-going

# What .github/workflows/publish.yml builds: `make book`, but through the notebook cache in
# .jupyter_cache/ (kept between workflow runs, keyed on sensbook/** and the chapters), so an
# unchanged chapter is not recomputed. A plain `jupyter-book build .` keeps `force` (_config.yml).
book-publish: setup assets
	rm -rf _build
	OMP_NUM_THREADS=1 SENSBOOK_SCALE=$${SENSBOOK_SCALE:-book} SENSBOOK_PROGRESS=0 \
	  $(BIN)/python tools/execute.py --cache .jupyter_cache --config _build/config.yml --jobs $(JOBS)
	SENSBOOK_SCALE=$${SENSBOOK_SCALE:-book} SENSBOOK_PROGRESS=0 $(BIN)/jupyter-book build . \
	  --config _build/config.yml -W -n --keep-going

# Two pytest workers share 2 cores: one thread each (OMP_NUM_THREADS=1) avoids oversubscription.
# Every test: unit tests, the one-node Slurm cluster test, every chapter under nbval at ci scale,
# the ci-scale HTML build, then the built site in headless Chromium plus its internal links
# (screenshots: _build/site-test/).
test: setup unit slurm-test chapters portable-ci colab-test book-ci site-test

unit: setup
	OMP_NUM_THREADS=1 SENSBOOK_SCALE=ci SENSBOOK_PROGRESS=0 $(BIN)/python -m pytest -q -n $(JOBS) tests --ignore=tests/site --ignore=tests/colab --ignore=tests/runtime/test_slurm.py

# A one-node Slurm cluster on this machine (tools/slurm_cluster.sh: Debian's slurmctld, slurmd,
# slurm-client and munge, installed with apt-get when missing) runs ci-scale sweeps as job arrays
# and stops again (tests/runtime/test_slurm.py; skipped only without root or apt-get). About two minutes.
slurm-test: setup
	OMP_NUM_THREADS=1 SENSBOOK_SCALE=ci SENSBOOK_PROGRESS=0 $(BIN)/python -m pytest -q tests/runtime/test_slurm.py

# Checks the HTML in _build/html (run `make book-ci` or `make book` first).
site-test: setup chromium
	SENSBOOK_SITE_REQUIRED=1 $(BIN)/python -m pytest -q tests/site

# Debian's Chromium, installed when missing (CI machines start without it).
chromium:
	@test -x "$(CHROMIUM)" || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    --no-install-recommends chromium fonts-dejavu-core > /dev/null; }
	@test -x "$(CHROMIUM)" || { echo "no Chromium at $(CHROMIUM)"; exit 1; }

chapters: setup
	OMP_NUM_THREADS=1 SENSBOOK_SCALE=ci SENSBOOK_PROGRESS=0 $(BIN)/python -m pytest -q $(NBVAL) -n $(JOBS) --dist loadfile book

# Every committed notebook run as a reader runs it in Colab (tests/colab/): a fresh Colab-like
# runtime each (Colab's ipywidgets, numpy, matplotlib, IPython; this machine's torch), the install
# cell pointed at the checkout, ci scale, a third of each experiment's results in a published
# store on 127.0.0.1, a third stored, a third computed; the banner is held to what happened and
# every widget callback timed at its slowest setting. .colab-venv/ is built on the first run.
colab-test: setup
	OMP_NUM_THREADS=1 SENSBOOK_SCALE=ci $(BIN)/python -m pytest -q -n $(JOBS) tests/colab

# After editing a chapter's .md: regenerate its .ipynb (what Colab opens) from it
# (tools/notebooks.py; idempotent, and tests/test_chapters.py fails until it has run).
sync: setup
	$(BIN)/python tools/notebooks.py

clean:
	rm -rf _build

# Performance figures on this machine (CPU, and CUDA when present); a few minutes on 2 cores.
# On a GPU machine: only the tests that exercise CUDA (a minute or two), not the CPU suite
unit-cuda: setup
	OMP_NUM_THREADS=1 SENSBOOK_SCALE=ci SENSBOOK_PROGRESS=0 $(BIN)/python -m pytest -q -m cuda tests --ignore=tests/site --ignore=tests/colab

# On a shared machine: make bench BENCH_ARGS="--threads 1 --clock cpu"
bench: setup
	$(BIN)/python benchmarks/bench.py $(BENCH_ARGS)
