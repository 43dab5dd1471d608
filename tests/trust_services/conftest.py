"""The agents' server (tests/trust_agents/conftest.py): gpuledger's users in their accounts, node
records written; `ops` connected."""

from tests.trust_agents.conftest import agents_server, ops  # noqa: F401  (fixtures)

# The services are back in LEDGER (shared.nats_auth.SERVICES_IN): these tests check them in their
# own accounts, and run again when that is switched back on.
collect_ignore_glob = [] if __import__("shared.nats_auth").nats_auth.SERVICES_IN != "LEDGER" else ["test_*.py"]
