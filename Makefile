# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install demo test lint gpu-test test-web

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: here it is a CPU wheel on local disk; a bare `torch` pulls a CUDA build
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

demo: install
	$(BIN)/python manage.py demo --host $(HOST) --port $(PORT)

lint: install
	$(BIN)/ruff check .

test: install lint
	$(BIN)/python tests/preflight.py
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python -m pytest

gpu-test:
	python3 -m pytest -m gpu tests/gpu_workers tests/training

# the web app's tests only (PostgreSQL at 127.0.0.1:5432 or DATABASE_URL; Redis and Chromium optional)
test-web: install
	$(BIN)/python -m pytest tests/webapp
