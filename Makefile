# Two commands on a fresh machine: `make run` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=
PYTEST_ARGS ?=

# The Node.js side of the contract tests (ajv, @asyncapi/parser, nats): installed when npm is here;
# without it those tests skip, saying what is missing.
NODE_PKG := tests/contract/js
NODE_STAMP := $(NODE_PKG)/node_modules/.installed

.PHONY: run test install schemas bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit("gpuledger needs Python 3.11+, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

$(NODE_STAMP): $(NODE_PKG)/package.json $(NODE_PKG)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --no-audit --no-fund --loglevel=error --prefix $(NODE_PKG) && touch $@ \
	    || echo "npm ci failed: the Node.js contract tests will skip"; \
	else echo "npm not found: the Node.js contract tests will skip"; fi

run: $(STAMP)
	@$(VENV)/bin/gpuledger up --demo $(ARGS)

test: $(STAMP) $(NODE_STAMP)
	@$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

schemas: $(STAMP)
	$(VENV)/bin/gpuledger schemas export

bench: $(STAMP)
	$(VENV)/bin/gpuledger bench decide --nodes 1000
	$(VENV)/bin/gpuledger bench replay --events 200000

clean:
	rm -rf $(VENV) .gpuledger
