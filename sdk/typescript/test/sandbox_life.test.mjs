// A sandbox's life through the SDK, against real daemons: metadata and secrets given at
// creation, pause and resume (whilePaused), expiry (lifetimeMs, idleTimeoutMs, setTimeout,
// onExpired), lanes and the server's refusals (-32001 with retryAfterMs, -32002, -32003).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import {
  POOL_SHUTTING_DOWN, SANDBOX_DISABLED, SANDBOX_ERROR, Sandbox, SbxError, WORKER_UNAVAILABLE,
} from "../src/index.js";
import { SBX_BIN, skip } from "./helpers.mjs";

/** Polls fn until it is truthy (at most ms); resolves with its last value. */
async function until(fn, ms = 10000) {
  const end = Date.now() + ms;
  let v = await fn();
  while (!v && Date.now() < end) {
    await sleep(20);
    v = await fn();
  }
  return v;
}

/**
 * A promise of the reason the sandbox expires with, through onExpired. The hook alone does not
 * keep Node running (an idle connection never does): the wait holds the connection.
 */
function expiry(sb) {
  const release = sb.client.hold();
  return new Promise((res) => sb.onExpired(res)).finally(release);
}

describe("a sandbox's life", { skip, timeout: 120000 }, () => {
  let sb;
  before(async () => {
    sb = await Sandbox.create({
      binary: SBX_BIN, metadata: { team: "red", "job.id": "42" }, secrets: { API_TOKEN: "s3cr3t-t0ken-value" },
    });
  });
  after(async () => {
    await sb?.kill();
  });

  it("keeps metadata, filters the list by it, and hides secrets", async () => {
    const blue = await sb.sandboxes.create({ metadata: { team: "blue", "job.id": "42" }, label: "b" });
    try {
      const info = await sb.getInfo();
      assert.deepEqual(info.metadata, { team: "red", "job.id": "42" });
      assert.equal(info.paused, false);
      assert.equal(info.root, true);
      const ids = async (metadata) => (await sb.sandboxes.list({ metadata })).map((s) => s.sandboxId).sort();
      assert.deepEqual(await ids({ team: "red" }), [sb.sandboxId]);
      assert.deepEqual(await ids({ "job.id": "42" }), [sb.sandboxId, blue.sandboxId].sort());
      assert.deepEqual(await ids({ team: "green" }), []);
      assert.equal((await sb.sandboxes.list()).length, 2);
      assert.equal((await blue.getInfo()).label, "b");
      const r = await sb.commands.run('echo "$API_TOKEN"; test "$API_TOKEN" = s3cr3t-t0ken-value && echo same');
      assert.equal(r.stdout, "[REDACTED:API_TOKEN]\nsame\n");
      // A bad key is refused naming it; the connection stays usable.
      await assert.rejects(sb.sandboxes.create({ metadata: { "a b": "x" } }),
        (e) => e instanceof SbxError && e.code === -32602 && /metadata key/.test(e.rpcMessage));
      assert.equal((await sb.sandboxes.list()).length, 2);
    } finally {
      await blue.kill();
    }
  });

  it("getMetrics: the server's samples, every 5 s, in E2B's names; a range kept to", async () => {
    const t0 = Date.now();
    await sb.commands.run("head -c 1500000 /dev/zero > /tmp/m");
    const got = await until(async () => {
      const m = await sb.getMetrics();
      return m.length && m[m.length - 1].diskUsed >= 1500000 ? m : null;
    }, 15000);
    assert.ok(got, "a sample after the command within 15 s");
    const last = got[got.length - 1];
    assert.ok(last.timestamp instanceof Date && Math.abs(last.timestamp - t0) < 30000);
    assert.equal(last.diskTotal, 256 * 1024 * 1024);
    assert.ok(last.memUsed > 0 && last.memUsed < last.memTotal && last.cpuUsedPct >= 0 && last.cpuUsedPct <= 100);
    assert.deepEqual(await sb.getMetrics({ end: new Date(t0 - 3600000) }), []);
    await assert.rejects(sb.getMetrics({ start: t0 + 10000, end: t0 }), (e) => e instanceof SbxError && e.code === -32602);
    await assert.rejects(sb.getMetrics({ start: "yesterday" }), TypeError);
  });

  it("pauses and resumes: commands wait, or are refused with whilePaused", async () => {
    const h = await sb.commands.run("i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done",
      { background: true });
    await until(async () => (await sb.commands.run("cat /tmp/count 2>/dev/null")).stdout.trim() !== "");
    await sb.pause();
    try {
      assert.equal((await sb.getInfo()).paused, true);
      await assert.rejects(sb.commands.run("true", { whilePaused: "refuse" }),
        (e) => e instanceof SbxError && e.code === SANDBOX_ERROR && /paused/.test(e.rpcMessage));
      await assert.rejects(sb.commands.run("true", { background: true, whilePaused: "refuse" }),
        (e) => e instanceof SbxError && e.code === SANDBOX_ERROR && /paused/.test(e.rpcMessage));
      await assert.rejects(sb.pause(), (e) => e instanceof SbxError && e.code === -32602);
      // Waits for resume; a paused sandbox cannot have answered it.
      const waiting = sb.commands.start("cat /tmp/count");
      await sleep(300);
      assert.equal(waiting.done(), false);
      await sb.resume();
      const first = Number((await waiting.wait()).stdout.trim());
      assert.ok(first > 0);
      const later = await until(async () => Number((await sb.commands.run("cat /tmp/count")).stdout.trim()) > first);
      assert.ok(later, "the loop did not go on after resume");
    } finally {
      if ((await sb.getInfo()).paused) await sb.resume();
      await h.kill();
    }
    await assert.rejects(sb.resume(), (e) => e instanceof SbxError && e.code === -32602);
  });

  it("tells onExpired when a lifetime set by setTimeout runs out", async () => {
    const child = await sb.sandboxes.create({ lifetimeMs: 600000 });
    const reason = expiry(child);
    await child.setTimeout(200);
    assert.equal(await reason, "lifetime");
    assert.equal(child.expired, "lifetime");
    await assert.rejects(child.getInfo(), (e) => e instanceof SbxError && e.code === -32602 && /expired/.test(e.rpcMessage));
    await assert.rejects(child.commands.run("true"), (e) => e instanceof SbxError && e.code === -32602);
    // A hook registered afterwards hears of it too; an unsubscribed one does not.
    assert.equal(await expiry(child), "lifetime");
    const lazy = await sb.sandboxes.create({ lifetimeMs: 300 });
    let called = false;
    const off = lazy.onExpired(() => (called = true));
    off();
    assert.equal(await expiry(lazy), "lifetime");
    assert.equal(called, false);
    await assert.rejects(sb.setTimeout(-1), RangeError);
    assert.equal(sb.expired, null);
  });

  it("expires an idle sandbox, onExpired given at creation", async () => {
    let resolve;
    const release = sb.client.hold();
    const seen = new Promise((r) => (resolve = r)).finally(release);
    const idle = await sb.sandboxes.create({ idleTimeoutMs: 400, onExpired: resolve });
    assert.equal((await idle.commands.run("echo busy")).stdout, "busy\n");
    assert.equal(await seen, "idle");
    assert.ok(!(await sb.sandboxes.list()).some((s) => s.sandboxId === idle.sandboxId));
    assert.equal((await sb.commands.run("echo root lives")).stdout, "root lives\n");
  });
});

