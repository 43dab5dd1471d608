"""The pool-controller service: pool commands and queries, the fold of the log, admission.

Every command first waits until the fold has read the whole log (so it decides on the latest
state), then appends with the pool subject's last sequence as the fence: of two writers racing on
one pool only the first append lands; the other catches up and decides again (and then sees,
say, that the pool already exists).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from schemas import subjects
from schemas.commands import (
    CreatePool, DeletePool, GetPool, IgnoreDevice, ListPools, Query, RenderPool, Reply, SetFleetDefaults, UpdatePool,
    fail, ok)
from ledger.follower import Follower
from ledger.state import State
from services.pool_controller.admission import AdmissionConfig, PoolPlacement, review
from services.pool_controller.decisions import (
    Append, Outcome, decide_create, decide_delete, decide_fleet_defaults, decide_ignore, decide_update,
    fleet_defaults)
from services.pool_controller.claim_pods import ClaimBinding
from services.pool_controller.projection import (
    PoolProjection, claim_binding, pool_nodes, pool_status, pool_units)
from services.pool_controller.rendering import RenderRequest, render_pool
from services.pool_controller.validation import ClusterFacts
from services.pool_controller.webhook import (
    AdmissionConfigError, CallerCheck, admission_listen, caller_check, start_webhook)
from shared.commands import command
from shared.eventlog import AppendConflict
from shared.paced import SLOW_READER_LINGER_S
from shared.service import ServiceContext, serve
from shared.settings import Settings

log = logging.getLogger("gpuledger.pool_controller")
MAX_ATTEMPTS = 5
QUEUE = "pool-controller"


class PoolController:
    def __init__(self, event_log, facts: ClusterFacts, admission: AdmissionConfig,
                 clock: Callable[[], float] = time.time):
        self.log = event_log
        self.facts = facts
        self.admission = admission
        self.clock = clock
        self.projection = PoolProjection()
        # the allocator's fold, without its placement index: pools and units are what it reads; in
        # bursts (shared.paced): a pool or node change may reach admission 50 ms later; the oldest
        # generation of objects is left to the follower's refreezes (ledger.follower); bindings are
        # never read: admission, pool status and the pod webhook treat a bound claim as allocated
        # (claim_pods.HOLDING), and a binding changes no pool, unit or holder
        self.follower = Follower(event_log, self.projection.state, places=False,
                                 linger_s=SLOW_READER_LINGER_S, collect_old=False,
                                 unread=subjects.is_node_bindings)
        self.follower.listeners.append(self.projection.saw)
        self.boot_seq: int | None = None  # the log's end at start: ready once read that far
        self._writing = asyncio.Lock()

    @property
    def state(self) -> State:
        return self.projection.state

    # --- the fold ------------------------------------------------------------------------------

    async def run_fold(self) -> None:
        """Fold the log from the start, then its tail, for as long as the service runs."""
        await self.follower.run()

    async def wait_for(self, seq: int) -> None:
        await self.follower.wait_for_seq(seq, timeout=None)

    def ready(self) -> bool:
        return self.boot_seq is not None and self.projection.last_seq >= self.boot_seq

    async def catch_up(self) -> None:
        await self.wait_for(await self.log.last_seq())

    # --- commands ----------------------------------------------------------------------------

    async def execute(self, decide: Callable[[State], Outcome]) -> Reply:
        """Decide on the caught-up state and append fenced; on a lost race, decide again."""
        async with self._writing:
            for _ in range(MAX_ATTEMPTS):
                await self.catch_up()
                outcome = decide(self.state)
                if not isinstance(outcome, Append):
                    return outcome
                expected = self.projection.subject_seqs.get(outcome.subject, 0)
                try:
                    appended = await self.log.append(
                        outcome.subject, outcome.event, expected_last_subject_seq=expected,
                        msg_id=f"{outcome.subject}:{expected}:{outcome.key}")
                except AppendConflict:
                    continue
                await self.wait_for(appended.seq)  # the caller reads its own write
                return outcome.reply
        return fail("conflict", "the pool kept changing while this command ran; retry")

    async def create(self, cmd: CreatePool) -> Reply:
        return await self.execute(lambda s: decide_create(s, cmd, self.facts, self.clock()))

    async def update(self, cmd: UpdatePool) -> Reply:
        return await self.execute(lambda s: decide_update(s, cmd, self.clock()))

    async def delete(self, cmd: DeletePool) -> Reply:
        return await self.execute(lambda s: decide_delete(s, cmd, self.clock()))

    async def ignore(self, cmd: IgnoreDevice) -> Reply:
        return await self.execute(lambda s: decide_ignore(s, cmd, self.clock()))

    async def set_defaults(self, cmd: SetFleetDefaults) -> Reply:
        return await self.execute(lambda s: decide_fleet_defaults(s, cmd, self.clock()))

    # --- queries -----------------------------------------------------------------------------

    async def get(self, cmd: GetPool) -> Reply:
        await self.catch_up()
        if cmd.name not in self.state.pools:
            return fail("not-found", f"pool {cmd.name} does not exist", "name")
        return ok(pool_status(self.state, cmd.name))

    async def render(self, cmd: RenderPool) -> Reply:
        await self.catch_up()
        if cmd.name not in self.state.pools:
            return fail("not-found", f"pool {cmd.name} does not exist", "name")
        request = RenderRequest(cmd.namespace, tuple(cmd.claim_namespaces),
                                cmd.k8s_version or self.facts.k8s_version)
        rendered = render_pool(self.state, cmd.name, self.admission.resource_of(self.state.pools[cmd.name]),
                               request)
        return ok({"objects": rendered.objects, "notes": rendered.notes})

    async def defaults(self, cmd: Query) -> Reply:
        await self.catch_up()
        return ok(fleet_defaults(self.state))

    async def list(self, cmd: ListPools) -> Reply:
        await self.catch_up()
        return ok([self._summary(name) for name in self.state.pools])

    def _summary(self, name: str) -> dict:
        spec, units = self.state.pools[name], pool_units(self.state, name)
        return {"name": name, "backend": spec.backend, "unit": spec.unit,
                "slices_per_unit": spec.slices_per_unit, "strategy": spec.strategy,
                "max_claims_per_node": spec.max_claims_per_node,
                "devices": len(units), "nodes": len({u.node for u in units}),
                "allocated_devices": sum(1 for u in units if u.holders)}

    # --- admission ---------------------------------------------------------------------------

    def placements(self) -> dict[str, PoolPlacement]:
        return {name: PoolPlacement(spec, pool_nodes(self.state, name))
                for name, spec in self.state.pools.items()}

    def find_claim(self, namespace: str, name: str) -> ClaimBinding | None:
        claim_id = self.projection.gpuclaims.get((namespace, name))
        return claim_binding(self.state, claim_id) if claim_id else None

    def admit(self, path: str, admission_review: dict) -> dict:
        return review(admission_review, self.placements(), self.admission, mutate=path == "/mutate",
                      find_claim=self.find_claim)


def controller_for(ctx: ServiceContext) -> PoolController:
    settings = ctx.settings
    return PoolController(ctx.log, ClusterFacts(settings.k8s_version, settings.dra_enabled),
                          AdmissionConfig(settings.pool_resource_prefix,
                                          settings.pool_resource_aliases,
                                          settings.replaced_schedulers))


async def build(ctx: ServiceContext) -> PoolController:
    """Register the pool handlers, start the fold and, when configured, the admission webhook."""
    controller = controller_for(ctx)
    broker = ctx.broker
    # One queue group: replicas of the controller share the requests, each answered once.
    command(broker, subjects.command("pool.create"), CreatePool, controller.create, queue=QUEUE)
    command(broker, subjects.command("pool.update"), UpdatePool, controller.update, queue=QUEUE)
    command(broker, subjects.command("pool.delete"), DeletePool, controller.delete, queue=QUEUE)
    command(broker, subjects.command("device.ignore"), IgnoreDevice, controller.ignore, queue=QUEUE)
    command(broker, subjects.query("pool.get"), GetPool, controller.get, queue=QUEUE)
    command(broker, subjects.query("pool.list"), ListPools, controller.list, queue=QUEUE)
    command(broker, subjects.query("pool.render"), RenderPool, controller.render, queue=QUEUE)
    command(broker, subjects.command("pool.defaults.set"), SetFleetDefaults, controller.set_defaults, queue=QUEUE)
    command(broker, subjects.query("pool.defaults.get"), Query, controller.defaults, queue=QUEUE)
    controller.boot_seq = await ctx.log.last_seq()
    ctx.metrics.gauges("gpuledger_pools", "GPU pools defined", (), lambda: {(): len(controller.state.pools)})
    ctx.metrics.follow_fold(lambda: controller.projection.last_seq, ctx.log.last_seq)
    ctx.spawn(controller.run_fold(), name="pool-controller-fold")
    if ctx.settings.admission_port:
        await _start_admission(ctx, controller)
    if ctx.settings.kube_controller:  # GPUPool objects and node conditions on a cluster (off by default)
        from services.pool_controller.kube_loop import run as run_kube

        ctx.spawn(run_kube(controller, ctx.settings.kube_namespace), name="pool-controller-kube")
    return controller


async def _start_admission(ctx: ServiceContext, controller: PoolController) -> None:
    settings = ctx.settings
    try:
        host, tls = admission_listen(settings.admission_host, settings.admission_tls_cert,
                                     settings.admission_tls_key, settings.admission_insecure,
                                     settings.admission_client_ca)
        caller = caller_check(settings.admission_client_ca, settings.admission_client_names,
                              settings.admission_token_file, settings.admission_unauthenticated, tls is not None)
    except AdmissionConfigError as err:
        log.error("%s", err)
        raise SystemExit(f"pool-controller: {err}") from None
    if caller.anyone:  # never silently: whoever reaches the port reads any GpuClaim's node and devices
        log.warning("admission webhook on %s:%d answers ANY caller (%s): whoever reaches it can read any "
                    "GpuClaim's node, devices and pending reasons; give GPULEDGER_ADMISSION_CLIENT_CA or "
                    "_TOKEN_FILE (docs/kubernetes.md)", host, settings.admission_port,
                    "GPULEDGER_ADMISSION_UNAUTHENTICATED=1" if settings.admission_unauthenticated
                    else "plain HTTP on loopback, development")
    server = await start_webhook(controller.admit, host, settings.admission_port, tls, ready=controller.ready,
                                 caller=caller)
    log.info("admission webhook on %s:%d (%s; callers: %s)", host, settings.admission_port,
             "https" if tls else "http, INSECURE: development only", _callers(caller))

    async def close() -> None:
        server.close()
        await server.wait_closed()

    ctx.on_stop.append(close)


def _callers(caller: CallerCheck) -> str:
    if caller.anyone:
        return "anyone"
    ways = (["client certificate" + (f" named {', '.join(caller.client_names)}" if caller.client_names else "")]
            if caller.client_ca else [])
    return " or ".join(ways + (["bearer token"] if caller.tokens else []))


def main() -> None:
    asyncio.run(serve("pool-controller", Settings(), build))


if __name__ == "__main__":
    main()
