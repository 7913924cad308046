// SPDX-License-Identifier: MIT
// `run` of `echo hi` three ways, in the same process and interleaved call by call so that the
// machine's drift hits all alike: the official MCP client (@modelcontextprotocol/sdk) calling
// the run tool of `sbx mcp`; raw JSON lines to `sbx mcp` (its relay without the SDK's cost);
// raw JSON-RPC to `sbx serve --stdio`. Prints one JSON object (times in ms). Run by hand:
//   node bench/mcp_bench.mjs [--sbx PATH] [--n N] [--warmup W] [--modules DIR]
// DIR holds @modelcontextprotocol/sdk (default tests/mcp/node_modules: `npm ci` in tests/mcp).
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : def;
};
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const sbx = opt("--sbx", join(root, "build", "src", "cli", "sbx"));
const n = Number(opt("--n", "1000"));
const warmup = Number(opt("--warmup", "100"));
const modules = opt("--modules", join(root, "tests", "mcp", "node_modules"));
const sdk = (p) => import(pathToFileURL(join(modules, "@modelcontextprotocol", "sdk", "dist", "esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

// A newline-delimited JSON-RPC peer over a child's stdio: one request at a time.
function linePeer(argv) {
  const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
  const waiting = new Map();
  let id = 0;
  createInterface({ input: child.stdout }).on("line", (line) => {
    const msg = JSON.parse(line);
    if (msg.id !== undefined && waiting.has(msg.id)) {
      waiting.get(msg.id)(msg);
      waiting.delete(msg.id);
    }
  });
  return {
    call(method, params) {
      const rid = ++id;
      return new Promise((resolve) => {
        waiting.set(rid, resolve);
        child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: rid, method, params }) + "\n");
      });
    },
    close() {
      child.stdin.end();
      return new Promise((r) => child.on("exit", r));
    },
  };
}

const serve = linePeer([sbx, "serve", "--stdio"]);
if ((await serve.call("create", {})).error) throw new Error("create failed");
const mcpRaw = linePeer([sbx, "mcp"]);
await mcpRaw.call("initialize", { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "bench", version: "1" } });
const client = new Client({ name: "sbx-bench", version: "1" });
await client.connect(new StdioClientTransport({ command: sbx, args: ["mcp"], stderr: "inherit" }));

const ways = {
  "mcp (official client)": async () => {
    const r = await client.callTool({ name: "run", arguments: { command: "echo hi" } });
    return !r.isError && r.content[0].text.startsWith("hi\n");
  },
  "mcp (raw JSON lines)": async () => {
    const r = await mcpRaw.call("tools/call", { name: "run", arguments: { command: "echo hi" } });
    return r.result && !r.result.isError && r.result.content[0].text.startsWith("hi\n");
  },
  "serve --stdio (raw JSON-RPC)": async () => {
    const r = await serve.call("run", { command: "echo hi" });
    return r.result && r.result.exitCode === 0 && r.result.stdout === "hi\n";
  },
};
const times = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
let bad = 0;
for (let i = 0; i < warmup + n; i++) {
  for (const [name, f] of Object.entries(ways)) {
    const t0 = performance.now();
    const ok = await f();
    const dt = performance.now() - t0;
    if (!ok) bad++;
    else if (i >= warmup) times[name].push(dt);
  }
}
await client.close();
await mcpRaw.close();
await serve.close();

const stats = (t) => {
  t.sort((a, b) => a - b);
  const pct = (p) => t[Math.min(t.length - 1, Math.round(p * (t.length - 1)))];
  const r = (x) => Math.round(x * 1000) / 1000;
  return { n: t.length, p50: r(pct(0.5)), p90: r(pct(0.9)), p99: r(pct(0.99)), mean: r(t.reduce((a, b) => a + b, 0) / t.length) };
};
const out = { n, warmup, bad, results: Object.fromEntries(Object.entries(times).map(([k, t]) => [k, stats(t)])) };
const base = out.results["serve --stdio (raw JSON-RPC)"].p50;
out.p50_ratio_official_vs_serve = Math.round((out.results["mcp (official client)"].p50 / base) * 100) / 100;
out.p50_ratio_raw_mcp_vs_serve = Math.round((out.results["mcp (raw JSON lines)"].p50 / base) * 100) / 100;
console.log(JSON.stringify(out, null, 2));
