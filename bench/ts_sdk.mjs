// SPDX-License-Identifier: MIT
// What the TypeScript SDK adds to a run: `echo hi` through sandbox.commands.run against the same
// `run` as a raw JSON-RPC line on a plain net.Socket (request written -> answer line parsed), on
// one `sbx serve --socket` started here, each on its own connection and sandbox. The two are
// interleaved (ABBA, so neither always goes first) with a pause after each run, which gives the
// session's next worker time to be ready, as sbx-bench-rpc does. Prints one JSON object; times
// in ms, percentiles interpolated between ranks.
// Usage: node bench/ts_sdk.mjs [--n N] [--warmup W] [--quiet-ms Q] [--sbx PATH]
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { stats } from "./stats.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const { Sandbox } = await import(join(here, "..", "sdk", "typescript", "src", "index.js"));

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : def;
};
const n = Number(opt("--n", "500"));
const warmup = Number(opt("--warmup", "50"));
const quietMs = Number(opt("--quiet-ms", "20"));
const sbx = opt("--sbx", process.env.SBX_BIN || join(here, "..", "build", "src", "cli", "sbx"));

const dir = mkdtempSync(join(tmpdir(), "sbx-bench-ts-"));
const sockPath = join(dir, "sbx.sock");
const server = spawn(sbx, ["serve", "--socket", sockPath], { stdio: ["ignore", "ignore", "inherit"] });
for (let i = 0; i < 400 && !existsSync(sockPath); i++) await sleep(25);

// The raw client: one request at a time, so the next line is always the answer.
const sock = net.createConnection(sockPath);
await new Promise((res, rej) => sock.once("connect", res).once("error", rej));
let buf = "";
let waiting = null;
sock.setEncoding("utf8");
sock.on("data", (s) => {
  buf += s;
  const nl = buf.indexOf("\n");
  if (nl >= 0 && waiting) {
    const line = buf.slice(0, nl);
    buf = buf.slice(nl + 1);
    const w = waiting;
    waiting = null;
    w(JSON.parse(line));
  }
});
let rawId = 0;
const raw = (method, params) =>
  new Promise((res) => {
    waiting = res;
    sock.write(JSON.stringify({ jsonrpc: "2.0", id: ++rawId, method, params }) + "\n");
  });

await raw("create", {});
const sb = await Sandbox.connect(sockPath);

async function timeRaw() {
  const t0 = performance.now();
  const r = await raw("run", { command: "echo hi" });
  const t = performance.now() - t0;
  if (r.result?.stdout !== "hi\n") throw new Error("raw run: " + JSON.stringify(r));
  return t;
}

async function timeSdk() {
  const t0 = performance.now();
  const r = await sb.commands.run("echo hi");
  const t = performance.now() - t0;
  if (r.stdout !== "hi\n") throw new Error("sdk run: " + JSON.stringify(r));
  return t;
}

const rawTimes = [];
const sdkTimes = [];
for (let i = 0; i < warmup + n; i++) {
  const order = i % 4 === 0 || i % 4 === 3 ? [timeRaw, timeSdk] : [timeSdk, timeRaw];
  for (const f of order) {
    const t = await f();
    if (i >= warmup) (f === timeRaw ? rawTimes : sdkTimes).push(t);
    await sleep(quietMs);
  }
}


const rawStats = stats(rawTimes);
const sdkStats = stats(sdkTimes);
console.log(JSON.stringify({
  node: process.version, n, warmup, quietMs,
  raw: rawStats, sdk: sdkStats,
  p50Ratio: Math.round((sdkStats.p50 / rawStats.p50) * 1000) / 1000,
}, null, 2));

await sb.kill();
sock.destroy();
server.kill("SIGTERM");
await new Promise((r) => server.once("exit", r));
rmSync(dir, { recursive: true, force: true });
