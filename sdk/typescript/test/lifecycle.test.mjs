// What surrounds the calls: finding and starting the server, its death, request size, and a
// script that forgets kill() still ending.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { Sandbox, SbxError, findBinary } from "../src/index.js";
import { SBX_BIN, SDK_DIR, skip } from "./helpers.mjs";

describe("the connection's life", { skip }, () => {
  it("finds the binary: the option, then $SBX_BIN", () => {
    assert.equal(findBinary("/x/sbx"), "/x/sbx");
    const saved = process.env.SBX_BIN;
    process.env.SBX_BIN = "/from/env/sbx";
    try {
      assert.equal(findBinary(), "/from/env/sbx");
    } finally {
      if (saved === undefined) delete process.env.SBX_BIN;
      else process.env.SBX_BIN = saved;
    }
  });

  it("reports a binary that cannot start as SbxError -32603", async () => {
    await assert.rejects(Sandbox.create({ binary: "/nonexistent/sbx" }),
      (e) => e instanceof SbxError && e.code === -32603 && /cannot start/.test(e.message));
  });

  it("fails pending calls with the server's death, and every later one", async () => {
    const sb = await Sandbox.create({ binary: SBX_BIN });
    const pending = sb.commands.run("sleep 30");
    await new Promise((r) => setTimeout(r, 200));
    process.kill(sb.client.pid, "SIGKILL");
    await assert.rejects(pending, (e) => e instanceof SbxError && e.code === -32603 && /server exited/.test(e.message));
    await assert.rejects(sb.commands.run("true"), (e) => e instanceof SbxError && e.code === -32603);
    await sb.kill();
  });

  it("refuses a request over limits.rpcBytes without sending it", async () => {
    const sb = await Sandbox.create({ binary: SBX_BIN, limits: { rpcBytes: 4096 } });
    try {
      await assert.rejects(sb.commands.run("echo " + "x".repeat(5000)), (e) => e instanceof SbxError && e.code === -32700);
      assert.equal((await sb.commands.run("echo small")).stdout, "small\n");
    } finally {
      await sb.kill();
    }
  });

  it("lets a script that never calls kill() end, taking its server along", () => {
    const script = `
      import { Sandbox } from ${JSON.stringify(SDK_DIR + "/src/index.js")};
      const sb = await Sandbox.create({ binary: ${JSON.stringify(SBX_BIN)} });
      await sb.commands.run("sleep 60", { background: true });
      console.log((await sb.commands.run("echo hi")).stdout.trim(), sb.client.pid);`;
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 20000 });
    assert.equal(r.status, 0, r.stderr);
    const [word, pid] = r.stdout.trim().split(" ");
    assert.equal(word, "hi");
    // The server saw its stdin close and shuts down.
    const deadline = Date.now() + 10000;
    let alive = true;
    while (alive && Date.now() < deadline) {
      try {
        process.kill(Number(pid), 0);
        spawnSync("sleep", ["0.05"]);
      } catch {
        alive = false;
      }
    }
    assert.equal(alive, false, "the server outlived the script");
  });
});
