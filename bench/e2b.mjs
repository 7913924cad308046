// SPDX-License-Identifier: MIT
// E2B's own SDK (npm e2b, as tests/e2b pins it) against `sbx serve --http`, beside sbx's own
// TypeScript SDK on the same daemon, in one run:
//   run        commands.run("echo hi"): E2B's SDK and sbx's, interleaved (ABBA), a pause after each
//   create     Sandbox.create() -> the first commands.run's result, with the daemon's pool
//   streams    100 commands.run streaming at once from this process (10 sandboxes, 10 each: a
//              session queues at most 16 starts and a sandbox runs at most 64 processes), while
//              a raw client pings the daemon's socket every 5 ms: the ping's latency meanwhile,
//              from this process (whose own event loop the SDK keeps busy) and from a process
//              of its own (what the daemon's loop makes a client wait)
//   files      a 100 MiB file through files.write and files.read
//   parts      where a commands.run's time goes, interleaved: E2B's SDK; the same Start call by
//              hand through fetch (what the SDK sends) and through node:http; sbx's process.start
//              + process.stream and run over the socket; and fetch and node:http against a
//              trivial node HTTP server of its own (the clients' own floor on this machine)
// Prints one JSON object; times in ms, percentiles interpolated between ranks.
// Usage: node bench/e2b.mjs [--n N] [--creates N] [--sbx PATH] [--only run,create,streams,files,parts]   (run from anywhere; needs
// tests/e2b/node_modules: cd tests/e2b && npm ci)
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { stats } from "./stats.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "tests", "e2b", "package.json"));
const { Sandbox: E2B } = await import(require.resolve("e2b"));
const { Sandbox: Sbx } = await import(join(here, "..", "sdk", "typescript", "src", "index.js"));

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : def;
};
const n = Number(opt("--n", "300"));
const creates = Number(opt("--creates", "40"));
const only = opt("--only", "run,create,streams,files,parts").split(",");
const sbxBin = opt("--sbx", process.env.SBX_BIN || join(here, "..", "build", "src", "cli", "sbx"));


const dir = mkdtempSync(join(tmpdir(), "sbx-bench-e2b-"));
const sockPath = join(dir, "sbx.sock");
const port = 20000 + Math.floor(Math.random() * 20000);
const server = spawn(sbxBin, ["serve", "--socket", sockPath, "--http", `127.0.0.1:${port}`, "--pool", "8"],
                     { stdio: ["ignore", "ignore", "inherit"] });
for (let i = 0; i < 400 && !existsSync(sockPath); i++) await sleep(25);
process.env.E2B_API_URL = process.env.E2B_SANDBOX_URL = `http://127.0.0.1:${port}`;
process.env.E2B_API_KEY = "e2b_bench";
const out = { node: process.version, port };

const phase = (name) => process.stderr.write(`e2b bench: ${name}\n`);

// A raw JSON-RPC client on the daemon's socket: call(method, params) resolves to the answer.
async function rawClient(path) {
  const sock = net.createConnection(path);
  await new Promise((res, rej) => sock.once("connect", res).once("error", rej));
  let buf = "", id = 0;
  const waiting = new Map();
  sock.setEncoding("utf8");
  sock.on("data", (d) => {
    buf += d;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const m = JSON.parse(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
      if (m.id !== undefined) { waiting.get(m.id)?.(m); waiting.delete(m.id); }
    }
  });
  const call = (method, params = {}) => new Promise((res) => {
    const k = ++id;
    waiting.set(k, res);
    sock.write(JSON.stringify({ jsonrpc: "2.0", id: k, method, params }) + "\n");
  });
  return { sock, call };
}
// ---- run: E2B's SDK against sbx's own
if (only.includes("run")) {
phase("run");
  const e = await E2B.create();
  const s = await Sbx.connect(sockPath);
  const runE2B = async () => {
    const t0 = performance.now();
    const r = await e.commands.run("echo hi");
    if (r.stdout !== "hi\n") throw new Error("e2b run: " + JSON.stringify(r));
    return performance.now() - t0;
  };
  const runSbx = async () => {
    const t0 = performance.now();
    const r = await s.commands.run("echo hi");
    if (r.stdout !== "hi\n") throw new Error("sbx run: " + JSON.stringify(r));
    return performance.now() - t0;
  };
  const te = [];
  const ts = [];
  for (let i = 0; i < 30 + n; i++) {
    const order = i % 4 === 0 || i % 4 === 3 ? [runE2B, runSbx] : [runSbx, runE2B];
    for (const f of order) {
      const t = await f();
      if (i >= 30) (f === runE2B ? te : ts).push(t);
      await sleep(20);
    }
  }
  out.run = { e2bSdk: stats(te), sbxSdk: stats(ts) };
  out.run.p50Ratio = Math.round((out.run.e2bSdk.p50 / out.run.sbxSdk.p50) * 1000) / 1000;
  await e.kill();
  await s.kill();
}

