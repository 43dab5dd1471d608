"""The AsyncAPI 3.0 document: every channel, message, header and operation of gpuledger on NATS.

Payload schemas are the generated JSON Schema (`schemas.export.json_schemas`) moved under
`components.schemas` (their `$defs` become components; what they use of draft 2020-12 is valid
AsyncAPI Schema, a superset of draft-07). tests/contract checks the document with
@asyncapi/parser and that every subject a service subscribes or appends to is here.
"""

from __future__ import annotations

import copy

from schemas import subjects
from schemas import systems

_NATS = {"nats": {"bindingVersion": "0.1.0"}}

# channel id -> (address, description, {message name: schema component}, header set, parameters)
_TOKEN = "a claim id with every character other than a letter, digit, '-', '_' or ':' as '_'"
EVENT_CHANNELS = {
    "claimEvents": (
        "gpu.evt.claim.{claimToken}", "One claim's events (claim service).",
        ["ClaimSubmitted", "ClaimRejected", "ClaimReleased", "LeaseRenewed", "ClaimActivity"],
        "appended", {"claimToken": _TOKEN}),
    "claimEndings": (
        "gpu.evt.ending.{claimToken}", "Sessions 21-24: the allocator's mark just before a decision "
        "ended the claim unbound (now on gpu.evt.fence.{node}.ending; still believed here).",
        ["ClaimEnding"], "appended", {"claimToken": _TOKEN}),
    "nodeReleases": (
        "gpu.evt.fence.{node}.release", "The claim service's releases of claims allocated on the node "
        "and not bound in its fold (a ClaimReleased, or an EventBatch of them): under the node's "
        "binding fence gpu.evt.fence.{node}.*, so no binding of a record from before is stored after.",
        ["ClaimReleased", "EventBatch"], "appended", {"node": "the node name as a subject token"}),
    "nodeEndings": (
        "gpu.evt.fence.{node}.ending", "The allocator's mark just before a decision ends a claim on "
        "the node unbound (only the allocator writes here): under the node's binding fence "
        "gpu.evt.fence.{node}.*, so no binding is stored after the mark.",
        ["ClaimEnding"], "appended", {"node": "the node name as a subject token"}),
    "submits": (
        subjects.SUBMITS, "Every new claim (session 34 on): a ClaimSubmitted, or one EventBatch of "
        "them per drained intake batch (read its members in order), appended on condition of this "
        "subject's last sequence, so two claim-service replicas never both append one id.",
        ["ClaimSubmitted", "EventBatch"], "fenced", {}),
    "intakeBatches": (
        subjects.INTAKE_BATCHES, "The claim service's batches: releases of bound or pending claims "
        "(an EventBatch of ClaimReleased); until session 34 also the claims it drained from the intake "
        "together (an EventBatch of ClaimSubmitted).", ["EventBatch"], "appended", {}),
    "decisions": (
        subjects.DECISIONS, "The allocator's fenced decisions: one DecisionBatch per append "
        "(ClaimAllocated, ClaimPending, AllocationRejected, ClaimEvicted, AllocationExpired, "
        "AllocationUnused, NodeLost, QuotaBorrowed, QuotaReclaimed).", ["DecisionBatch"], "fenced", {}),
    "nodeEvents": (
        "gpu.evt.node.{node}", "A node agent's reports.",
        ["NodeRegistered", "NodeHeartbeat", "DeviceHealthChanged", "NodeConditionChanged",
         "UsageObserved", "ProcessKilled", "EventBatch"], "appended",
        {"node": "the node name as a subject token"}),
    "nodeBindings": (
        "gpu.evt.node.{node}.bound", "A node agent's bindings of the claims its node's record of live "
        "claims lists (the key {node} of the key-value bucket " + subjects.NODE_GRANTS_BUCKET + ", "
        "written by the allocator): one ClaimBound, or an EventBatch of them per record, appended "
        "on condition of the record's fence, the last sequence over gpu.evt.fence.{node}.*.", ["ClaimBound", "EventBatch"], "fenced",
        {"node": "the node name as a subject token"}),
    "poolEvents": ("gpu.evt.pool.{pool}", "Pool definitions (pool controller); the fleet's "
                   "defaults on " + subjects.FLEET_DEFAULTS + ".",
                   ["PoolCreated", "PoolAccessChanged", "PoolDeleted", "FleetDefaultsSet"], "appended",
                   {"pool": "the pool name, or _fleet"}),
    "deviceMarks": ("gpu.evt.marks.{node}", "Operators' marks on a node's devices (pool controller).",
                    ["DeviceIgnoreChanged"], "appended", {"node": "the node name"}),
    "quotaEvents": ("gpu.evt.quota.{namespace}", "Namespace quotas and their alerts (quota service); "
                    "the default quota on gpu.evt.quota._default.",
                    ["QuotaSet", "QuotaDeleted", "QuotaAlertRaised", "QuotaAlertCleared", "QuotaDefaultSet",
                     "QuotaDefaultDeleted"], "appended",
                    {"namespace": "the namespace (or cohort), or _default"}),
    "driftEvents": ("gpu.evt.drift.{node}", "Observed use that differs from the ledger (quota service).",
                    ["DriftDetected", "DriftCleared"], "appended", {"node": "the node name"}),
    "endpointEvents": ("gpu.evt.endpoint.{endpoint}", "Serverless endpoints (claim service).",
                       ["EndpointCreated", "EndpointUpdated", "EndpointDeleted", "EndpointLoadReported",
                        "EndpointScaled"],
                       "appended", {"endpoint": "the endpoint name"}),
    "slotEvents": ("gpu.evt.slot.{slot}", "Requests running on a model slot (claim service), "
                   "appended with the slot subject's last sequence as the fence.",
                   ["SlotRequestStarted", "SlotRequestFinished"], "fenced", {"slot": "the slot id"}),
    "deadLetters": ("gpu.evt.deadletter.{source}", "Refused input, recorded once: a copy of each "
                    "ClaimRejected of the intake (source `intake`), also those whose claim id was "
                    "unreadable.", ["ClaimRejected"], "appended", {"source": "where it was refused"}),
}

