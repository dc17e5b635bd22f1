# s3rs developer commands. `make` alone lists them.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV_PY := .venv/bin/python
# Extra arguments: make demo DEMO_ARGS=--reseed ; make bench ARGS="--rows 1000000"
DEMO_ARGS ?=
ARGS ?=

.PHONY: help setup demo test ui bench lint stop clean

help: ## list the targets
	@echo "s3rs make targets:"
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'

setup: ## install/start what s3rs needs: venv, Java, JDBC jars, MariaDB, PostgreSQL (idempotent)
	@bash scripts/setup.sh

demo: setup ## seed a 100k-row table and sync it MySQL -> S3 (moto) -> PostgreSQL (DEMO_ARGS=--reseed)
	@source scripts/env.sh && bash scripts/moto.sh start && $(VENV_PY) scripts/demo.py $(DEMO_ARGS)

test: ## run the whole test suite (extra pytest args: make test ARGS="-k cursor")
	@bash scripts/test.sh $(ARGS)

ui: setup ## Dagster UI on the demo stack, runs attached to a Spark Connect server: http://127.0.0.1:3000
	@bash scripts/moto.sh start && \
	  { [ -n "$${S3RS_SPARK_MASTER:-}" ] || \
	    S3RS_SPARK_STATE_DIR=$${S3RS_SPARK_STATE_DIR:-$(CURDIR)/.local/spark-connect} \
	    $(VENV_PY) -m s3rs_assets.cli spark start; } && \
	  source scripts/env.sh && echo "Spark: $$S3RS_SPARK_MASTER (make stop ends it)" && \
	  echo "Dagster UI: http://127.0.0.1:3000 (DAGSTER_HOME=$$DAGSTER_HOME)" && \
	  exec .venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

bench: setup ## run the benchmarks on the local stack (ARGS="...")
	@source scripts/env.sh && bash scripts/moto.sh start && $(VENV_PY) -m benchmarks.run $(ARGS)

lint: ## ruff check
	@.venv/bin/ruff check .

stop: ## stop the local moto S3 server (its buckets are in memory and are lost) and Spark Connect server
	@bash scripts/moto.sh stop
	@S3RS_SPARK_STATE_DIR=$${S3RS_SPARK_STATE_DIR:-$(CURDIR)/.local/spark-connect} \
	  $(VENV_PY) -m s3rs_assets.cli spark stop

clean: stop ## remove .local/ (demo table list, Dagster home, logs); databases are kept
	rm -rf .local
