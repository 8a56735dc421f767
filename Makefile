# Two commands from a fresh clone: `make demo` and `make test`. Both set up what they need first: `make demo` only
# the main job's part (`make setup`), `make test` the rest on top of it (`make setup-all`).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
STAMP_ALL := $(VENV)/.installed-all
# Every distribution under plugins/ and contrib/ is installed in editable mode, found by its pyproject: the
# first-party plugins by `make setup`, the engines under contrib/ by `make setup-all`.
PLUGIN_DISTS := $(patsubst %/pyproject.toml,%,$(wildcard plugins/*/pyproject.toml))
CONTRIB_DISTS := $(patsubst %/pyproject.toml,%,$(wildcard contrib/*/pyproject.toml))
DISTS := $(PLUGIN_DISTS) $(CONTRIB_DISTS)
PYTEST_ARGS ?=

.PHONY: setup setup-all test lint typecheck unit unit-parallel unit-serial demo bench bench-peers flags docs dist clean stress

# What the main job needs: the venv, torch from the pin in constraints.txt, core with its `examples` extra
# (scikit-learn) and every first-party plugin under plugins/, in editable mode.
setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt $(addsuffix /pyproject.toml,$(PLUGIN_DISTS)) scripts/setup.sh
	scripts/setup.sh demo $(PYTHON) $(VENV) $(PLUGIN_DISTS)
	touch $(STAMP)

# The rest, on top of `make setup`: core's `test` extra (pytest, mypy, ruff, the docs toolchain, MLflow, W&B, ...),
# the engines under contrib/ in editable mode, Horovod's build, and scripts/system-deps.sh's SLURM, munge and
# Open MPI (apt, in the background while pip runs). Done once: its stamp is newer than everything it read.
setup-all: $(STAMP_ALL)

$(STAMP_ALL): $(STAMP) $(addsuffix /pyproject.toml,$(CONTRIB_DISTS)) $(wildcard scripts/system-deps.sh)
	scripts/setup.sh all $(PYTHON) $(VENV) $(CONTRIB_DISTS)
	touch $(STAMP_ALL)

lint: setup-all
	$(PY) -m ruff check $(wildcard core plugins contrib tests bench examples scripts)
	# The architecture's import rules (pyproject.toml [tool.importlinter]): a violation names the import and its line.
	$(VENV)/bin/lint-imports

# The import packages of every distribution (a directory with an __init__.py), never the *.egg-info next to them.
PACKAGES := $(patsubst %/__init__.py,%,$(wildcard plugins/*/core_*/__init__.py contrib/*/core_*/__init__.py))

# The tests are type-checked too, one directory at a time (every distribution's tests has its own conftest.py);
# mypy finds the distributions' packages, and the N-D helper scripts other plugins' tests import, on this path.
empty :=
space := $(empty) $(empty)
TEST_DIRS := tests $(wildcard plugins/*/tests contrib/*/tests)
TEST_MYPYPATH := $(subst $(space),:,$(DISTS) plugins/core-model-parallel/tests/scripts)

# The packages in one run, then the test directories one at a time in TYPECHECK_LANES lanes at once, each lane on
# its own copy of the cache (two mypy runs sharing .mypy_cache at once reported errors a serial run does not).
TYPECHECK_LANES ?= 2
typecheck: setup-all
	TEST_MYPYPATH=$(TEST_MYPYPATH) scripts/typecheck.sh $(PY) $(TYPECHECK_LANES) core bench $(PACKAGES) -- $(TEST_DIRS)

# Two pytest workers (pytest-xdist) by default, a test file whole on one worker (--dist loadfile), so a module's
# fixtures (a SLURM cluster, an MLflow server, a 2-process job) start once. Tests marked `serial` (they depend on
# timing: a ratio of step times, hivemind peers hearing each other in time) then run alone in one process. PYTEST_WORKERS=0
# runs everything in one process, in order. A phase that selects no test (PYTEST_ARGS="-k ...") is not a failure.
# --no-loadscope-reorder: the files go out heaviest first, in the order tests/conftest.py gives the workers
# (xdist's own order, the files with the most tests first, left the heaviest files, which have few tests, to the end).
# The parallel part lists the files of the serial tests it left out (tests/conftest.py, CORE_SERIAL_FILES), and the
# serial part collects only those (none listed: the whole suite, as before).
PYTEST_WORKERS ?= 2
SERIAL_FILES := $(CURDIR)/$(VENV)/.serial-files
unit: setup-all
	if [ "$(PYTEST_WORKERS)" = 0 ]; then \
		$(PY) -m pytest -q --durations=25 $(PYTEST_ARGS); \
	else \
		$(MAKE) --no-print-directory unit-parallel; \
		$(MAKE) --no-print-directory unit-serial; \
	fi

