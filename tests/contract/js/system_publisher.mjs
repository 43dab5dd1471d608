// A publishing system in another language, using only docs/contract.md ("One user per system"):
// as its own NATS user (system-<name>, replies on its own inbox prefix), publish a claim to
// gpu.intake.claim.<system>, wait for its outcome on gpu.outcome.system.<system>.<token> and read it
// again by direct get, renew its lease and report activity on gpu.cmd.claim.<verb>.<system>, try to
// release another system's claim (refused: forbidden), to read another system's outcome (direct
// get and subscription, both refused by nats-server) and another system's intake subject (refused
// by nats-server), and release its own claim.
// Usage: GPULEDGER_SYSTEM_URL=nats://system-NAME:SECRET@host:port GPULEDGER_SYSTEM=NAME \
//        node system_publisher.mjs '<claim JSON>' OTHER_CLAIM_ID OTHER_SYSTEM
import { connect, headers, JSONCodec } from "nats";
import { lastOutcome } from "./last_outcome.mjs";

const [claimJson, otherClaimId, otherSystem] = process.argv.slice(2);
const claim = JSON.parse(claimJson);
const system = process.env.GPULEDGER_SYSTEM;
const timer = setTimeout(() => { console.error("not done within 60 s"); process.exit(2); }, 60000);
const token = id => id.replace(/[^A-Za-z0-9_:-]/g, "_");
const outcomeSubject = (sys, id) => `gpu.outcome.system.${sys}.${token(id)}`;

const url = new URL(process.env.GPULEDGER_SYSTEM_URL);
const nc = await connect({
  servers: `${url.hostname}:${url.port || 4222}`,
  user: decodeURIComponent(url.username), pass: decodeURIComponent(url.password),
  inboxPrefix: `_INBOX_system-${system}`,  // the only inbox this system's user may read
});
const jc = JSONCodec();
const js = nc.jetstream();
const jsm = await nc.jetstreamManager({ checkAPI: false });
const sub = nc.subscribe(outcomeSubject(system, claim.claim_id));  // before publishing

const h = headers();
h.set("Nats-Msg-Id", claim.claim_id);
const ack = await js.publish(`gpu.intake.claim.${system}`, JSON.stringify(claim), { headers: h });

const seen = [];
let seenSeq = 0;
for await (const msg of sub) {
  const outcome = msg.json();
  if (outcome.type !== "ClaimOutcome") continue;  // anyone's publish ack can land here (docs/contract.md)
  seen.push(outcome.status);
  seenSeq = Math.max(seenSeq, outcome.seq);
  if (outcome.final || outcome.status === "allocated" || outcome.status === "bound") break;
}

// the last outcome again, by direct get (by subject: nats-server checks it is this system's); it
// may be stored a moment after it was delivered: at least as new as the one seen
const own = await lastOutcome(jsm, outcomeSubject(system, claim.claim_id), seenSeq);
const refusal = err => String(err.code ?? err.message);
// another system's outcome (its namespace, node, devices, env): nats-server refuses both reads
let otherGet;
try {
  await jsm.direct.getMessage("GPULEDGER_OUTCOMES", { last_by_subj: outcomeSubject(otherSystem, otherClaimId) });
  otherGet = "read";
} catch (err) {
  otherGet = refusal(err);
}
let otherSubscribe;
try {
  for await (const msg of nc.subscribe(outcomeSubject(otherSystem, otherClaimId))) {
    otherSubscribe = `delivered ${msg.subject}`;
    break;
  }
} catch (err) {
  otherSubscribe = refusal(err);  // nats.js ends the subscription with the server's refusal
}

const ask = async (verb, body) =>
  jc.decode((await nc.request(`gpu.cmd.claim.${verb}.${system}`, jc.encode(body), { timeout: 10000 })).data);
const renew = await ask("renew", { claim_id: claim.claim_id });
const activity = await ask("activity", { claim_id: claim.claim_id });
const releaseOther = await ask("release", { claim_id: otherClaimId });
const renewOther = await ask("renew", { claim_id: otherClaimId });

// another system's intake: nats-server refuses the publish (nats.js rejects it: PERMISSIONS_VIOLATION)
let otherIntake;
try {
  await js.publish(`gpu.intake.claim.${otherSystem}`, JSON.stringify({ ...claim, claim_id: `${claim.claim_id}-x` }),
                   { timeout: 3000 });
  otherIntake = "stored";
} catch (err) {
  otherIntake = refusal(err);
}

const release = await ask("release", { claim_id: claim.claim_id, reason: "done" });
console.log(JSON.stringify({
  ack: { stream: ack.stream, duplicate: ack.duplicate }, seen,
  own: { status: own.status, system: own.system, claim_id: own.claim_id }, otherGet, otherSubscribe,
  renew, activity, releaseOther, renewOther, otherIntake, release,
}));
clearTimeout(timer);
await nc.close();