// ---- create -> first result, with the pool (8 kept ready; refilled between)
if (only.includes("create")) {
phase("create");
  const t = [];
  for (let i = 0; i < creates; i++) {
    await sleep(300); // the pool's refill: one sandbox made per step
    const t0 = performance.now();
    const e = await E2B.create();
    const r = await e.commands.run("echo hi");
    t.push(performance.now() - t0);
    if (r.stdout !== "hi\n") throw new Error("create run: " + JSON.stringify(r));
    await e.kill();
  }
  out.createToFirstResult = stats(t);
}

// ---- 100 streams at once, and the daemon's ping meanwhile
if (only.includes("streams")) {
phase("streams");
  const boxes = await Promise.all(Array.from({ length: 10 }, () => E2B.create({ timeoutMs: 600000 })));
  const { sock, call } = await rawClient(sockPath);
  const ping = () => call("ping");
  let done = false;
  let started = 0;
  const pings = [];
  const steady = [];
  const pinger = (async () => {
    while (!done) {
      const t0 = performance.now();
      await ping();
      pings.push(performance.now() - t0);
      if (started === 100) steady.push(performance.now() - t0);
      await sleep(5);
    }
  })();
  // The same pings from a process of their own: this one's event loop is busy starting 100
  // streams, which the pings above wait behind as well.
  const apart = spawn(process.execPath, ["-e", `
    const net = require("node:net");
    const { performance } = require("node:perf_hooks");
    const s = net.createConnection(process.argv[1]);
    const t = []; let buf = "", t0 = 0, id = 0, stop = false;
    const send = () => { t0 = performance.now(); s.write(JSON.stringify({ jsonrpc: "2.0", id: ++id, method: "ping", params: {} }) + "\\n"); };
    s.setEncoding("utf8");
    s.on("connect", send);
    s.on("data", (d) => {
      buf += d;
      if (!buf.includes("\\n")) return;
      buf = "";
      t.push(performance.now() - t0);
      if (stop) { process.stdout.write(JSON.stringify(t)); process.exit(0); }
      setTimeout(send, 5);
    });
    process.stdin.on("end", () => { stop = true; });
    process.stdin.resume();
  `, sockPath], { stdio: ["pipe", "pipe", "inherit"] });
  let apartOut = "";
  apart.stdout.on("data", (d) => { apartOut += d; });
  const apartDone = new Promise((res) => apart.on("exit", res));
  await sleep(50);
  const t0 = performance.now();
  let bytes = 0;
  const runs = Array.from({ length: 100 }, (_, i) =>
    boxes[i % 10].commands.run("for i in $(seq 40); do echo line $i of a stream; sleep 0.025; done",
                   { onStdout: (d) => { if (!d.startsWith("line 1 ")) return; started++; },
                     onStderr: () => {}, timeoutMs: 120000 }).then((r) => { bytes += r.stdout.length; return r; }));
  const results = await Promise.all(runs);
  const wall = performance.now() - t0;
  done = true;
  await pinger;
  apart.stdin.end();
  await apartDone;
  const apartPings = JSON.parse(apartOut || "[]");
  if (results.some((r) => r.exitCode !== 0)) throw new Error("a stream failed");
  out.streams = { streams: 100, wallMs: Math.round(wall), bytes, ping: stats(pings),
                  pingOnceAllStreamed: steady.length ? stats(steady) : null,
                  pingFromAnotherProcess: apartPings.length ? stats(apartPings) : null };
  sock.destroy();
  await Promise.all(boxes.map((b) => b.kill()));
}

