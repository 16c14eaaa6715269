# kg: `make run` serves the PEP demo, `make test` runs the test suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PG_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test
export KG_DATA_DIR ?= .kg

.PHONY: install run demo serve test test-sqlite bench docs clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

## The service with the 150 PEPs ingested (a second run embeds nothing), on 127.0.0.1:8765.
run: install demo serve

demo: install
	$(BIN)/kg ingest fixtures/peps/docs --repo peps --workspace peps --format pep

serve: install
	$(BIN)/kg serve

## Parallel test workers (pytest-xdist): one per core; a module's tests stay on one worker, so its
## module-scoped fixtures are built once. PYTEST_WORKERS=0 runs in this process.
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadscope)

## Every test, on SQLite and on the local PostgreSQL (started if it is down).
test: install
	./scripts/ensure-postgres.sh
	KG_TEST_POSTGRES_URL=$${KG_TEST_POSTGRES_URL:-$(PG_URL)} $(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

## Tests on SQLite only (no PostgreSQL needed).
test-sqlite: install
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

## The documentation site (mkdocs.yml), built strict into site/.
docs: install
	$(BIN)/python -m mkdocs build --strict

bench: install
	$(BIN)/python bench/branch_create.py
	$(BIN)/python bench/ingest.py
	PYTHONPATH=$(CURDIR) $(BIN)/python bench/redesign_figures.py

clean:
	rm -rf .kg .pytest_cache bench/results site
