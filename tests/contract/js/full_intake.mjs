// A Node.js publisher meeting a full intake (docs/contract.md, "A full intake refuses, it never
// drops"): publishes the claims given, one at a time, and prints what each publish answered.
// Usage: GPULEDGER_PUBLISHER_URL=nats://host:port node full_intake.mjs '<JSON list of claims>'
import { connect, headers } from "nats";

const url = new URL(process.env.GPULEDGER_PUBLISHER_URL);
const nc = await connect({ servers: `${url.hostname}:${url.port || 4222}` });
const js = nc.jetstream();
const answers = [];
for (const claim of JSON.parse(process.argv[2])) {
  const h = headers();
  h.set("Nats-Msg-Id", claim.claim_id);
  try {
    const ack = await js.publish("gpu.intake.claim", JSON.stringify(claim), { headers: h });
    answers.push({ stored: ack.seq });
  } catch (err) {
    // the refusal as nats.js 2.x hands it over: a NatsError "503", the API's answer beside it
    answers.push({ error: err.message, code: err.code, api_error: err.api_error ?? null });
  }
}
await nc.close();
console.log(JSON.stringify(answers));
