// The SDK against a real daemon spawned with `sbx serve --stdio`: commands, background
// processes, files, fork, snapshots and errors. One sandbox serves the whole file.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { ProcessEndedError, Sandbox, SbxError, WaitTimeoutError } from "../src/index.js";
import { SBX_BIN, skip } from "./helpers.mjs";

describe("a spawned sandbox", { skip }, () => {
  let sb;
  before(async () => {
    sb = await Sandbox.create({ binary: SBX_BIN, timeoutMs: 20000 });
  });
  after(async () => {
    await sb?.kill();
  });

  it("runs a command, streams its output to callbacks and keeps session state", async () => {
    assert.match(sb.sandboxId, /^[0-9a-f]{32}$/);
    const out = [];
    const err = [];
    const r = await sb.commands.run("for i in 1 2 3; do echo out$i; echo err$i >&2; done", {
      onStdout: (s) => out.push(s), onStderr: (s) => err.push(s),
    });
    assert.equal(r.exitCode, 0);
    assert.ok(r.ok);
    assert.equal(r.stdout, "out1\nout2\nout3\n");
    assert.equal(r.stderr, "err1\nerr2\nerr3\n");
    assert.equal(out.join(""), r.stdout);
    assert.equal(err.join(""), r.stderr);

    await sb.commands.run("cd /tmp && export GREETING=hello");
    const s = await sb.commands.run('echo "$GREETING from $PWD"; echo "$ONLY"', { envs: { ONLY: "this run" } });
    assert.equal(s.stdout, "hello from /tmp\nthis run\n");
    assert.equal((await sb.commands.run("pwd", { cwd: "/home/user" })).stdout, "/home/user\n");
    assert.equal((await sb.commands.run("pwd")).stdout, "/tmp\n");
    assert.equal((await sb.commands.run("wc -c", { stdin: "12345" })).stdout.trim(), "5");
  });

  it("returns a failing command as a result, with its bytes", async () => {
    const r = await sb.commands.run("echo partial; echo broken >&2; exit 3");
    assert.equal(r.exitCode, 3);
    assert.equal(r.ok, false);
    assert.equal(r.stdout, "partial\n");
    assert.equal(r.stderr, "broken\n");
    assert.equal(r.errorClass, null);
    const b = await sb.commands.run("printf 'a\\x00\\xff'");
    assert.deepEqual([...b.stdoutBytes], [0x61, 0x00, 0xff]);
    assert.equal(b.stdout, "a\u0000\ufffd");
  });

  it("kills a command at its timeout: exit 124, TIMEOUT, the session survives", async () => {
    const t0 = Date.now();
    const r = await sb.commands.run("sleep 30 & sleep 30", { timeoutMs: 300 });
    assert.equal(r.exitCode, 124);
    assert.equal(r.errorClass, "TIMEOUT");
    assert.equal(r.stateDiscarded, true);
    assert.equal(r.sessionReset, false);
    assert.ok(Date.now() - t0 < 10000);
    assert.equal((await sb.commands.run("echo alive")).stdout, "alive\n");
  });

  it("cancels a started command", async () => {
    const h = sb.commands.start("sleep 30");
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await h.cancel(), true);
    const r = await h.wait();
    assert.equal(r.exitCode, 125);
    assert.equal(r.errorClass, "CANCELLED");
    assert.equal(await h.cancel(), false);
    const ac = new AbortController();
    const p = sb.commands.run("sleep 30", { signal: ac.signal });
    setTimeout(() => ac.abort(), 200);
    assert.equal((await p).errorClass, "CANCELLED");
  });

  it("round-trips files, text and binary, through every files method", async () => {
    await sb.files.write("data/hello.txt", "héllo\n");
    assert.equal(await sb.files.read("data/hello.txt"), "héllo\n");
    assert.equal(await sb.files.read("/home/user/data/hello.txt"), "héllo\n");
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    await sb.files.write("data/all.bin", all);
    const back = await sb.files.read("data/all.bin", { format: "bytes" });
    assert.ok(back instanceof Uint8Array);
    assert.deepEqual(Buffer.from(back), all);
    assert.equal((await sb.commands.run("sha256sum < /home/user/data/all.bin | cut -c1-16")).stdout.trim(),
      (await import("node:crypto")).createHash("sha256").update(all).digest("hex").slice(0, 16));

    // Over the 4 MiB a request carries: an upload in parts, read back in pieces.
    const big = Buffer.alloc(9 * 1024 * 1024 + 123);
    for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE(i, i);
    await sb.files.write("data/big.bin", big);
    assert.ok(Buffer.from(await sb.files.read("data/big.bin", { format: "bytes" })).equals(big));

    const names = (await sb.files.list("data")).map((e) => e.name).sort();
    assert.deepEqual(names, ["all.bin", "big.bin", "hello.txt"]);
    const info = await sb.files.getInfo("data/all.bin");
    assert.equal(info.type, "file");
    assert.equal(info.size, 256);
    assert.equal(info.path, "/home/user/data/all.bin");
    await sb.files.makeDir("data/sub/deeper");
    assert.equal((await sb.files.getInfo("data/sub/deeper")).type, "dir");
    await sb.files.rename("data/hello.txt", "data/sub/moved.txt");
    assert.equal(await sb.files.exists("data/hello.txt"), false);
    assert.equal(await sb.files.read("data/sub/moved.txt"), "héllo\n");
    assert.equal((await sb.files.list("data", { depth: 3 })).some((e) => e.name === "moved.txt"), true);
    await sb.files.remove("data");
    assert.equal(await sb.files.exists("data"), false);
    await assert.rejects(sb.files.read("data/nope"), (e) => e instanceof SbxError && e.code === 1 && /ENOENT/.test(e.message));
  });

  it("runs a background process: waited for by its log, fed stdin, iterated, killed", async () => {
    const seen = [];
    const h = await sb.commands.run(
      'echo starting; while read -r line; do echo "got $line"; [ "$line" = ready? ] && echo READY >&2; done; sleep 60',
      { background: true, stdin: true, label: "echoer", onStdout: (s) => seen.push(s) });
    assert.ok(Number.isInteger(h.pid) && h.pid > 0);
    assert.match(h.processId, /^p\d+$/);
    assert.equal(await h.waitForLog("^starting$"), "starting");
    await h.sendStdin("one\nready?\n");
    assert.equal(await h.waitForLog("READY"), "READY");
    const listed = (await sb.commands.list()).find((p) => p.processId === h.processId);
    assert.equal(listed.status, "running");
    assert.equal(listed.label, "echoer");
    assert.equal(listed.pid, h.pid);
    await h.closeStdin();
    assert.equal(await h.kill(), true);
    const r = await h.wait();
    assert.equal(r.status, "killed");
    assert.equal(r.exitCode, 143);
    assert.equal(r.signal, "TERM");
    assert.equal(r.stdout, "starting\ngot one\ngot ready?\n");
    assert.equal(r.stderr, "READY\n");
    assert.equal(seen.join(""), r.stdout);
    const chunks = [];
    for await (const c of h) chunks.push(c);
    assert.equal(chunks.filter((c) => c.stream === "stdout").map((c) => c.text).join(""), r.stdout);
    assert.equal(await h.kill(), false);
  });

  it("waits for a port, kills by pid, and reports a process that ended first", async () => {
    const server = await sb.commands.run("exec python3 -m http.server 8765 --bind 127.0.0.1", { background: true });
    await server.waitForPort(8765, { timeoutMs: 15000 });
    const r = await sb.commands.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8765/");
    assert.equal(r.stdout, "200");
    // From the host, through the forwarded port; asking twice gives the same address.
    const host = await sb.getHost(8765);
    assert.match(host, /^127\.0\.0\.1:\d+$/);
    assert.equal(await sb.getHost(8765), host);
    const res = await fetch(`http://${host}/`);
    assert.equal(res.status, 200);
    await res.text();
    await assert.rejects(sb.getHost(0), (e) => e instanceof SbxError && e.code === -32602);
    assert.equal(await sb.commands.kill(server.pid), true);
    assert.equal((await server.wait()).status, "killed");
    assert.equal(await sb.commands.kill(server.pid), false);

    const quick = await sb.commands.run("echo done; exit 7", { background: true });
    await assert.rejects(quick.waitForLog("never", { timeoutMs: 10000 }), (e) => e instanceof ProcessEndedError && e.code === -32010);
    const q = await quick.wait();
    assert.equal(q.exitCode, 7);
    assert.equal(q.stdout, "done\n");
    const slow = await sb.commands.run("sleep 30", { background: true });
    await assert.rejects(slow.waitForLog("never", { timeoutMs: 100 }), (e) => e instanceof WaitTimeoutError && e.code === -32011);
    await slow.kill({ signal: "KILL", graceMs: 0 });
    assert.equal((await slow.wait()).exitCode, 137);

    // A handle made later (connect) resumes after what this SDK delivered already: nothing.
    const again = await sb.commands.connect(quick.pid);
    const a = await again.wait();
    assert.equal(a.exitCode, 7);
    assert.equal(a.stdout, "");
    assert.equal(a.cursor, q.cursor);
  });

  it("runs an interactive shell on a terminal, resized", async () => {
    let out = "";
    const t = await sb.pty.create({ cols: 100, rows: 30, onData: (d) => (out += Buffer.from(d).toString()) });
    await t.sendInput("stty size; echo $((6*7))\n");
    await t.waitForLog("^42", { timeoutMs: 10000 });
    await t.resize({ cols: 120, rows: 40 });
    await t.sendInput("stty size; exit 5\n");
    const r = await t.wait();
    assert.equal(r.exitCode, 5);
    assert.match(out, /30 100\r\n42\r\n/);
    assert.match(out, /40 120\r\n/);
    assert.equal(r.stdout, out);
  });

  it("forks: the copy has the files and session state, and is independent", async () => {
    await sb.commands.run("export FORKED=yes; cd /tmp; echo base > /tmp/f.txt");
    const child = await sb.fork();
    try {
      assert.notEqual(child.sandboxId, sb.sandboxId);
      assert.equal((await child.commands.run('echo "$FORKED $PWD"; cat f.txt')).stdout, "yes /tmp\nbase\n");
      await child.files.write("/tmp/f.txt", "changed");
      assert.equal(await sb.files.read("/tmp/f.txt"), "base\n");
    } finally {
      await child.kill();
    }
    await assert.rejects(child.commands.run("true"), (e) => e instanceof SbxError && e.code === -32602);
  });

  it("snapshots and restores files and session state", async () => {
    await sb.commands.run("export STAGE=one; echo one > /tmp/stage");
    const id = await sb.snapshot();
    await sb.commands.run("export STAGE=two; echo two > /tmp/stage; touch /tmp/extra");
    await sb.restore(id);
    assert.equal((await sb.commands.run("echo $STAGE; cat /tmp/stage; ls /tmp/extra 2>&1 >/dev/null | wc -l")).stdout,
      "one\none\n1\n");
    assert.ok((await sb.listSnapshots()).some((s) => s.id === id));
    await sb.deleteSnapshot(id);
    await assert.rejects(sb.restore(id), (e) => e instanceof SbxError && e.code === -32602);
  });

  it("turns bad input into SbxError with the JSON-RPC code, and the connection stays usable", async () => {
    await assert.rejects(sb.commands.run("true", { envs: { "BAD NAME": "x" } }), (e) => e instanceof SbxError && e.code === -32602);
    await assert.rejects(sb.sessions.create("no spaces allowed"), (e) => e instanceof SbxError && e.code === -32602);
    await assert.rejects(sb.client.request("no.such.method"), (e) => e instanceof SbxError && e.code === -32601);
    // A NUL character: the daemon cannot parse the line and answers without an id; the error
    // goes to that request, not to the process stream pending beside it.
    const bg = await sb.commands.run("sleep 30", { background: true });
    await assert.rejects(sb.commands.run("echo a\u0000b"), (e) => e instanceof SbxError && e.code === -32700);
    assert.equal(bg.done(), false);
    assert.equal(await bg.kill({ graceMs: 0 }), true);
    assert.equal((await bg.wait()).status, "killed");
    await assert.rejects(sb.files.write("/usr/nope", "x"), (e) => e instanceof SbxError && e.code === 1);
    assert.equal(await sb.commands.kill("p999999"), false);
    await assert.rejects(sb.client.request("process.kill", { processId: "p999999" }), (e) => e.code === -32602);
    assert.equal(await sb.commands.kill(999999), false);
    assert.equal((await sb.commands.run("echo still fine")).stdout, "still fine\n");
    assert.equal(await sb.ping(), true);
  });

  it("has named sessions and session variables", async () => {
    // Answers come out of order: the quick run in another session is not held behind the slow.
    const order = [];
    const slow = sb.commands.run("sleep 0.5; echo slow", { session: "one" }).then((r) => order.push(r.stdout));
    const quick = sb.commands.run("echo quick", { session: "two" }).then((r) => order.push(r.stdout));
    await Promise.all([slow, quick]);
    assert.deepEqual(order, ["quick\n", "slow\n"]);

    const s = await sb.sessions.create("build");
    await s.run("cd /tmp; x=1");
    assert.equal((await s.run("echo $x $PWD")).stdout, "1 /tmp\n");
    assert.ok((await sb.sessions.list()).includes("build"));
    await sb.env.set("TOKEN", "abc", "build");
    assert.equal(await sb.env.get("TOKEN", "build"), "abc");
    assert.equal(await sb.env.get("TOKEN"), null);
    assert.ok((await s.history()).some((h) => h.command === "cd /tmp; x=1"));
    await s.delete();
    assert.ok(!(await sb.sessions.list()).includes("build"));
  });
});
