// Node 20 lacks fs.globSync (Node 22 has it). The conformance runner (0.2.0-alpha.12) imports it by name
// from "fs", so on Node 20 it fails to load at all, though it calls it only to collect its result files
// (`globSync("**/checks.json", {cwd})`). Loaded with `node --import ./node20-shim.mjs` (the harness sets
// NODE_OPTIONS), this resolves "fs" for every other module to fs-globsync.mjs: node:fs plus that one
// function. On a Node that has fs.globSync it does nothing.
import fs from "node:fs";
import { register } from "node:module";
import { isMainThread } from "node:worker_threads";

const target = new URL("./fs-globsync.mjs", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === "fs" || specifier === "node:fs") && context.parentURL !== target) {
    return { url: target, shortCircuit: true };
  }
  return next(specifier, context);
}

if (isMainThread && typeof fs.globSync !== "function") register(import.meta.url);
