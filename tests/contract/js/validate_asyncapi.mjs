// Parse the AsyncAPI document with the official parser; print its diagnostics as JSON.
import { Parser } from "@asyncapi/parser";
import fs from "node:fs";

const path = process.argv[2];
const parser = new Parser();
const { document, diagnostics } = await parser.parse(fs.readFileSync(path, "utf8"), { source: path });
const out = diagnostics.map(d => ({ severity: d.severity, code: d.code, message: d.message, path: d.path }));
console.log(JSON.stringify({
  parsed: document !== undefined,
  channels: document ? document.channels().all().map(c => c.address()) : [],
  operations: document ? document.operations().all().map(o => o.id()) : [],
  diagnostics: out,
}));
