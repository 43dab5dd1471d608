// Validate samples against one schema file with ajv (draft 2020-12, strict). Reads
// {"schema": path, "samples": [json text, ...]} on stdin; prints [{valid, errors}] in order.
// Samples come as JSON text so ajv sees exactly the bytes a publisher would send.
import Ajv2020 from "ajv/dist/2020.js";
import fs from "node:fs";

const input = JSON.parse(fs.readFileSync(0, "utf8"));
const ajv = new Ajv2020({ strict: true, allErrors: true, logger: false });
const validate = ajv.compile(JSON.parse(fs.readFileSync(input.schema, "utf8")));
const verdicts = input.samples.map(text => {
  const valid = validate(JSON.parse(text));
  return { valid, errors: valid ? [] : validate.errors.map(e => `${e.instancePath} ${e.message}`) };
});
console.log(JSON.stringify(verdicts));
