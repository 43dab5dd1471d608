// Another team's client, written from README.md ("How other systems publish claims"),
// docs/contract.md and schemas/json alone: it does everything those say another system can do and
// prints one JSON object of what it saw. Every message it sends is checked against its schema with
// ajv first, every outcome and reply it reads too.
// Usage: GPULEDGER_PUBLISHER_URL=nats://publisher:S@host:port GPULEDGER_NATS_URL=nats://ops:S@host:port \
//        node outsider.mjs RUN_TAG
// (the ops URL only for what the publisher user may not do: release, explain, endpoints)
import Ajv2020 from "ajv/dist/2020.js";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { connect, headers } from "nats";

const SCHEMAS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../schemas/json");
const ajv = new Ajv2020({ strict: true, allErrors: true, logger: false });
const schema = name => ajv.compile(JSON.parse(fs.readFileSync(path.join(SCHEMAS, `${name}.json`), "utf8")));
const check = { claim: schema("claim"), outcome: schema("outcome"), reply: schema("command.Reply"),
                submit: schema("command.SubmitClaim"), release: schema("command.ReleaseClaim"),
                get: schema("command.GetClaim"), endpoint: schema("command.CreateEndpoint") };
const schemaErrors = [];
function valid(kind, value, what) {
  if (!check[kind](value)) schemaErrors.push({ what, kind, errors: check[kind].errors.map(e => `${e.instancePath} ${e.message}`) });
  return value;
}

const tag = process.argv[2] ?? Date.now().toString(36);
const timer = setTimeout(() => { console.error("outsider.mjs: not done within 90 s"); process.exit(2); }, 90000);

// nats.js does not take credentials from a URL (docs/contract.md, Permissions)
async function connectTo(envName) {
  const url = new URL(process.env[envName]);
  return connect({ servers: `${url.hostname}:${url.port}`, user: decodeURIComponent(url.username),
                   pass: decodeURIComponent(url.password) });
}
const nc = await connectTo("GPULEDGER_PUBLISHER_URL");
const ops = process.env.GPULEDGER_NATS_URL ? await connectTo("GPULEDGER_NATS_URL") : null;
const js = nc.jetstream();
const jsm = await nc.jetstreamManager({ checkAPI: false });  // a publisher may not call $JS.API.INFO

const token = id => id.replace(/[^A-Za-z0-9_:-]/g, "_");  // "From an id to a subject token"
const outcomeSubject = id => `gpu.outcome.claim.${token(id)}`;
const done = o => o.final || o.status === "allocated" || o.status === "bound";

// Subscribe before publishing; keep the outcomes in seq order (drop a lower seq than one seen).
function watch(id) {
  const sub = nc.subscribe(outcomeSubject(id));
  const seen = [];
  const until = (async () => {
    for await (const msg of sub) {
      const outcome = valid("outcome", msg.json(), `outcome of ${id}`);
      if (seen.length && outcome.seq < seen[seen.length - 1].seq) continue;
      seen.push(outcome);
      if (done(outcome)) break;
    }
    return seen;
  })();
  return { until, sub };
}

async function publish(claim, msgId) {
  valid("claim", claim, `claim ${claim.claim_id}`);
  const h = headers();
  if (msgId) h.set("Nats-Msg-Id", msgId);
  const ack = await js.publish("gpu.intake.claim", JSON.stringify(claim), msgId ? { headers: h } : {});
  return { stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate };
}

// "Read the last message": direct get; "not found" means no outcome yet.
async function lastOutcome(id, { waitFor = done, tries = 100 } = {}) {
  for (let i = 0; i < tries; i++) {
    try {
      const msg = await jsm.direct.getMessage("GPULEDGER_OUTCOMES", { last_by_subj: outcomeSubject(id) });
      const outcome = valid("outcome", msg.json(), `last outcome of ${id}`);
      if (waitFor(outcome)) return outcome;
    } catch (err) {
      if (!/no message found|not found/i.test(String(err))) throw err;
    }
    await new Promise(r => setTimeout(r, 200));
  }
  return null;
}

async function request(conn, subject, body, kind) {
  if (kind) valid(kind, body, subject);
  const msg = await conn.request(subject, JSON.stringify(body), { timeout: 20000 });
  return valid("reply", msg.json(), `reply of ${subject}`);
}

const id = n => `${n}.${tag}`;  // ids with a '.', as the docs' example: the token replaces it
const out = {};