# request/reply: (subject, request Struct, what it does). The reply is always a Reply.
REQUESTS = (
    (subjects.command("claim.submit"), "SubmitClaim", "submit a claim; wait_seconds > 0 waits for its outcome"),
    (subjects.command("claim.release"), "ReleaseClaim", "release a claim"),
    (subjects.command("claim.renew"), "RenewLease", "renew an allocated claim's lease"),
    (subjects.command("claim.activity"), "ReportActivity", "report a claim in use (keeps it from going stale)"),
    (subjects.query("claim.get"), "GetClaim", "a claim's current view"),
    (subjects.query("claim.explain"), "GetClaim", "a claim's view with its history and reasons"),
    (subjects.query("claim.resolve"), "GetClaim", "the one whole claim id a typed id or unique prefix names "
                                                  "(ambiguous: an error listing the candidates)"),
    (subjects.query("claim.list"), "ListClaims", "claims by namespace and status"),
    (subjects.query("cluster.summary"), "Query", "counts of nodes, devices and claims by status"),
    (subjects.query("allocator.status"), "Query", "the allocator's position and queue"),
    (subjects.command("quota.set"), "SetQuota", "set a namespace quota"),
    (subjects.command("quota.delete"), "DeleteQuota", "delete a namespace quota"),
    (subjects.command("quota.get"), "GetQuota", "one namespace quota"),
    (subjects.command("quota.list"), "ListQuotas", "quotas, optionally the subtree of a cohort"),
    (subjects.command("quota.apply"), "ApplyQuotas", "several quotas at once (a manifest), all or none"),
    (subjects.command("quota.default.set"), "SetDefaultQuota", "the quota of namespaces without their own"),
    (subjects.command("quota.default.get"), "Query", "the default quota and the namespaces it governs"),
    (subjects.command("quota.default.delete"), "Query", "remove the default quota"),
    (subjects.query("quota.status"), "GetQuotaStatus", "quota use, conditions, borrowing and drift"),
    (subjects.command("pool.create"), "CreatePool", "create a GPU pool"),
    (subjects.command("pool.update"), "UpdatePool", "change a pool's access (nothing else may change)"),
    (subjects.command("pool.delete"), "DeletePool", "delete a pool"),
    (subjects.query("pool.get"), "GetPool", "one pool"),
    (subjects.query("pool.list"), "ListPools", "every pool"),
    (subjects.query("pool.render"), "RenderPool", "the Kubernetes objects a pool needs"),
    (subjects.command("pool.defaults.set"), "SetFleetDefaults", "the fleet's defaults (a node's cap of live claims)"),
    (subjects.query("pool.defaults.get"), "Query", "the fleet's defaults"),
    (subjects.command("device.ignore"), "IgnoreDevice", "take a device out of service (Ignored) or give it back"),
    (subjects.command("endpoint.create"), "CreateEndpoint", "create a serverless endpoint"),
    (subjects.command("endpoint.update"), "UpdateEndpoint", "change an endpoint (a live one keeps its locked image)"),
    (subjects.command("endpoint.delete"), "DeleteEndpoint", "delete an endpoint (its workers are released)"),
    (subjects.command("endpoint.load"), "ReportEndpointLoad", "report an endpoint's queue to its autoscaler"),
    (subjects.query("endpoint.get"), "GetEndpoint", "one endpoint"),
    (subjects.query("endpoint.list"), "ListEndpoints", "endpoints, optionally of one namespace"),
    (subjects.command("slot.acquire"), "AcquireSlot", "a model slot for one request: a warm one with room, else a new one"),
    (subjects.command("slot.finish"), "FinishSlotRequest", "a request on a slot finished (its concurrency is free)"),
    (subjects.command("slot.cleanup"), "CleanupSlots", "release stale slots now"),
    (subjects.query("slot.list"), "ListSlots", "model slots: model, runtime, adapter, GPUs, concurrency, claim"),
    (subjects.query("gpus.availability"), "Query", "GPUs per model in the fleet: cards, free, healthy, "
                                                   "MIG instances, nodes, most on one node"),
)
# a publishing system's own request subjects (schemas/systems.py): `<subject>.{system}`, which
# only that system's NATS user may publish on; it acts on its own claims only
_SYSTEM = "a publishing system's name (GPULEDGER_SYSTEMS; its NATS user is system-<name>)"
SYSTEM_REQUESTS = (
    ("submit", "SubmitClaim", "submit a claim as this system (in one of its namespaces)"),
    ("release", "ReleaseClaim", "release one of this system's claims"),
    ("renew", "RenewLease", "renew the lease of one of this system's allocated claims"),
    ("activity", "ReportActivity", "report one of this system's claims in use"),
)
# simulated fleets only (`gpuledger up --demo`): their Structs live with the simulated node agent
SIMULATION_REQUESTS = (
    (subjects.command("node.fault"), "inject a device fault into a simulated node"),
    (subjects.command("node.process"), "start or stop a fake process on a simulated device"),
)

