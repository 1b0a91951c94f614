# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# Integration modules run side by side, each pytest-xdist worker on a simulated cluster of
# its own. One worker more than the machine has cores, at most 6: on 2 cores 3 did better
# than 2 (a partial run) and 4 (not side by side; docs/testing.md); the suite is CPU-bound
# there, so a machine with more cores gets more workers (not measured: none was available).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n + 1 > 6 ? 6 : n + 1 )))
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: all venv host-deps demo test lint unit integration role bench sim-down clean

all: venv

venv: host-deps $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "Python 3.11 is required (found $$($(PYTHON) --version))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

host-deps:
	@tools/bin/host-deps

demo: venv host-deps
	$(BIN)/a3rl demo --nodes 2

lint: venv
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint
	$(BIN)/ruff check tools tests bench plugins

unit: venv
	$(BIN)/pytest -q tests/unit

integration: venv host-deps
	A3RL_TEST_PREBUILD=1 $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 tests/integration

# One role on one simulated node, before the full suite: its prerequisites, then converge,
# every task again with changed=0, --check, verify (tests/roles; docs/testing.md, "The role
# loop"). Not part of `make test`. The node is kept for the next run (KEEP=0 removes it at the end,
# FRESH=1 starts from a new node); ROLE=all runs every role the loop knows.
ROLE ?=
ROLE_CLUSTER ?= role
role: venv host-deps
	@[ -n "$(ROLE)" ] || { echo "usage: make role ROLE=<role>[,<role>...]|all [KEEP=0] [FRESH=1]"; exit 2; }
	A3RL_ROLE=$(ROLE) A3RL_ROLE_CLUSTER=$(ROLE_CLUSTER) A3RL_ROLE_KEEP=$(if $(filter 0,$(KEEP)),0,1) \
	  A3RL_ROLE_FRESH=$(if $(filter 1,$(FRESH)),1,0) $(BIN)/pytest -q -x tests/roles

# On a fresh machine (CI) the first minutes are a chain: the venv, lint, then the node
# image and the CANN image stand-in that every worker's first cluster waits for. So the
# two images start first, with the machine's own Python (a3rl.sim.base_images imports only
# the standard library), and lint runs beside the tests; its verdict counts the same,
# printed at the end (a failure is announced when it happens). docs/testing.md.
test: host-deps
	@mkdir -p .cache; rm -f .cache/lint.rc; \
	PYTHONPATH=tools $(PYTHON) -m a3rl.sim.base_images > .cache/base-images.log 2>&1 & images=$$!; \
	trap 'kill $$images $$lint 2>/dev/null' EXIT; \
	$(MAKE) --no-print-directory venv || exit $$?; \
	{ $(MAKE) --no-print-directory lint > .cache/lint.log 2>&1; echo $$? > .cache/lint.rc; \
	  [ "$$(cat .cache/lint.rc)" = 0 ] || echo "make lint FAILED (its output follows the tests)" >&2; } & lint=$$!; \
	echo "lint runs beside the tests (.cache/lint.log); the node and CANN images build beside them (.cache/base-images.log)"; \
	A3RL_TEST_PREBUILD=1 $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 tests/unit tests/integration; \
	rc=$$?; wait $$lint; wait $$images; \
	echo "base images: $$(tail -n 1 .cache/base-images.log)"; \
	echo "---- make lint ----"; cat .cache/lint.log; \
	lint_rc=$$(cat .cache/lint.rc 2>/dev/null || echo 1); \
	[ "$$lint_rc" = 0 ] || echo "make lint FAILED (exit $$lint_rc)"; \
	[ $$rc = 0 ] && [ "$$lint_rc" = 0 ]

bench: venv host-deps
	$(BIN)/python bench/run.py

sim-down: venv
	$(BIN)/a3rl sim down

clean: sim-down
	rm -rf .cache runs
