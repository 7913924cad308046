// SPDX-License-Identifier: MIT
// E2B's own SDK (npm `e2b`, pinned in package.json), unchanged, against `sbx serve --http`.
// Usage: node tests/e2b/cases.mjs CASE, with E2B_API_URL, E2B_SANDBOX_URL (and E2B_DOMAIN
// for getHost) pointing at the daemon. Prints one JSON object of what the SDK saw;
// tests/integration/test_e2b.py checks it. Every step is recorded as its value, or as
// {threw, name} when the SDK threw, so a failure is said by the test, not lost here.
import { Sandbox } from "e2b";
import { createHash } from "node:crypto";
import http from "node:http";

const out = {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function step(name, f) {
  try {
    out[name] = await f();
  } catch (e) {
    out[name] = { threw: String(e?.message ?? e), name: e?.name ?? null, exitCode: e?.exitCode ?? null };
  }
  return out[name];
}

const cases = {
  async commands() {
    const sbx = await Sandbox.create({ envs: { FROM_CREATE: "c1" }, metadata: { suite: "e2b", n: "1" } });
    out.id = sbx.sandboxId;
    await step("echo", async () => {
      const r = await sbx.commands.run("echo hi; echo err >&2; id -un; pwd");
      return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
    });
    await step("exit3", () => sbx.commands.run("echo before; exit 3"));
    await step("env", async () => (await sbx.commands.run("echo $FROM_CREATE $FOO", { envs: { FOO: "bar" } })).stdout);
    await step("cwd", async () => (await sbx.commands.run("pwd", { cwd: "/tmp" })).stdout);
    await step("streams", async () => {
      const seen = [];
      const r = await sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 0.05; done; echo e >&2", {
        onStdout: (d) => seen.push(["out", d]),
        onStderr: (d) => seen.push(["err", d]),
      });
      return { seen: seen.map((s) => s[0] + ":" + s[1]).join(""), stdout: r.stdout };
    });
    await step("timeout", async () => {
      const t0 = Date.now();
      try {
        await sbx.commands.run("sleep 20", { timeoutMs: 1000 });
        return { ms: Date.now() - t0, threw: null };
      } catch (e) {
        return { ms: Date.now() - t0, threw: e.name };
      }
    });
    await step("after_timeout", async () => (await sbx.commands.run("echo still")).stdout);
    await step("concurrent", async () => {
      // More at once than a session queues (16): E2B has no such bound, the door waits its turn.
      const rs = await Promise.all(Array.from({ length: 40 }, (_, i) => sbx.commands.run(`sleep 0.2; echo ${i}`)));
      return rs.map((r) => r.stdout).join("");
    });
    await step("binary", async () => {
      const r = await sbx.commands.run("printf 'a\\xffb\\n'");
      return Buffer.from(r.stdout).length;
    });
    await sbx.kill();
    return out;
  },

  async background() {
    const sbx = await Sandbox.create();
    const seen = [];
    const h = await sbx.commands.run("cat; echo done-$?", {
      background: true,
      stdin: true,
      onStdout: (d) => seen.push(d),
    });
    out.pid = h.pid;
    await step("kill0", async () => (await sbx.commands.run(`kill -0 ${h.pid} && echo alive`)).stdout);
    await step("list", async () => (await sbx.commands.list()).map((p) => p.pid));
    await sbx.commands.sendStdin(h.pid, "hello stdin\n");
    for (let i = 0; i < 50 && !seen.join("").includes("hello stdin"); i++) await sleep(50);
    out.echoed = seen.join("");
    await step("closeStdin", () => sbx.commands.closeStdin(h.pid).then(() => true));
    await step("wait", async () => {
      const r = await h.wait();
      return { exitCode: r.exitCode, stdout: r.stdout };
    });
    // A second background command, reached from another handle by its pid, then killed.
    const h2 = await sbx.commands.run("echo started; sleep 60", { background: true });
    await step("connect", async () => {
      const c = await sbx.commands.connect(h2.pid);
      return c.pid;
    });
    await step("kill", () => sbx.commands.kill(h2.pid));
    await step("wait_killed", async () => {
      try {
        await h2.wait();
        return "no error";
      } catch (e) {
        return { name: e.name, exitCode: e.exitCode ?? null };
      }
    });
    await step("kill_again", () => sbx.commands.kill(h2.pid));
    await step("list_after", async () => (await sbx.commands.list()).map((p) => p.pid));
    await sbx.kill();
    return out;
  },

  async pty() {
    const sbx = await Sandbox.create();
    const chunks = [];
    const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => chunks.push(Buffer.from(d)) });
    out.pid = t.pid;
    const text = () => Buffer.concat(chunks).toString();
    await sbx.pty.sendInput(t.pid, new TextEncoder().encode("stty size; echo tty=$(tty | cut -c1-8)\n"));
    for (let i = 0; i < 100 && !text().includes("tty=/dev/pts"); i++) await sleep(50);
    await sbx.pty.resize(t.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(t.pid, new TextEncoder().encode("stty size; exit 0\n"));
    await step("wait", async () => (await t.wait()).exitCode);
    out.text = text();
    await sbx.kill();
    return out;
  },

  async files() {
    const sbx = await Sandbox.create();
    await step("write", async () => (await sbx.files.write("/home/user/dir/a.txt", "hello file")).path);
    await step("read", () => sbx.files.read("/home/user/dir/a.txt"));
    await step("relative", async () => {
      await sbx.files.write("rel.txt", "relative");
      return (await sbx.commands.run("cat /home/user/rel.txt")).stdout;
    });
    await step("list", async () => (await sbx.files.list("/home/user/dir")).map((e) => [e.name, e.type, e.path]));
    await step("exists", async () => [await sbx.files.exists("/home/user/dir/a.txt"), await sbx.files.exists("/nope")]);
    await step("makeDir", async () => [await sbx.files.makeDir("/tmp/new/deep"), await sbx.files.makeDir("/tmp/new/deep")]);
    await step("rename", async () => (await sbx.files.rename("/home/user/dir/a.txt", "/home/user/dir/b.txt")).name);
    await step("after_rename", async () => (await sbx.commands.run("ls /home/user/dir")).stdout);
    await step("remove", async () => {
      await sbx.files.remove("/home/user/dir");
      return sbx.files.exists("/home/user/dir");
    });
    await step("read_missing", () => sbx.files.read("/home/user/missing"));
    await step("info", async () => {
      const i = await sbx.files.getInfo("/tmp/new");
      return { name: i.name, type: i.type, mode: i.mode, permissions: i.permissions };
    });
    await step("many", async () => {
      const r = await sbx.files.write([
        { path: "/tmp/m/one", data: "1" },
        { path: "/tmp/m/two", data: "22" },
      ]);
      return [r.map((w) => w.path), (await sbx.commands.run("cat /tmp/m/one /tmp/m/two")).stdout];
    });
    await step("octet", async () => {
      // envd 0.5.7's upload: the file itself as the body (a stream, or when asked).
      const stream = new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode("streamed "));
          c.enqueue(new TextEncoder().encode("body"));
          c.close();
        },
      });
      const a = await sbx.files.write("/tmp/o/streamed.txt", stream);
      const b = await sbx.files.write("/tmp/o/asked.txt", "octet", { useOctetStream: true });
      const gz = await sbx.files.write("/tmp/o/gz.txt", "zipped", { gzip: true }).then(() => "written", (e) => e.name);
      return [a.path, b.path, (await sbx.commands.run("cat /tmp/o/streamed.txt; echo; cat /tmp/o/asked.txt")).stdout, gz];
    });
    await step("signed", async () => {
      // The SDK's signed URLs name no sandbox when E2B_SANDBOX_URL is set: the header does.
      const h = { "E2b-Sandbox-Id": sbx.sandboxId };
      const up = await sbx.uploadUrl("/tmp/signed.txt");
      const form = new FormData();
      form.append("file", new Blob(["via a signed url"]), "signed.txt");
      const put = await fetch(up, { method: "POST", body: form, headers: h });
      const down = await fetch(await sbx.downloadUrl("/tmp/signed.txt"), { headers: h });
      const forged = await fetch((await sbx.downloadUrl("/tmp/signed.txt"))
                                   .replace(/signature=v1_(.)/, (_, c) => `signature=v1_${c === "A" ? "B" : "A"}`),
                                 { headers: h });
      return { put: put.status, down: down.status, body: await down.text(), forged: forged.status };
    });
    await step("big", async () => {
      const data = Buffer.alloc(9 * 1024 * 1024 + 17);
      for (let i = 0; i < data.length; i++) data[i] = (i * 7 + (i >> 13)) & 0xff;
      await sbx.files.write("/tmp/big.bin", data);
      const back = Buffer.from(await sbx.files.read("/tmp/big.bin", { format: "bytes" }));
      const sum = (b) => createHash("sha256").update(b).digest("hex");
      const inside = (await sbx.commands.run("sha256sum /tmp/big.bin | cut -c1-64")).stdout.trim();
      return { same: sum(back) === sum(data), inside: inside === sum(data), len: back.length };
    });
    await sbx.kill();
    return out;
  },

  async watch() {
    const sbx = await Sandbox.create();
    await sbx.files.makeDir("/tmp/w/sub");
    const events = [];
    const h = await sbx.files.watchDir("/tmp/w", (e) => events.push([e.type, e.name]), { recursive: true });
    await sbx.commands.run("echo 1 > /tmp/w/a; echo 2 > /tmp/w/sub/b; mv /tmp/w/a /tmp/w/c; chmod 600 /tmp/w/c; rm /tmp/w/sub/b");
    await sbx.files.write("/tmp/w/api.txt", "through the files API");
    for (let i = 0; i < 100 && !events.some((e) => e[1] === "api.txt"); i++) await sleep(50);
    await h.stop();
    out.events = events;
    await step("missing", () => sbx.files.watchDir("/tmp/nope", () => {}));
    await sbx.kill();
    return out;
  },

  async host() {
    const sbx = await Sandbox.create();
    await sbx.commands.run("mkdir -p /tmp/site && echo served-from-sandbox > /tmp/site/index.html");
    const server = await sbx.commands.run("cd /tmp/site && exec python3 -m http.server 8000 --bind 127.0.0.1",
                                          { background: true });
    out.host = sbx.getHost(8000);
    // *.localhost is loopback (RFC 6761; libnss-myhostname resolves it so): said here, so the
    // test needs no change to the machine's resolver.
    const lookup = (name, opts, cb) => (opts.all ? cb(null, [{ address: "127.0.0.1", family: 4 }])
                                                 : cb(null, "127.0.0.1", 4));
    const get = (path, method = "GET", body) => new Promise((resolve, reject) => {
      const req = http.request(`http://${out.host}${path}`, { method, lookup }, (res) => {
        const parts = [];
        res.on("data", (d) => parts.push(d));
        res.on("end", () => resolve({ status: res.statusCode, type: res.headers["content-type"] ?? null,
                                      body: Buffer.concat(parts).toString() }));
      });
      req.on("error", reject);
      if (body) req.write(body);
      req.end();
    });
    for (let i = 0; i < 100; i++) {
      const r = await get("/").catch((e) => ({ status: 0, body: String(e) }));
      out.first = r;
      if (r.status === 200) break;
      await sleep(100);
    }
    await step("index", () => get("/index.html"));
    await step("missing", () => get("/nope?x=1"));
    await step("post", () => get("/index.html", "POST", "data"));
    await server.kill();
    await step("after_kill", () => get("/"));
    await sbx.kill();
    await step("after_sandbox", () => get("/"));
    return out;
  },

  async lifecycle() {
    const a = await Sandbox.create({ metadata: { suite: "life", who: "a" } });
    const b = await Sandbox.create({ metadata: { suite: "life", who: "b" }, timeoutMs: 120000 });
    out.a = a.sandboxId;
    out.b = b.sandboxId;
    const ids = async (q) => {
      const p = Sandbox.list(q);
      const items = [];
      while (p.hasNext) items.push(...(await p.nextItems()));
      return items.map((s) => s.sandboxId).sort();
    };
    await step("list_suite", () => ids({ query: { metadata: { suite: "life" } } }));
    await step("list_who", () => ids({ query: { metadata: { who: "b" } } }));
    await step("list_paged", async () => {
      const p = Sandbox.list({ query: { metadata: { suite: "life" } }, limit: 1 });
      const pages = [];
      while (p.hasNext) pages.push((await p.nextItems()).map((s) => s.sandboxId));
      return pages;
    });
    await step("info", async () => {
      const i = await b.getInfo();
      return { id: i.sandboxId, state: i.state, metadata: i.metadata, span: new Date(i.endAt) - new Date(i.startedAt) };
    });
    await step("setTimeout", async () => {
      await b.setTimeout(600000);
      const i = await b.getInfo();
      return Math.round((new Date(i.endAt) - Date.now()) / 1000);
    });
    await step("pause", async () => {
      await b.commands.run("echo kept > /tmp/state");
      await b.pause();
      return (await b.getInfo()).state;
    });
    await step("list_paused", async () => {
      const p = Sandbox.list({ query: { state: ["paused"], metadata: { suite: "life" } } });
      return (await p.nextItems()).map((s) => s.sandboxId);
    });
    await step("resume", async () => {
      const c = await Sandbox.connect(b.sandboxId);
      return [(await c.getInfo()).state, (await c.commands.run("cat /tmp/state")).stdout];
    });
    await step("kill_a", () => Sandbox.kill(a.sandboxId));
    await step("kill_a_again", () => Sandbox.kill(a.sandboxId));
    await step("a_running", () => a.isRunning());
    await step("a_run", () => a.commands.run("echo x"));
    await step("connect_gone", () => Sandbox.connect(a.sandboxId));
    await step("kill_b", () => b.kill());
    return out;
  },

  async metrics() {
    const sbx = await Sandbox.create();
    const t0 = Date.now();
    await sbx.commands.run("head -c 3000000 /dev/zero > /tmp/three-mb; for i in $(seq 100000); do :; done");
    // The daemon samples every 5 s: wait for two samples after the command.
    await sleep(11000);
    await step("all", async () =>
      (await sbx.getMetrics()).map((m) => ({
        ts: m.timestamp instanceof Date ? m.timestamp.getTime() : String(m.timestamp),
        cpuCount: m.cpuCount, cpuUsedPct: m.cpuUsedPct, memUsed: m.memUsed, memTotal: m.memTotal,
        diskUsed: m.diskUsed, diskTotal: m.diskTotal,
      })));
    out.t0 = t0;
    // A range that ends before the sandbox was made has nothing.
    await step("before", async () => (await sbx.getMetrics({ start: new Date(t0 - 600000), end: new Date(t0 - 300000) })).length);
    await sbx.kill();
    return out;
  },

  async errors() {
    await step("template", () => Sandbox.create("no-such-template"));
    return out;
  },

  async bad_key() {
    await step("create", () => Sandbox.create({ apiKey: "e2b_wrong" }));
    return out;
  },

  async good_key() {
    await step("create", async () => {
      const s = await Sandbox.create({ apiKey: process.env.E2B_GOOD_KEY });
      await s.kill();
      return "ok";
    });
    return out;
  },
};

const name = process.argv[2];
if (!cases[name]) {
  console.error(`no case ${name}: ${Object.keys(cases).join(", ")}`);
  process.exit(2);
}
try {
  await cases[name]();
} catch (e) {
  out.fatal = String(e?.stack ?? e);
}
console.log(JSON.stringify(out));
