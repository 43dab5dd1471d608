"""The agents' server (tests/trust_agents/conftest.py): gpuledger's users in their accounts, node
records written; `ops` connected."""

from tests.trust_agents.conftest import agents_server, ops  # noqa: F401  (fixtures)
