"""`pool render`: the objects each kind of pool needs, valid for Kubernetes (kubernetes-validate
--strict) and saying what the seed asks of them; and the same through the running controller."""

from __future__ import annotations

import yaml

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.commands import IgnoreDevice, RenderPool
from schemas.types import DeviceSelector, PoolSpec
from services.pool_controller.render import max_instances
from services.pool_controller.render_dra import dra_api_version
from services.pool_controller.rendering import RenderRequest, render_pool
from shared import rpc
from tests.fleet import a100_mig_node
from tests.kubernetes.kube_schemas import validate
from tests.pool_controller.fixtures import node_registered, state_of

RESOURCE = "gpu.gpuledger.io/p"


def rendered(pool: PoolSpec, *nodes, request=RenderRequest(), marks=()):
    state = state_of(*nodes, ev.PoolCreated(pool=pool), *marks)
    out = render_pool(state, pool.name, RESOURCE, request)
    return out


def data(config_map: dict, key: str):
    return yaml.safe_load(config_map["data"][key])


@pytest.mark.parametrize("k8s", ["1.32", "1.37"])
def test_a_time_sliced_card_pool_gets_a_device_plugin_config(k8s):
    pool = PoolSpec(name="p", slices_per_unit=4, max_devices_per_node=2)
    out = rendered(pool, node_registered("n1", 4), node_registered("n2", 1),
                   marks=[ev.DeviceIgnoreChanged(node="n1", uuid="GPU-n1-1", ignored=True)])
    [config_map] = out.objects
    validate(config_map, k8s)
    config = data(config_map, "config.yaml")
    assert config["flags"]["migStrategy"] == "none"
    assert config["resources"] == {"gpus": [{"pattern": "*", "name": RESOURCE}]}
    sliced = config["sharing"]["timeSlicing"]
    assert sliced["resources"][0]["replicas"] == 4 and sliced["failRequestsGreaterThanOne"] is False
    # maxDevicesPerNode 2 and the Ignored card: n1 offers card 0 only
    assert data(config_map, "allowed-devices.yaml") == {"n1": ["GPU-n1-0"], "n2": ["GPU-n2-0"]}
    assert sliced["resources"][0]["devices"] == ["GPU-n1-0", "GPU-n2-0"]


def test_an_exclusive_pool_has_no_time_slicing():
    [config_map] = rendered(PoolSpec(name="p"), node_registered("n1", 2)).objects
    assert "sharing" not in data(config_map, "config.yaml")


def test_a_mig_pool_gets_the_mig_manager_layout_of_its_cards():
    pool = PoolSpec(name="p", unit="MIG", mig_profile="3g.40gb", slices_per_unit=2)
    device_plugin, mig = rendered(pool, a100_mig_node("a0")).objects
    for obj in (device_plugin, mig):
        validate(obj, "1.37")
    assert data(device_plugin, "config.yaml")["flags"]["migStrategy"] == "mixed"
    assert data(device_plugin, "config.yaml")["resources"] == {"mig": [{"pattern": "3g.40gb", "name": RESOURCE}]}
    # cards 1 and 2 hold 3g.40gb instances: each is to be laid out as 2 x 3g.40gb
    assert data(mig, "config.yaml")["mig-configs"] == {"gpuledger-a0": [
        {"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [2], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}


@pytest.mark.parametrize("model, profile, count", [
    ("A100", "1g.10gb", 7), ("A100", "1g.20gb", 4), ("A100", "2g.20gb", 3), ("A100", "3g.40gb", 2),
    ("A100", "4g.40gb", 1), ("A100", "7g.80gb", 1), ("H200", "1g.18gb", 7), ("H200", "3g.71gb", 2)])
def test_how_many_instances_of_a_profile_fit_a_card(model, profile, count):
    assert max_instances(model, profile) == count


@pytest.mark.parametrize("k8s, api", [("1.32", "resource.k8s.io/v1beta1"), ("1.33", "resource.k8s.io/v1beta2"),
                                      ("1.34", "resource.k8s.io/v1"), ("1.37", "resource.k8s.io/v1")])
def test_a_dra_pool_gets_a_device_class_and_a_claim_template_per_namespace(k8s, api):
    pool = PoolSpec(name="p", backend="dra", access_namespaces=["team-a", "team-b"])
    out = rendered(pool, node_registered("n1", 2), request=RenderRequest(k8s_version=k8s))
    device_class, *templates = out.objects
    for obj in out.objects:
        assert obj["apiVersion"] == api == dra_api_version(k8s)
        validate(obj, k8s)
    expression = device_class["spec"]["selectors"][0]["cel"]["expression"]
    assert "device.driver == 'gpu.nvidia.com'" in expression
    assert "uuid in ['GPU-n1-0', 'GPU-n1-1']" in expression
    assert [t["metadata"]["namespace"] for t in templates] == ["team-a", "team-b"]
    assert {t["metadata"]["name"] for t in templates} == {device_class["metadata"]["name"]} == {"gpu-pool-p"}


def test_an_open_dra_pool_says_where_its_template_went():
    out = rendered(PoolSpec(name="p", backend="dra"), node_registered("n1", 1))
    assert out.objects[1]["metadata"]["namespace"] == "default" and "--claim-namespace" in out.notes[0]


def test_a_pool_without_devices_renders_objects_that_name_none_and_says_so():
    out = rendered(PoolSpec(name="p", include=DeviceSelector(products=["H200"])), node_registered("n1", 1))
    assert data(out.objects[0], "allowed-devices.yaml") == {} and "selects no device" in out.notes[0]


async def test_render_and_ignore_through_the_running_controller(fresh_nats):
    from shared.service import start_service, stop_service
    from shared.settings import Settings
    from services.pool_controller.app import build
    from schemas.commands import CreatePool

    ctx = await start_service("pool-controller", Settings(nats_url=fresh_nats.url), build)
    try:
        await ctx.log.append(subjects.node("n1"), node_registered("n1", 2))
        assert (await rpc.call(ctx.nc, subjects.command("pool.create"),
                               CreatePool(pool=PoolSpec(name="p", slices_per_unit=2)))).ok
        ignored = await rpc.call(ctx.nc, subjects.command("device.ignore"),
                                 IgnoreDevice(node="n1", device="1", reason="fan"))
        assert ignored.ok and ignored.data["changed"] is True
        reply = await rpc.call(ctx.nc, subjects.query("pool.render"), RenderPool(name="p"))
        assert reply.ok
        [config_map] = reply.data["objects"]
        validate(config_map, "1.37")
        assert data(config_map, "allowed-devices.yaml") == {"n1": ["GPU-n1-0"]}
        missing = await rpc.call(ctx.nc, subjects.query("pool.render"), RenderPool(name="nope"))
        assert not missing.ok and missing.error.field == "name"
    finally:
        await stop_service(ctx)
