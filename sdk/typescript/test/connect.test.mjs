// The SDK against `sbx serve --socket`: connections, persistent sandboxes, a background process
// resumed on a second connection, and a server that goes away under a pending run.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SbxError } from "../src/index.js";
import { skip, socketDaemon } from "./helpers.mjs";

describe("a socket daemon", { skip }, () => {
  let daemon;
  before(async () => {
    daemon = await socketDaemon();
  });
  after(async () => {
    await daemon?.stop();
  });

  it("serves sandboxes over connections; kill() closes only this connection", async () => {
    const a = await Sandbox.connect(daemon.path, { envs: { CONN: "a" } });
    const b = await Sandbox.connect(daemon.path, { timeoutMs: 300 });
    try {
      assert.notEqual(a.sandboxId, b.sandboxId);
      assert.equal((await a.commands.run("echo $CONN")).stdout, "a\n");
      assert.equal((await b.commands.run("echo ${CONN:-none}")).stdout, "none\n");
      assert.equal((await b.commands.run("sleep 5")).exitCode, 124);
      await a.kill();
      assert.equal(await a.ping(), false);
      await assert.rejects(a.commands.run("true"), (e) => e instanceof SbxError && e.code === -32603);
      assert.equal((await b.commands.run("echo b lives")).stdout, "b lives\n");
    } finally {
      await a.kill();
      await b.kill();
    }
  });

  it("resumes a persistent sandbox's process on another connection, each byte once", async () => {
    const a = await Sandbox.connect(daemon.path);
    const p = await a.sandboxes.create({ persist: true, label: "kept" });
    const h = await p.commands.run('echo first; read -r x; echo "second $x"', { background: true, stdin: true });
    await h.waitForLog("^first$");
    while (!h.stdout.includes("first\n")) await new Promise((r) => setTimeout(r, 10));
    await a.kill();

    const b = await Sandbox.connect(daemon.path);
    try {
      assert.ok((await b.sandboxes.list()).some((s) => s.sandboxId === p.sandboxId && s.persist));
      const p2 = b.sandboxes.get(p.sandboxId);
      const got = [];
      const h2 = await p2.commands.connect(h.pid, { onStdout: (s) => got.push(s) });
      await h2.sendStdin("more\n");
      const r = await h2.wait();
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, "second more\n");
      assert.equal(got.join(""), "second more\n");
      await p2.kill();
      assert.ok(!(await b.sandboxes.list()).some((s) => s.sandboxId === p.sandboxId));
    } finally {
      await b.kill();
    }
  });

  it("gets the shutdown's answers, then -32603 once the server is gone", async () => {
    const own = await socketDaemon();
    const sb = await Sandbox.connect(own.path);
    const pending = sb.commands.run("sleep 30");
    await new Promise((r) => setTimeout(r, 200));
    await own.stop(); // SIGTERM: an orderly shutdown cancels the running command
    assert.equal((await pending).exitCode, 125);
    await assert.rejects(sb.commands.run("true"), (e) => e instanceof SbxError && e.code === -32603);
    await sb.kill();
  });
});