HEADERS = {
    "Nats-Msg-Id": "Idempotency key: a message with the id of one stored within the stream's "
                   "dedup window (120 s) is acknowledged as a duplicate and not stored again. "
                   "Publishers set it to the claim id.",
    "Nats-Expected-Last-Subject-Sequence": "Fencing: stored only if the subject's last sequence "
                                           "is this one (the allocator's decision subject).",
    "traceparent": "W3C trace context: the claim's path is one trace.",
    "tracestate": "W3C trace state, with traceparent.",
}
_HEADER_SETS = {"publish": ("Nats-Msg-Id", "traceparent", "tracestate"),
                "appended": ("Nats-Msg-Id", "traceparent", "tracestate"),
                "fenced": ("Nats-Expected-Last-Subject-Sequence", "traceparent", "tracestate"),
                "request": ("traceparent", "tracestate")}


def asyncapi_document(schemas: dict[str, dict]) -> dict:
    """The whole document, from the JSON Schema documents `schemas` (file name -> document)."""
    components = _component_schemas(schemas)
    doc = {
        "asyncapi": "3.0.0",
        "info": {"title": "gpuledger", "version": "1.0.0", "description": _INFO},
        "defaultContentType": "application/json",
        "servers": {"gpuledger": {
            "host": "{hostPort}", "protocol": "nats",
            "description": "The server GPULEDGER_NATS_URL names (`gpuledger up` prints it).",
            "variables": {"hostPort": {"description": "host:port of GPULEDGER_NATS_URL"}}}},
        "channels": {}, "operations": {},
        "components": {"schemas": components, "messages": {}, "messageTraits": _traits()},
    }
    _add_publisher_channels(doc)
    for channel_id, (address, description, messages, headers, params) in EVENT_CHANNELS.items():
        _add_channel(doc, channel_id, address, description, messages, headers, params)
        _operation(doc, f"read{channel_id[0].upper()}{channel_id[1:]}", "receive", channel_id,
                   f"Read {channel_id} (stream {subjects.STREAM}).")
    _add_requests(doc)
    doc["channels"]["ready"] = {"address": "gpu.sys.ready.{service}", "description":
                                "A service started (empty core NATS message); `gpuledger up` waits for them.",
                                "parameters": {"service": {"description": "the service name"}},
                                "messages": {}}
    _operation(doc, "readReady", "receive", "ready", "Wait for services to start.")
    return doc


