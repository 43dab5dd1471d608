"""The tenants' server (tests/tenants/conftest.py): gpuledger's users in their two accounts, the
claim service and an allocator running, systems billing and render declared."""

from tests.tenants.conftest import tenants  # noqa: F401  (a fixture)
