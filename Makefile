# Two commands on a fresh machine: `make run` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`: most tests wait on nats-server or on a stack's processes,
# so 3 workers on 2 cores finish sooner than 2; TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 3

# The Node.js side of the contract tests (ajv, @asyncapi/parser, nats): installed when npm is here;
# without it those tests skip, saying what is missing.
NODE_PKG := tests/contract/js
NODE_STAMP := $(NODE_PKG)/node_modules/.installed

.PHONY: run test install schemas bench clean browser

# The first install: say so, and let the installer show each package as it comes. uv when it can
# be had (seconds), else pip (a minute or more): scripts/install-venv.sh.
$(STAMP): pyproject.toml scripts/install-venv.sh
	@$(PYTHON) -c 'import sys; sys.exit("gpuledger needs Python 3.11+, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	@echo "gpuledger: installing gpuledger and its dependencies into $(VENV)"
	sh scripts/install-venv.sh $(PYTHON) $(VENV)
	@touch $(STAMP)
	@echo "gpuledger: installed"

install: $(STAMP)

$(NODE_STAMP): $(NODE_PKG)/package.json $(NODE_PKG)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --no-audit --no-fund --loglevel=error --prefix $(NODE_PKG) && touch $@ \
	    || echo "npm ci failed: the Node.js contract tests will skip"; \
	else echo "npm not found: the Node.js contract tests will skip"; fi

run: $(STAMP)
	@$(VENV)/bin/gpuledger up --demo $(ARGS)

# The three installs run side by side (uv and npm wait on the network, apt-get on dpkg).
test:
	@$(MAKE) --no-print-directory -j3 $(STAMP) $(NODE_STAMP) browser
	@$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# Debian's chromium for the dashboard's browser tests: installed when missing, as root, with
# apt-get; anything else (not root, no apt-get, a failed install) only means those tests skip.
browser:
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1 || \
	  { echo "gpuledger: installing Debian's chromium for the dashboard's browser tests"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
	    || echo "gpuledger: chromium could not be installed; the dashboard's browser tests will skip"; }

schemas: $(STAMP)
	$(VENV)/bin/gpuledger schemas export

bench: $(STAMP)
	$(VENV)/bin/gpuledger bench decide --nodes 1000
	$(VENV)/bin/gpuledger bench replay --events 200000

clean:
	rm -rf $(VENV) .gpuledger