_INFO = ("Event-sourced GPU allocation on NATS JetStream. Publish claims to gpu.intake.claim (a "
         "publishing system with a user of its own: gpu.intake.claim.<system>, and it may release "
         "and renew its own claims on gpu.cmd.claim.<verb>.<system>) and read each claim's outcome on "
         "gpu.outcome.claim.<token> (a system's own claims: gpu.outcome.system.<system>.<token>, "
         "which only it may read; docs/contract.md says how). Every request subject and the "
         "intake refuse a JSON object that repeats a key.")


def _component_schemas(schemas: dict[str, dict]) -> dict:
    out: dict[str, dict] = {}
    for doc in schemas.values():
        for name, definition in doc.get("$defs", {}).items():
            out[name] = _refs_to_components(copy.deepcopy(definition))
    out["Event"] = _refs_to_components({k: v for k, v in copy.deepcopy(schemas["events.json"]).items()
                                        if k not in ("$defs", "$schema", "$id")})
    return out


def _refs_to_components(node):
    if isinstance(node, dict):
        return {k: (v.replace("#/$defs/", "#/components/schemas/") if k == "$ref" else _refs_to_components(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_refs_to_components(v) for v in node]
    return node


def _traits() -> dict:
    traits = {}
    for name, headers in _HEADER_SETS.items():
        traits[name] = {"headers": {"type": "object", "properties": {
            h: {"type": "string", "description": HEADERS[h]} for h in headers}}}
    return traits


def _message(doc: dict, name: str, schema: str, headers: str) -> dict:
    key = f"{name}.{headers}"
    doc["components"]["messages"][key] = {
        "name": name, "title": name, "contentType": "application/json",
        "payload": {"$ref": f"#/components/schemas/{schema}"},
        "traits": [{"$ref": f"#/components/messageTraits/{headers}"}]}
    return {"$ref": f"#/components/messages/{key}"}


def _add_channel(doc, channel_id, address, description, messages, headers, params) -> None:
    channel = {"address": address, "description": description,
               "messages": {m: _message(doc, m, m, headers) for m in messages}}
    if params:
        channel["parameters"] = {p: {"description": d} for p, d in params.items()}
    doc["channels"][channel_id] = channel


def _operation(doc, op_id, action, channel_id, summary, reply=None, messages=None) -> None:
    op = {"action": action, "channel": {"$ref": f"#/channels/{channel_id}"}, "summary": summary,
          "bindings": _NATS}
    if messages is not None:
        op["messages"] = [{"$ref": f"#/channels/{channel_id}/messages/{m}"} for m in messages]
    if reply is not None:
        op["reply"] = reply
    doc["operations"][op_id] = op


def _add_publisher_channels(doc: dict) -> None:
    _add_channel(doc, "intake", subjects.INTAKE_CLAIMS,
                 f"Publish a claim (JetStream stream {subjects.INTAKE_STREAM}, a work queue: stored "
                 "before anyone reads it). Set Nats-Msg-Id to the claim id. Beyond the schema: a key "
                 "written twice in one object, a lone UTF-16 surrogate (\\ud800) or bytes that are not "
                 "UTF-8 are refused too (docs/contract.md).",
                 ["ClaimSpec"], "publish", {})
    _operation(doc, "publishClaim", "send", "intake", "Publish a claim.", messages=["ClaimSpec"])
    _add_channel(doc, "systemIntake", systems.intake("{system}"),
                 f"Publish a claim as a publishing system (JetStream stream {subjects.INTAKE_STREAM}): "
                 "only that system's NATS user may publish here; the claim is recorded as the "
                 "system's, must be in one of its namespaces (else rejected, code forbidden), and only "
                 "the system may release or renew it on its own request subjects. Otherwise as the "
                 "intake.", ["ClaimSpec"], "publish", {"system": _SYSTEM})
    _operation(doc, "publishSystemClaim", "send", "systemIntake", "Publish a claim as a publishing system.",
               messages=["ClaimSpec"])
    _add_channel(doc, "outcomes", "gpu.outcome.claim.{claimToken}",
                 f"Each claim's current outcome (stream {subjects.OUTCOMES_STREAM}, the latest per "
                 "subject kept): subscribe before publishing, or read the last message (direct get).",
                 ["ClaimOutcome"], "request", {"claimToken": _TOKEN})
    _operation(doc, "readOutcome", "receive", "outcomes", "Read a claim's outcome.",
               messages=["ClaimOutcome"])
    _add_channel(doc, "systemOutcomes", f"{subjects.SYSTEM_OUTCOMES}.{{system}}.{{claimToken}}",
                 f"The current outcome of a claim a publishing system submitted (stream "
                 f"{subjects.OUTCOMES_STREAM}, the latest per subject kept): only that system's NATS "
                 "user may subscribe here or read it by direct get by subject "
                 f"($JS.API.DIRECT.GET.{subjects.OUTCOMES_STREAM}.<subject>); the claim is never on "
                 "gpu.outcome.claim.<token>.", ["ClaimOutcome"], "request",
                 {"system": _SYSTEM, "claimToken": _TOKEN})
    _operation(doc, "readSystemOutcome", "receive", "systemOutcomes",
               "Read the outcome of a publishing system's own claim.", messages=["ClaimOutcome"])


def _add_requests(doc: dict) -> None:
    doc["channels"]["replyInbox"] = {
        "address": None, "description": "The requester's reply inbox (NATS request/reply).",
        "messages": {"Reply": _message(doc, "Reply", "Reply", "request")}}
    for subject, struct, summary in REQUESTS:
        _request(doc, subject, struct, summary)
    for subject, summary in SIMULATION_REQUESTS:
        _request(doc, subject, None, summary + " (simulation only)")
    for verb, struct, summary in SYSTEM_REQUESTS:
        channel_id = f"cmdClaim{verb.capitalize()}OfSystem"
        _request(doc, systems.command(verb, "{system}"), struct, summary, channel_id)
        doc["channels"][channel_id]["parameters"] = {"system": {"description": _SYSTEM}}


def _request(doc: dict, subject: str, struct: str | None, summary: str, channel_id: str = "") -> None:
    kind, *words = subject.split(".")[1:]  # gpu.cmd.claim.submit -> cmdClaimSubmit
    channel_id = channel_id or kind + "".join(w[0].upper() + w[1:] for w in words)
    name = struct or "SimulationCommand"
    if struct is None and "SimulationCommand" not in doc["components"]["schemas"]:
        doc["components"]["schemas"]["SimulationCommand"] = {
            "type": "object", "description": "See services/node_agent/simulation.py."}
    doc["channels"][channel_id] = {
        "address": subject, "description": summary,
        "messages": {name: _message(doc, name, name, "request")}}
    reply = {"channel": {"$ref": "#/channels/replyInbox"},
             "messages": [{"$ref": "#/channels/replyInbox/messages/Reply"}]}
    _operation(doc, channel_id, "send", channel_id, summary[0].upper() + summary[1:] + ".",
               reply=reply, messages=[name])