describe("lanes and the server's refusals", { skip, timeout: 120000 }, () => {
  it("a full lane answers -32001 with retryAfterMs; the system lane is kept free", async () => {
    const sb = await Sandbox.create({ binary: SBX_BIN, serverArgs: ["--slots", "1", "--system-slots", "1", "--queue", "0"] });
    try {
      const busy = sb.commands.start("sleep 1; echo busy");
      await until(async () => (await sb.health()).lanes.interactive.active === 1);
      let err;
      await assert.rejects(sb.commands.run("true", { session: "b" }), (e) => ((err = e), true));
      assert.ok(err instanceof SbxError);
      assert.equal(err.code, WORKER_UNAVAILABLE);
      assert.ok(Number.isInteger(err.retryAfterMs) && err.retryAfterMs > 0, `retryAfterMs ${err.retryAfterMs}`);
      assert.match(err.rpcMessage, /^WORKER_UNAVAILABLE: the interactive lane is full/);
      assert.equal((await sb.commands.run("echo ops", { session: "ops", lane: "system" })).stdout, "ops\n");
      const bg = await sb.commands.run("echo bg", { background: true, lane: "system" });
      assert.equal((await bg.wait()).stdout, "bg\n");
      const copy = await sb.fork({ lane: "system" });
      assert.equal((await copy.commands.run("echo copy", { lane: "system" })).stdout, "copy\n");
      await copy.kill();
      const snap = await sb.snapshot({ lane: "system" });
      await sb.restore(snap, { lane: "system" });
      await sb.importState(await sb.exportState({ lane: "system" }), { lane: "system" });
      await assert.rejects(sb.commands.run("true", { lane: "fast" }), (e) => e instanceof SbxError && e.code === -32602);
      assert.equal((await busy.wait()).stdout, "busy\n");
      assert.equal(new SbxError(-32001, "x").retryAfterMs, undefined);
    } finally {
      await sb.kill();
    }
  });

  it("a server in --mode disabled refuses the sandbox with -32002", async () => {
    await assert.rejects(Sandbox.create({ binary: SBX_BIN, serverArgs: ["--mode", "disabled"] }),
      (e) => e instanceof SbxError && e.code === SANDBOX_DISABLED && /^SANDBOX_DISABLED/.test(e.rpcMessage));
  });

  it("a server shutting down refuses new work with -32003", async () => {
    const sb = await Sandbox.create({ binary: SBX_BIN, serverArgs: ["--shutdown-deadline-ms", "2000"] });
    const pid = sb.client.pid;
    // The sandbox's pid 1 stopped: a run sent now waits, so the shutdown has work under way.
    const kids = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).map(Number);
    for (const k of kids) process.kill(k, "SIGSTOP");
    try {
      const stuck = sb.commands.run("sleep 30", { session: "stuck" });
      await until(async () => (await sb.health()).queued === 1);
      await sb.client.request("kill");
      await assert.rejects(sb.commands.run("true", { session: "other" }),
        (e) => e instanceof SbxError && e.code === POOL_SHUTTING_DOWN && /^POOL_SHUTTING_DOWN/.test(e.rpcMessage));
      assert.equal(await sb.ping(), true);
      for (const k of kids) process.kill(k, "SIGCONT");
      // Queued, it is refused; had it got to run before the shutdown, it would be cancelled.
      const end = await stuck.then((r) => r.exitCode, (e) => e.code);
      assert.ok(end === POOL_SHUTTING_DOWN || end === 125, `the stuck run ended with ${end}`);
    } finally {
      for (const k of kids) {
        try {
          process.kill(k, "SIGCONT");
        } catch {
          // gone already
        }
      }
      await sb.kill();
    }
  });
});
