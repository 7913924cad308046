// SPDX-License-Identifier: MIT
// Times just-bash's exec('echo hi') in-process and prints one JSON object (times in ms).
// Usage: node bench/justbash.mjs [--n N] [--warmup W] [--modules DIR]
// DIR is the node_modules folder holding just-bash (default: bench/.npm/node_modules).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : def;
};
const n = Number(opt("--n", "500"));
const warmup = Number(opt("--warmup", "50"));
const here = dirname(fileURLToPath(import.meta.url));
const modules = opt("--modules", join(here, ".npm", "node_modules"));
const pkgDir = join(modules, "just-bash");

let pkg;
try {
  pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
} catch (e) {
  console.log(JSON.stringify({ error: `just-bash not found in ${modules}: ${e.message}` }));
  process.exit(1);
}
// The package is ESM with an exports map; load its "import" entry by path.
const exp = pkg.exports?.["."];
const entry = (exp && (exp.import?.default ?? exp.import ?? exp.default)) ?? pkg.module ?? pkg.main;
const mod = await import(pathToFileURL(join(pkgDir, entry)).href);
const Bash = mod.Bash ?? mod.default?.Bash;
if (!Bash) {
  console.log(JSON.stringify({ error: "no Bash export in just-bash" }));
  process.exit(1);
}

const bash = new Bash();
for (let i = 0; i < warmup; i++) await bash.exec("echo hi");

const t = [];
let bad = 0;
for (let i = 0; i < n; i++) {
  const t0 = performance.now();
  const r = await bash.exec("echo hi");
  const dt = performance.now() - t0;
  if (r.stdout !== "hi\n" || r.exitCode !== 0) bad++;
  else t.push(dt);
}
t.sort((a, b) => a - b);
const pct = (p) => {
  if (!t.length) return 0;
  const pos = p * (t.length - 1);
  const lo = Math.floor(pos);
  return lo + 1 >= t.length ? t[t.length - 1] : t[lo] + (t[lo + 1] - t[lo]) * (pos - lo);
};
const mean = t.reduce((a, b) => a + b, 0) / (t.length || 1);
console.log(
  JSON.stringify({
    name: "just-bash",
    version: pkg.version,
    node: process.version,
    n: t.length,
    failed: bad,
    p50: pct(0.5),
    p90: pct(0.9),
    p99: pct(0.99),
    mean,
    min: t[0] ?? 0,
    max: t[t.length - 1] ?? 0,
  }),
);