// 1. Intake with Nats-Msg-Id, outcome by subscription; the same publish again is a duplicate.
const a = { claim_id: id("a"), namespace: "team-b", gpus: 2, models: ["H100"] };
const watchA = watch(a.claim_id);
out.a = { ack: await publish(a, a.claim_id) };
out.a.seen = (await watchA.until).map(o => o.status);
out.a.again = await publish(a, a.claim_id);
out.a.last = await lastOutcome(a.claim_id);

// 2. Intake without Nats-Msg-Id (allowed; only the dedup window is lost), outcome by direct get.
const b = { claim_id: id("b"), namespace: "team-b", gpu_milli: 250 };
out.b = { ack: await publish(b, null) };
out.b.last = await lastOutcome(b.claim_id);

// 3. The same claim again under a new Nats-Msg-Id: a repeat, not a second claim.
out.repeat = { ack: await publish(a, `${a.claim_id}-again`) };

// 4. The same id with other content: on the intake it is dead-lettered only (the publisher
//    cannot read that), so ask by request/reply, which answers `conflict`.
out.conflict = await request(nc, "gpu.cmd.claim.submit", { claim: { ...a, gpus: 1 } }, "submit");

// 5. Request/reply submit, waiting for the outcome.
const c = { claim_id: id("c"), namespace: "team-a", gpus: 1, models: ["H100"] };
out.c = await request(nc, "gpu.cmd.claim.submit", { claim: c, wait_seconds: 20 }, "submit");

// 6. A gang: both members placed all-or-nothing. A gang id is its namespace's (docs/contract.md,
//    Gangs): another namespace's claim naming it first, one no node could take with a gang_size
//    no gang reaches, is another gang and holds this one back in nothing.
const squatter = { claim_id: id("squat"), namespace: "team-b", gpus: 64, gang_id: `gang-${tag}`, gang_size: 256 };
await publish(squatter, squatter.claim_id);
const members = [1, 2].map(i => ({ claim_id: id(`g${i}`), namespace: "team-a", gpus: 1,
                                  gang_id: `gang-${tag}`, gang_size: 2 }));
const watches = members.map(m => watch(m.claim_id));
for (const m of members) await publish(m, m.claim_id);
out.gang = (await Promise.all(watches.map(w => w.until))).map(seen => seen[seen.length - 1]);

// 7. Refusals: a broken rule and a repeated key, each naming the field in the outcome.
const bad = { claim_id: id("bad"), namespace: "team-a", gpu_milli: 250, gpus: 2 };
const watchBad = watch(bad.claim_id);
await js.publish("gpu.intake.claim", JSON.stringify(bad));
out.bad = (await watchBad.until).at(-1);
const dup = id("dup");
const watchDup = watch(dup);
await js.publish("gpu.intake.claim", `{"claim_id": "${dup}", "namespace": "team-a", "gpus": 1, "gpus": 8}`);
out.dup = (await watchDup.until).at(-1);
// A workload only the claim service writes (docs/contract.md, Reserved): refused, naming it.
const slot = { claim_id: id("slot"), namespace: "team-a", gpus: 1, workload: "helix-slot", labels: { model: "x" } };
const watchSlot = watch(slot.claim_id);
await js.publish("gpu.intake.claim", JSON.stringify(slot));
out.reserved = (await watchSlot.until).at(-1);
out.reservedBySchema = !check.claim(slot);  // claim.json says so as well

// 8. What the publisher user may not do: release (docs/contract.md, Permissions).
try {
  await nc.request("gpu.cmd.claim.release", JSON.stringify({ claim_id: a.claim_id }), { timeout: 3000 });
  out.publisherRelease = "allowed";
} catch (err) {
  out.publisherRelease = err.code ?? String(err);
}

if (ops) {
  // 9. Release, explain and endpoints with a user that may (ops).
  out.release = await request(ops, "gpu.cmd.claim.release", { claim_id: a.claim_id }, "release");
  out.released = await lastOutcome(a.claim_id, { waitFor: o => o.final });
  out.explain = await request(ops, "gpu.qry.claim.explain", { claim_id: c.claim_id }, "get");
  out.endpoint = await request(ops, "gpu.cmd.endpoint.create",
                               { endpoint: { name: `ep-${tag}`, namespace: "team-a", gpu_groups: ["HOPPER_141"] } },
                               "endpoint");
}

out.schemaErrors = schemaErrors;
console.log(JSON.stringify(out));
clearTimeout(timer);
await nc.close();
if (ops) await ops.close();