// ---- where a commands.run's time goes
if (only.includes("parts")) {
phase("parts");
  const url = process.env.E2B_API_URL;
  const e = await E2B.create();
  const made = await (await fetch(`${url}/sandboxes`, {
    method: "POST", headers: { "X-API-KEY": "e2b_bench", "Content-Type": "application/json" },
    body: JSON.stringify({ templateID: "base" }) })).json();
  // What the SDK sends for commands.run("echo hi"): one Connect envelope.
  const msg = Buffer.from(JSON.stringify({ process: { cmd: "/bin/bash", args: ["-l", "-c", "echo hi"], envs: {} },
                                           stdin: false }));
  const env = Buffer.alloc(5 + msg.length);
  env.writeUInt32BE(msg.length, 1);
  msg.copy(env, 5);
  const hdr = { "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
                "X-Access-Token": made.envdAccessToken, "E2b-Sandbox-Id": made.sandboxID };
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const viaHttp = (port, path, body) => new Promise((res, rej) => {
    const rq = http.request({ host: "127.0.0.1", port, path, method: body ? "POST" : "GET", agent,
                              headers: body ? { ...hdr, "Content-Length": body.length } : {} }, (r) => {
      const chunks = [];
      r.on("data", (c) => chunks.push(c));
      r.on("end", () => res(Buffer.concat(chunks)));
    });
    rq.on("error", rej);
    rq.end(body);
  });
  const viaFetch = async (u, body) => Buffer.from(await (await fetch(u, body ? { method: "POST", headers: hdr, body }
                                                                              : {})).arrayBuffer());
  const doorPort = Number(new URL(url).port);
  const trivialPort = 20000 + Math.floor(Math.random() * 20000);
  const trivial = spawn(process.execPath, ["-e", `require("node:http").createServer((q, r) => { q.resume();
    q.on("end", () => { r.writeHead(200, { "content-type": "application/json" }); r.end('{"ok":true}'); }); })
    .listen(${trivialPort}, "127.0.0.1", () => process.stdout.write("up"));`], { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise((res) => trivial.stdout.once("data", res));
  // sbx's own wire, raw: a process and a run.
  const { sock, call } = await rawClient(sockPath);
  const rsid = (await call("sandbox.create", {})).result.sandboxId;
  const ok = (b) => { if (!b.includes("aGkK")) throw new Error("Start: " + b.toString()); };
  const fns = {
    e2bSdk: async () => { const r = await e.commands.run("echo hi"); if (r.stdout !== "hi\n") throw new Error("run"); },
    startFetch: async () => ok(await viaFetch(`${url}/process.Process/Start`, env)),
    startHttp: async () => ok(await viaHttp(doorPort, "/process.Process/Start", env)),
    sbxProcess: async () => {
      const st = await call("process.start", { sandboxId: rsid, command: "echo hi", stdin: false });
      await call("process.stream", { sandboxId: rsid, processId: st.result.processId });
    },
    sbxRun: async () => { await call("run", { sandboxId: rsid, command: "echo hi" }); },
    floorFetch: async () => { await viaFetch(`http://127.0.0.1:${trivialPort}/`); },
    floorHttp: async () => { await viaHttp(trivialPort, "/"); },
  };
  const times = Object.fromEntries(Object.keys(fns).map((k) => [k, []]));
  for (let i = 0; i < 20 + Math.min(n, 200); i++) {
    for (const [k, f] of Object.entries(fns)) {
      const t0 = performance.now();
      await f();
      if (i >= 20) times[k].push(performance.now() - t0);
      await sleep(20);
    }
  }
  out.parts = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, stats(v)]));
  trivial.kill();
  sock.destroy();
  await e.kill();
}

// ---- a 100 MiB file through files.write and files.read
if (only.includes("files")) {
phase("files");
  const e = await E2B.create({ timeoutMs: 600000 });
  const size = 100 * 1024 * 1024;
  const data = Buffer.alloc(size);
  for (let i = 0; i < size; i += 4096) data.writeUInt32LE((i * 2654435761) >>> 0, i);
  const sum = (b) => createHash("sha256").update(b).digest("hex");
  const w0 = performance.now();
  await e.files.write("/tmp/big.bin", data);
  const w = performance.now() - w0;
  const r0 = performance.now();
  const back = Buffer.from(await e.files.read("/tmp/big.bin", { format: "bytes" }));
  const r = performance.now() - r0;
  if (back.length !== size || sum(back) !== sum(data)) throw new Error("the file came back different");
  const mbps = (ms) => Math.round((size / 1e6) / (ms / 1000));
  out.files = { bytes: size, writeMs: Math.round(w), readMs: Math.round(r), writeMBps: mbps(w), readMBps: mbps(r) };
  await e.kill();
}

console.log(JSON.stringify(out, null, 2));
server.kill("SIGTERM");
await new Promise((r) => server.once("exit", r));
rmSync(dir, { recursive: true, force: true });
