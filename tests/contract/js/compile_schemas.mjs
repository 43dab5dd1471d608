// Compile every JSON Schema file of a folder with ajv's draft 2020-12 class in strict mode (all
// strict options on, so a warning is an error too). Prints {file: "ok" | error message}.
import Ajv2020 from "ajv/dist/2020.js";
import fs from "node:fs";

const dir = process.argv[2];
const result = {};
for (const file of fs.readdirSync(dir).filter(f => f.endsWith(".json") && f !== "asyncapi.json")) {
  const ajv = new Ajv2020({ strict: true, allErrors: true, logger: false });
  try {
    ajv.compile(JSON.parse(fs.readFileSync(`${dir}/${file}`, "utf8")));
    result[file] = "ok";
  } catch (err) {
    result[file] = err.message;
  }
}
console.log(JSON.stringify(result));
