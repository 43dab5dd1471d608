// A publisher in another language, using only docs/contract.md: publish a claim to the intake with
// Nats-Msg-Id, learn its outcome on gpu.outcome.claim.<token> (subscribed before publishing), read
// the last outcome again by direct get, and publish the same claim again (stored once).
// Usage: GPULEDGER_PUBLISHER_URL=nats://publisher:SECRET@host:port node publish_claim.mjs '<claim JSON>'
import { connect, headers } from "nats";
import { lastOutcome } from "./last_outcome.mjs";

const claim = JSON.parse(process.argv[2]);
const claimId = claim.claim_id ?? claim.claimId;  // our spelling, or the serverless seed's
const timer = setTimeout(() => { console.error("no final outcome within 30 s"); process.exit(2); }, 30000);

// docs/contract.md: the subject token of a claim id is the id with every character other than
// an ASCII letter, digit, '-', '_' or ':' replaced by '_'.
const token = claimId.replace(/[^A-Za-z0-9_:-]/g, "_");
const subject = `gpu.outcome.claim.${token}`;

// nats.js does not read credentials from a URL: take them apart (nats://user:password@host:port)
const url = new URL(process.env.GPULEDGER_PUBLISHER_URL ?? process.env.GPULEDGER_NATS_URL);
const nc = await connect({
  servers: `${url.hostname}:${url.port || 4222}`,
  ...(url.username ? { user: decodeURIComponent(url.username), pass: decodeURIComponent(url.password) } : {}),
});
const js = nc.jetstream();
const sub = nc.subscribe(subject);  // before publishing: no outcome can be missed

const publish = async () => {
  const h = headers();
  h.set("Nats-Msg-Id", claimId);
  return js.publish("gpu.intake.claim", JSON.stringify(claim), { headers: h });
};
const ack = await publish();

const seen = [];
for await (const msg of sub) {
  const outcome = msg.json();
  if (outcome.type !== "ClaimOutcome") continue;  // anyone's publish ack can land here (docs/contract.md)
  if (seen.length && outcome.seq < seen[seen.length - 1].seq) continue;  // an older write: skip
  seen.push(outcome);
  if (outcome.final || outcome.status === "allocated" || outcome.status === "bound") break;
}
const jsm = await nc.jetstreamManager({ checkAPI: false });  // a publisher may not call $JS.API.INFO
// stored a moment after it was delivered, maybe: the last outcome at least as new as the one seen
const last = await lastOutcome(jsm, subject, seen[seen.length - 1].seq);
const again = await publish();

console.log(JSON.stringify({
  ack: { stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate },
  again: { seq: again.seq, duplicate: again.duplicate },
  seen: seen.map(o => o.status),
  last,
}));
clearTimeout(timer);
await nc.close();
