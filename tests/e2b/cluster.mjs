// SPDX-License-Identifier: MIT
// E2B's own SDK (npm `e2b`), unchanged, against an sbx cluster's gateway (sbx serve
// --kube-gateway). Usage: node tests/e2b/cluster.mjs create N | check ID... | kill ID...,
// with E2B_API_URL and E2B_SANDBOX_URL pointing at the gateway. Prints one JSON object;
// tests/integration/test_kube.py checks it. A step that throws is recorded as {threw}.
import { Sandbox } from "e2b";

const [verb, ...args] = process.argv.slice(2);
const out = {};

async function attempt(f) {
  try {
    return await f();
  } catch (e) {
    return { threw: String(e?.message ?? e), name: e?.name ?? null };
  }
}

// Each sandbox: a command, a file written and read back, a process left running and seen.
async function exercise(sbx) {
  const r = {};
  r.command = await attempt(async () => {
    const c = await sbx.commands.run("echo $ROLE $(cat /proc/sys/kernel/hostname) && id -un");
    return { exitCode: c.exitCode, stdout: c.stdout };
  });
  r.file = await attempt(async () => {
    await sbx.files.write("/home/user/note.txt", `note of ${sbx.sandboxId}`);
    return await sbx.files.read("/home/user/note.txt");
  });
  r.process = await attempt(async () => {
    const h = await sbx.commands.run("sleep 300", { background: true });
    const listed = await sbx.commands.list();
    return { pid: h.pid, listed: listed.some((p) => p.pid === h.pid) };
  });
  return r;
}

if (verb === "create") {
  const n = Number(args[0]);
  out.sandboxes = await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const made = await attempt(() => Sandbox.create({ envs: { ROLE: `r${i}` }, metadata: { suite: "kube" }, timeoutMs: 600000 }));
      if (made.threw) return made;
      return { id: made.sandboxId, ...(await exercise(made)) };
    }),
  );
  out.listed = await attempt(async () => (await Sandbox.list({ query: { metadata: { suite: "kube" } } }).nextItems()).length);
} else if (verb === "check") {
  out.results = await Promise.all(
    args.map(async (id) => {
      const sbx = await attempt(() => Sandbox.connect(id));
      if (sbx.threw) return { id, ...sbx };
      return { id, ...(await attempt(async () => {
        const c = await sbx.commands.run("cat /home/user/note.txt");
        return { stdout: c.stdout };
      })) };
    }),
  );
} else if (verb === "kill") {
  out.killed = await Promise.all(args.map((id) => attempt(() => Sandbox.kill(id))));
}
console.log(JSON.stringify(out));
