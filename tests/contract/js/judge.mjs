// What a publisher in another language can tell, before publishing, of a payload for
// gpu.intake.claim, using only docs/contract.md and schemas/json/claim.json: the payload must be
// within the server's max payload, UTF-8, JSON, repeat no key in an object, hold only well-formed
// strings (no lone UTF-16 surrogate), and be valid against the schema (ajv, draft 2020-12, strict).
// Reads {"schema": path, "max_payload": bytes, "samples": [base64, ...]} on stdin; prints
// [{"valid": bool, "why": string}] in the same order.
import Ajv2020 from "ajv/dist/2020.js";
import fs from "node:fs";

const input = JSON.parse(fs.readFileSync(0, "utf8"));
const ajv = new Ajv2020({ strict: true, allErrors: false, logger: false });
const validate = ajv.compile(JSON.parse(fs.readFileSync(input.schema, "utf8")));
// fatal: invalid UTF-8 is an error, not U+FFFD; ignoreBOM: a BOM stays in the text (JSON has none)
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

// The first key written twice in one object of a JSON text JSON.parse accepted, or null.
function repeatedKey(text) {
  const stack = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    const top = stack[stack.length - 1];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      if (top && top.object && top.wantKey) {
        const key = JSON.parse(text.slice(i, j + 1));
        if (top.keys.has(key)) return key;
        top.keys.add(key);
        top.wantKey = false;
      }
      i = j;
    } else if (c === "{") stack.push({ object: true, keys: new Set(), wantKey: true });
    else if (c === "[") stack.push({ object: false });
    else if (c === "}" || c === "]") stack.pop();
    else if (c === "," && top && top.object) top.wantKey = true;
  }
  return null;
}

// Whether every string and key of a parsed value is well-formed Unicode (no lone surrogate).
function wellFormed(value) {
  if (typeof value === "string") return value.isWellFormed();
  if (Array.isArray(value)) return value.every(wellFormed);
  if (value && typeof value === "object") {
    return Object.entries(value).every(([k, v]) => k.isWellFormed() && wellFormed(v));
  }
  return true;
}

function judge(bytes) {
  if (bytes.length > input.max_payload) return { valid: false, why: "over the server's max payload" };
  let text, value;
  try { text = utf8.decode(bytes); } catch { return { valid: false, why: "not UTF-8" }; }
  try { value = JSON.parse(text); } catch (e) { return { valid: false, why: `not JSON: ${e.message}` }; }
  try {
    const key = repeatedKey(text);
    if (key !== null) return { valid: false, why: `key ${JSON.stringify(key)} repeated` };
    if (!wellFormed(value)) return { valid: false, why: "a lone UTF-16 surrogate" };
  } catch (e) {  // nested deeper than this engine's stack: no schema allows that anyway
    return { valid: false, why: `too deep to check: ${e.message}` };
  }
  let valid;
  try { valid = validate(value); } catch (e) { return { valid: false, why: `too deep for ajv: ${e.message}` }; }
  const why = valid ? "" : validate.errors.map(e => `${e.instancePath} ${e.message}`).join("; ");
  return { valid, why };
}

console.log(JSON.stringify(input.samples.map(b64 => judge(Buffer.from(b64, "base64")))));
