# s3rs developer commands. `make` alone lists them.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV_PY := .venv/bin/python
# Extra arguments: make demo DEMO_ARGS=--reseed (or -v) ; make bench ARGS="--suite shape"
DEMO_ARGS ?=
ARGS ?=

.PHONY: help setup demo test ui bench lint stop clean

help: ## list the targets
	@echo "s3rs make targets:"
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'

setup: ## install/start what s3rs needs: venv, Java, JDBC jars, MariaDB, PostgreSQL (idempotent)
	@bash scripts/setup.sh

demo: setup ## seed a 100k-row table and sync it MySQL -> S3 (moto) -> PostgreSQL (DEMO_ARGS=--reseed, -v)
	@source scripts/env.sh && bash scripts/moto.sh start && $(VENV_PY) scripts/demo.py $(DEMO_ARGS)

test: ## run the whole test suite (extra pytest args: make test ARGS="-k cursor")
	@bash scripts/test.sh $(ARGS)

ui: setup ## Dagster UI on the demo stack, runs attached to a Spark Connect server: http://127.0.0.1:3000
	@bash scripts/ui.sh

# The benchmark runs in its own .venv-bench (dlt, reladiff), never in the shared .venv.
BENCH_PY := $(CURDIR)/.venv-bench/bin/python
bench: setup ## run the benchmarks in .venv-bench (ARGS="--suite core|decimal|shape|reconcile|all")
	@bash benchmarks/venv.sh && export PYSPARK_PYTHON=$(BENCH_PY) PYSPARK_DRIVER_PYTHON=$(BENCH_PY) && \
	  source scripts/env.sh && bash scripts/moto.sh start && $(BENCH_PY) -m benchmarks.run $(ARGS)

lint: ## ruff check and the import layers (lint-imports)
	@.venv/bin/ruff check . && .venv/bin/lint-imports

stop: ## stop the local moto S3 server (its buckets are in memory and are lost), Spark Connect server and s3rs server
	@bash scripts/moto.sh stop
	@$(VENV_PY) -m s3rs_assets.cli server stop >/dev/null 2>&1 || true
	@S3RS_SPARK_STATE_DIR=$${S3RS_SPARK_STATE_DIR:-$${S3RS_STATE_DIR:-$(CURDIR)/.local}/spark-connect} \
	  $(VENV_PY) -m s3rs_assets.cli spark stop

clean: stop ## remove .local/ (demo table list and settings, Dagster home, logs); databases are kept
	rm -rf .local
