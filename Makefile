# kafkaproof: `make run` runs the nightly pipeline once; `make test` runs every test.
# Both set everything up first (idempotent, quick when already done).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
export KAFKAPROOF_CACHE ?= $(CURDIR)/.cache
export KAFKAPROOF_STATE ?= $(CURDIR)/.state
export KAFKAPROOF_RUNS ?= $(CURDIR)/runs
# Kafka versions installed by `make setup`: the default (newest 4.x) and production 3.9.x.
KAFKA_VERSIONS ?= 4.3.1 3.9.2
PYTEST_ARGS ?=

.PHONY: help setup system-packages python kafka java docker docker-base test-setup test test-long test-unit test-spark test-cluster test-compose run airflow clean down celery-setup celery-up celery-down

help:
	@echo "make run    set up, then run the nightly pipeline once on the local cluster"
	@echo "make test   set up (Docker too), then run every test (unit, spark, cluster, airflow, compose) but the long ones"
	@echo "make test-long   set up (Docker too), then run the long tests (pytest -m long; README 'Tests' lists them)"
	@echo "make setup  only set up (.venv, Debian packages, Kafka from Maven Central)"
	@echo "make down   tear down every local cluster and heal leftover faults"
	@echo "make airflow   Airflow's UI, scheduler and api-server for this checkout (airflow standalone, :8080)"
	@echo "make docker         set up Docker for the compose backend (engine, images, Compose CLI)"
	@echo "make test-compose   set up Docker, then run only the compose tests"
	@echo "make celery-up      a Celery deployment on this machine (Redis, PostgreSQL, Airflow, workers w1 w2; scripts/celery.sh)"
	@echo "make celery-down    stop it (and the clusters its workers left)"

setup: system-packages python kafka java

system-packages:
	@bash scripts/system-packages.sh

python: $(VENV)/.installed

$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "[setup] installing Python dependencies into $(VENV) (a few minutes the first time)"
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -r requirements.txt -c constraints.txt
	@$(PY) -m pip install -q --no-deps -e .
	@touch $@

kafka: python
	@for v in $(KAFKA_VERSIONS); do $(PY) -m kafkaproof install-kafka --kafka-version $$v; done

# The Java (kafka-clients) workload driver, built with Maven from java/ into the cache.
java: kafka
	@$(PY) -c "from kafkaproof.run import java_driver; print('[setup] java driver:', java_driver.build())"

# Docker for the compose backend and its tests, in two parts. docker-base needs no Kafka jars: the
# engine (own daemon, off the host firewall), the base image (also the tools image of network
# faults) and the Compose CLI — minutes on a fresh machine, so `make test` runs it beside the
# Python and Kafka setup. docker adds the Kafka images from the jars (seconds) and the example
# application's image from its Maven-built jars (scripts/docker-image.sh --app; the first Maven build
# downloads Spring Boot into ~/.m2, later ones are cached).
docker-base: system-packages
	@export DOCKER_HOST="$$(bash scripts/docker-engine.sh)" && \
	  bash scripts/docker-image.sh --base >/dev/null && bash scripts/docker-compose-cli.sh

docker: setup docker-base
	@export DOCKER_HOST="$$(bash scripts/docker-engine.sh)" && \
	  for v in $(KAFKA_VERSIONS); do bash scripts/docker-image.sh $$v >/dev/null; done && \
	  $(PY) -c "from kafkaproof.run import app_containers; print('[setup] example application image:', app_containers.example_image())"

# Everything the tests need, Docker included (docker-base beside the Python and Kafka setup).
test-setup: system-packages
	@$(MAKE) --no-print-directory -j2 --output-sync=target setup docker-base
	@$(MAKE) --no-print-directory docker

test: test-setup
	$(PY) -m pytest $(PYTEST_ARGS)

# The tests of variants (marker `long`) that would take `make test` past its 30-min CI budget; the Celery
# test (tests/airflow/test_celery.py) needs celery-setup.
test-long: test-setup celery-setup
	$(PY) -m pytest -m long $(PYTEST_ARGS)

test-unit: python
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

test-spark: python
	$(PY) -m pytest -m spark $(PYTEST_ARGS)

test-cluster: setup
	$(PY) -m pytest -m cluster $(PYTEST_ARGS)

test-compose: docker
	$(PY) -m pytest -m compose $(PYTEST_ARGS)

run: setup
	@bash scripts/run-nightly.sh

airflow: setup
	@bash scripts/airflow-standalone.sh

# The Celery executor (issue 42): Debian's redis-server (the broker) and the Celery provider, pinned in
# constraints.txt; PostgreSQL comes with system-packages. scripts/celery.sh deploys it (CELERY_HOSTS, ports).
celery-setup: setup
	@command -v redis-server >/dev/null || { echo "[setup] installing redis-server (Debian)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null; }; }
	@$(PY) -c "import airflow.providers.celery, redis" 2>/dev/null || \
	  $(PY) -m pip install -q -r requirements-celery.txt -c constraints.txt

celery-up: celery-setup
	@bash scripts/celery.sh up

celery-down:
	@bash scripts/celery.sh down

down: python
	$(PY) -m kafkaproof cluster down --all

clean: down
	rm -rf .state runs
