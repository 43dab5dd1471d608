"""`quota default set --preempt-other-namespaces`: the default quota takes the flag `quota set`
takes (before session 31 the command refused the field, so no default could trust priorities
across namespaces), with the same validation, and the allocator honours it for namespaces
without a quota of their own (services/allocator/core/priority_scope.py)."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest
from typer.testing import CliRunner

from gpuledger_cli.main import app
from schemas.commands import SetDefaultQuota
from services.quota.quantities import QuantityError
from services.quota.validation import spec_from_default
from tests.service.helpers import running


def test_the_default_quota_takes_the_flag_and_only_a_boolean():
    assert spec_from_default(SetDefaultQuota()).preempt_other_namespaces is False
    assert spec_from_default(SetDefaultQuota(preempt_other_namespaces=True)).preempt_other_namespaces
    with pytest.raises(QuantityError) as refused:  # "yes" is not taken for true
        spec_from_default(SetDefaultQuota(preempt_other_namespaces="yes"))
    assert refused.value.field == "preempt_other_namespaces" and "true or false" in str(refused.value)


def test_a_default_set_request_with_the_flag_decodes():
    data = msgspec.json.encode({"limits_vram": "80Gi", "preempt_other_namespaces": True})
    assert msgspec.json.decode(data, type=SetDefaultQuota).preempt_other_namespaces is True


@pytest.fixture
async def url(fresh_nats):
    async with running(fresh_nats.url, "quota"):
        yield fresh_nats.url


async def _gl(url: str, *args: str):
    result = await asyncio.to_thread(CliRunner().invoke, app, ["quota", "default", *args, "--nats-url", url])
    return result.exit_code, result.output


async def test_quota_default_set_takes_preempt_other_namespaces_from_the_command_line(url):
    code, out = await _gl(url, "set", "--limits-vram", "80Gi", "--preempt-other-namespaces")
    assert code == 0, out
    assert "may preempt other namespaces' claims" in out
    code, out = await _gl(url, "get", "--json")
    assert code == 0 and json.loads(out)["spec"]["preempt_other_namespaces"] is True
    code, out = await _gl(url, "set", "--limits-vram", "80Gi")  # set replaces it: trusted no more
    assert code == 0, out
    code, out = await _gl(url, "get", "--json")
    assert code == 0 and "preempt_other_namespaces" not in json.loads(out)["spec"]