# The two phases of `make unit` (PYTEST_WORKERS > 0), each a target of its own for `make test`.
unit-parallel: setup-all
	rm -f $(SERIAL_FILES).*
	CORE_SERIAL_FILES=$(SERIAL_FILES) $(PY) -m pytest -q --durations=60 -n $(PYTEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder -m "not serial" $(PYTEST_ARGS) || [ $$? = 5 ]

unit-serial: setup-all
	serial_files=$$(cat $(SERIAL_FILES).* 2>/dev/null | sort -u || true); \
		$(PY) -m pytest -q --durations=5 -m serial $(PYTEST_ARGS) $$serial_files || [ $$? = 5 ]

# lint, typecheck and unit, each one's wall time and the CPU time of its processes (bash's `time`). typecheck (one
# lane: about 90 s of one core's CPU on a cold cache) runs in the background during unit's parallel phase, which
# leaves about a sixth of the two cores idle (tests waiting on timeouts, daemons, a rank's exit), and must end before
# the serial phase, whose tests depend on timing; its output is shown then. PYTEST_WORKERS=0: one phase after the
# other, as before.
test: setup-all
	@scripts/test.sh "$(MAKE) --no-print-directory" "$(PYTEST_WORKERS)"

demo: setup
	$(PY) -m core.plugins
	@echo
	# The main job: the digits network trained by Lite on 2 processes over gloo (ddp from core-ddp).
	OMP_NUM_THREADS=1 $(PY) examples/digits.py --accelerator cpu --strategy ddp --devices 2 --precision 32-true
	@echo
	# The same task as a Module + DataModule under the Trainer (logs and checkpoints under runs/demo).
	OMP_NUM_THREADS=1 $(PY) examples/digits_trainer.py --accelerator cpu --strategy ddp --devices 2 --root runs/demo

# Not part of `make test`: every multi-process test file STRESS_N times (default 10), then 5 rounds of 8
# concurrent 2-process ddp jobs; prints the failure count per test.
STRESS_N ?= 10
stress: setup-all
	STRESS_N=$(STRESS_N) $(PY) scripts/stress.py $(STRESS_ARGS)

bench: setup
	$(PY) -m bench

# Lightning 2.6's own tests of public behaviour against core.lightning, from a checkout you give
# (git clone -b 2.6.5 https://github.com/Lightning-AI/pytorch-lightning): a table per file in lightning-tests/.
LIGHTNING_SRC ?=
LIGHTNING_TESTS_ARGS ?=
.PHONY: lightning-tests
lightning-tests: setup-all
	@test -n "$(LIGHTNING_SRC)" || { echo "make lightning-tests LIGHTNING_SRC=/path/to/lightning-checkout"; exit 2; }
	$(PY) scripts/lightning_tests.py --lightning-src "$(LIGHTNING_SRC)" $(LIGHTNING_TESTS_ARGS)

# Peers run in their own environment: Lightning and Accelerate are never dependencies of the project.
PEERS_VENV := .venv-peers
bench-peers:
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet -c constraints.txt torch lightning accelerate attrs
	$(PEERS_VENV)/bin/python -m bench.peers
	$(PEERS_VENV)/bin/python -m bench.peers_gpt

# What follows from the Trainer's flag declarations (core/trainer/_flags.py): its signature, views, TrainerConfig's
# fields and docs/trainer-flags.md's table.
flags:
	$(PY) scripts/gen_trainer_flags.py

docs: setup-all
	$(PY) scripts/gen_hooks_doc.py
	$(PY) scripts/gen_trainer_flags.py
	@if [ -f scripts/gen_compatibility.py ]; then $(PY) scripts/gen_compatibility.py; fi
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# A wheel and an sdist of every distribution (core, plugins/*, contrib/*) in dist/, twine-checked, and a PEP 503
# index of them in dist/simple/ for `pip install --index-url file://$(CURDIR)/dist/simple ...` (README, "Install").
dist: setup
	$(PY) -m pip install --quiet -c constraints.txt 'build>=1.2' 'twine>=5' 'readme-renderer[md]>=43'
	$(PY) scripts/build_dist.py --out dist . $(DISTS)
	$(PY) -m twine check --strict dist/*.whl dist/*.tar.gz

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache dist

# The GPU check (scripts/gpu_check.py, bench/README.md "On a GPU"): on the GPU machine, one command that installs core
# and the plugins it needs beside that machine's torch, runs the tests marked `gpu` and the GPU benchmark, each phase
# within its budget, and writes everything under --out. Anywhere: GPU_CHECK_ARGS="--dry-run" installs into a
# temporary target and lists what it would run. GPU_PYTHON is the interpreter that holds torch (there: python3).
GPU_CHECK_ARGS ?=
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
.PHONY: gpu-check gpu-wheels
gpu-check:
	$(GPU_PYTHON) scripts/gpu_check.py $(GPU_CHECK_ARGS)

# The wheels the GPU image lacks, for its Python 3.12: pluggy (the image has 1.6.0, core needs >= 1.7),
# importlib-metadata (core's metadata reader) with zipp, xxhash (the image has one, of a version nobody has read; core needs >= 3.0, and a cp312 manylinux wheel exists), and
# setuptools (>= 77 reads the root pyproject's license string), used only to build the working tree there. Everything
# else core and the checks import is in that image (attrs, packaging, pytest, pytest-xdist, pytest-timeout,
# hypothesis, psutil, scikit-learn, lightning, accelerate); the install phase checks every requirement's version there,
# and the dry run checks them against scripts/gpu_image.json (the image's recorded packages) here.
# Ignored by git; carried with `carry: [".gpu-wheels"]` (about 1.4 MB).
GPU_WHEELS := .gpu-wheels
GPU_WHEEL_PINS ?= pluggy==1.7.0 importlib-metadata==9.1.0 zipp==4.1.2 xxhash==4.1.0 setuptools==84.2.1
# core-torchao for bench/gpu_gpt.py's float8 sections: torchao 0.18.0's cp310-abi3 manylinux wheel installs on 3.12.
GPU_WHEEL_PINS += torchao==0.18.0
gpu-wheels:
	rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS)
	$(GPU_PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		--platform any -d $(GPU_WHEELS) $(GPU_WHEEL_PINS)
	ls -l $(GPU_WHEELS)
