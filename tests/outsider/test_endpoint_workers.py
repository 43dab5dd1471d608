"""An endpoint's workers are the claims its own steps announced, never another's claim that has
the same id or names the endpoint. Found by the session-25 outsider: claim ids are shared by
everyone and a worker's id is predictable (`<endpoint>-w<n>`). A claim `sq-w1` submitted in
namespace team-b before endpoint `sq` (team-a) scaled up was taken for its worker (the endpoint
showed it `bound` and never got a GPU of its own), and when `sq` scaled down it released that
claim ("endpoint sq scaled down"). A claim with `"endpoint": "chat"` in its body (any publisher may
write the field) counted as one of chat's workers, filling `workers_max` with claims that are not
its own. Names that share a subject (`ep.3`, `ep_3`) made workers `ep.3-w1` and `ep_3-w1` share
`gpu.evt.claim.ep_3-w1`, which the intake refuses for any other claim."""

from __future__ import annotations

from schemas import events as ev
from schemas import subjects
from schemas.commands import CreateEndpoint, GetEndpoint, UpdateEndpoint
from schemas.types import ClaimSpec
from tests.endpoints.test_service import call, endpoint, service  # noqa: F401


async def _submit(ctx, spec: ClaimSpec) -> None:
    await ctx.log.append(subjects.claim(spec.claim_id), ev.ClaimSubmitted(claim=spec, at=ctx.clock()))


async def _workers(ctx, name: str = "chat") -> list:
    got = await call(ctx, subjects.query("endpoint.get"), GetEndpoint(name=name))
    return [(w["claim_id"], w["status"]) for w in got.data["workers"]]


async def test_a_claim_holding_a_worker_id_is_skipped_and_never_released(service):  # noqa: F811
    await _submit(service, ClaimSpec(claim_id="chat-w1", namespace="team-b", gpus=0, cpu_milli=10))
    await call(service, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint(workers_min=1)))
    [step] = await service.endpoints.scale_all()
    assert step.add == 1
    assert service.endpoints.state.claims["chat-w2"].spec.endpoint == "chat"  # w1 is someone else's
    assert await _workers(service) == [("chat-w2", "pending")]
    # scaled down to nothing: only its own worker goes, the other claim is untouched
    await call(service, subjects.command("endpoint.update"), UpdateEndpoint(endpoint=endpoint(workers_min=0)))
    service.clock.now += 3600
    [down] = await service.endpoints.scale_all()
    assert down.release == ("chat-w2",)
    assert service.endpoints.state.claims["chat-w1"].status == "pending"
    assert not any(isinstance(e, ev.ClaimReleased) for e in
                   [s.event async for s in service.log.read(subject=subjects.claim("chat-w1"))])


async def test_a_claim_naming_the_endpoint_is_not_its_worker(service):  # noqa: F811
    await call(service, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint(workers_max=1)))
    for n in (1, 2, 5):
        await _submit(service, ClaimSpec(claim_id=f"chat-w{n}", namespace="team-a", endpoint="chat",
                                         workload="serverless-worker"))
    await _submit(service, ClaimSpec(claim_id="forged", namespace="team-z", endpoint="chat"))
    assert await _workers(service) == []
    await call(service, subjects.command("endpoint.update"),
               UpdateEndpoint(endpoint=endpoint(workers_max=1, workers_min=1)))
    [step] = await service.endpoints.scale_all()
    assert step.add == 1 and await _workers(service) == [("chat-w3", "pending")]


async def test_worker_ids_that_would_share_a_subject_are_skipped(service):  # noqa: F811
    await _submit(service, ClaimSpec(claim_id="ep_3-w1", namespace="team-a"))
    await call(service, subjects.command("endpoint.create"),
               CreateEndpoint(endpoint=endpoint(name="ep.3", workers_min=1)))
    [step] = await service.endpoints.scale_all()
    assert await _workers(service, "ep.3") == [("ep.3-w2", "pending")]


async def test_a_second_endpoint_on_the_same_subject_is_refused(service):  # noqa: F811
    assert (await call(service, subjects.command("endpoint.create"),
                       CreateEndpoint(endpoint=endpoint(name="ep.3")))).ok
    refused = await call(service, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint(name="ep_3")))
    assert refused.error.code == "conflict" and refused.error.field == "endpoint.name"
    assert "would share the subject gpu.evt.endpoint.ep_3 with endpoint ep.3" in refused.error.message
