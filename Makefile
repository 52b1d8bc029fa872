# The README's two commands are `make demo` and `make test`; each sets up what it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PYSPARK_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: demo test unit lint typecheck check-migrations bench clean venv browser

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m spark_jobs.worker_path
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fedload demo

test: $(STAMP) browser
	$(PY) -m tests.prerequisites
	$(PY) -m pytest --durations=60

# The pure tests (no database server, no Spark, no browser): under a minute.
unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

# The browser tests drive Debian's chromium (never a downloaded browser). Install it where it is
# missing and we may (root); otherwise the prerequisite check says what to do.
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check-migrations: $(STAMP)
	rm -f var/alembic-check.db
	DATABASE_URL=sqlite:///var/alembic-check.db $(VENV)/bin/fedload db upgrade
	DATABASE_URL=sqlite:///var/alembic-check.db $(VENV)/bin/alembic check

bench: $(STAMP)
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) var build *.egg-info .pytest_cache .mypy_cache .ruff_cache
