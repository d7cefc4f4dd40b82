// node:fs with the one globSync the conformance runner needs on Node 20 (see node20-shim.mjs): the
// pattern "**/NAME" under options.cwd, as paths relative to it. Any other pattern is refused loudly.
import fs from "node:fs";
import path from "node:path";

export * from "node:fs";
export default fs;

export function globSync(pattern, options = {}) {
  const match = /^\*\*\/([^*?/[\]{}]+)$/.exec(String(pattern));
  if (!match) throw new Error(`globSync shim: only "**/NAME" patterns are supported, got ${pattern}`);
  return fs
    .readdirSync(options.cwd ?? process.cwd(), { recursive: true })
    .map(String)
    .filter((entry) => path.basename(entry) === match[1]);
}
