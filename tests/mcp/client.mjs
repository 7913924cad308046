// SPDX-License-Identifier: MIT
// Drives `sbx mcp` with the official TypeScript MCP client and prints one JSON object of what
// it saw; tests/integration/test_mcp.py checks it. Usage: node tests/mcp/client.mjs SBX_BIN
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";
import { readFileSync } from "node:fs";

const sbx = process.argv[2];
const out = { steps: {} };
const text = (r) => (r?.content ?? []).map((c) => c.text ?? "").join("");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const transport = new StdioClientTransport({ command: sbx, args: ["mcp"], stderr: "inherit" });
const client = new Client({ name: "sbx-test", version: "1.0.0" });

// Each step is recorded as {ok, text, isError, ms} or {threw: message, code}.
async function step(name, f) {
  const t0 = performance.now();
  try {
    const r = await f();
    out.steps[name] = { text: text(r), isError: r?.isError ?? false, ms: performance.now() - t0 };
    return out.steps[name];
  } catch (e) {
    out.steps[name] = { threw: String(e?.message ?? e), code: e?.code ?? null, ms: performance.now() - t0 };
    return out.steps[name];
  }
}
const call = (name, args, opts) => client.callTool({ name, arguments: args }, undefined, opts);

try {
  await client.connect(transport);
  // sbx mcp and the daemon it started, for the test's check that nothing of them is left.
  out.pid = transport.pid;
  try {
    out.children = readFileSync(`/proc/${out.pid}/task/${out.pid}/children`, "utf8").trim().split(/\s+/).map(Number);
  } catch {
    out.children = [];
  }
  out.latest = LATEST_PROTOCOL_VERSION;
  out.server = client.getServerVersion();
  out.capabilities = client.getServerCapabilities();
  out.instructions = client.getInstructions() ?? null;
  out.tools = (await client.listTools()).tools;

  await step("ping", () => client.ping().then(() => ({ content: [{ type: "text", text: "pong" }] })));
  await step("run_echo", () => call("run", { command: "echo hi" }));
  await step("run_state_1", () => call("run", { command: "cd /tmp && x=42" }));
  await step("run_state_2", () => call("run", { command: "echo $x in $PWD; cd ~" }));
  await step("run_fail", () => call("run", { command: "echo oops >&2; exit 3" }));
  await step("run_timeout", () => call("run", { command: "sleep 10", timeout: 1 }));

  // Progress: a run that prints a line every 0.4 s.
  const progress = [];
  await step("run_progress", () =>
    call("run", { command: "for i in 1 2 3 4 5; do echo tick $i; sleep 0.4; done" }, {
      onprogress: (p) => progress.push(p),
    }));
  out.progress = progress;

  // Cancel: the command would write a marker after 2 s; it is cancelled after 0.5 s. A run
  // of the same session then waits 2.5 s more and looks for the marker.
  const ac = new AbortController();
  setTimeout(() => ac.abort("test cancels"), 500);
  await step("run_cancelled", () => call("run", { command: "sleep 2; touch /tmp/marker; echo written" }, { signal: ac.signal }));
  await step("after_cancel", () =>
    call("run", { command: "sleep 2.5; test -e /tmp/marker && echo present || echo absent" }));

  // Bad arguments, then the server still answers.
  await step("bad_unknown_arg", () => call("run", { cmd: "echo x" }));
  await step("bad_type", () => call("run", { command: 42 }));
  await step("bad_missing", () => call("read_file", {}));
  await step("bad_range", () => call("read_file", { path: "x", offset: 0 }));
  await step("unknown_tool", () => call("no_such_tool", {}));
  await step("after_bad", () => call("run", { command: "echo still here" }));

  // Files.
  await step("write", () => call("write_file", { path: "proj/a.txt", content: "alpha\nbeta\ngamma beta\n" }));
  await step("run_chmod", () => call("run", { command: "chmod 755 proj/a.txt" }));
  await step("read", () => call("read_file", { path: "proj/a.txt" }));
  await step("read_range", () => call("read_file", { path: "proj/a.txt", offset: 2, limit: 1 }));
  await step("read_missing", () => call("read_file", { path: "proj/nope.txt" }));
  await step("edit_not_unique", () => call("edit_file", { path: "proj/a.txt", old_string: "beta", new_string: "BETA" }));
  await step("edit_missing", () => call("edit_file", { path: "proj/a.txt", old_string: "delta", new_string: "D" }));
  await step("edit_unique", () => call("edit_file", { path: "proj/a.txt", old_string: "gamma beta", new_string: "GAMMA" }));
  await step("edit_all", () =>
    call("edit_file", { path: "proj/a.txt", old_string: "a", new_string: "4", replace_all: true }));
  await step("after_edit", () => call("run", { command: "cat proj/a.txt; stat -c %a proj/a.txt" }));
  await step("list", () => call("list_directory", { path: "proj" }));
  await step("list_home", () => call("list_directory", { depth: 2 }));

  // Background processes.
  const started = await step("process_start", () =>
    call("process_start", { command: "for i in 1 2 3; do echo out $i; sleep 0.1; done; sleep 100", label: "srv" }));
  const pid = /process (p\d+)/.exec(started.text ?? "")?.[1] ?? "p?";
  out.process_id = pid;
  await sleep(800);
  await step("process_list", () => call("process_list", {}));
  await step("process_logs", () => call("process_logs", { process_id: pid }));
  await step("process_kill", () => call("process_kill", { process_id: pid }));
  await step("process_list_after", () => call("process_list", {}));
  await step("process_logs_unknown", () => call("process_logs", { process_id: "p999" }));

  // Snapshot, restore, fork.
  const snap = await step("snapshot", () => call("snapshot", {}));
  out.snapshot_id = /snapshot (\S+) saved/.exec(snap.text ?? "")?.[1] ?? "?";
  await step("change", () => call("run", { command: "rm -rf proj; echo gone" }));
  await step("restore", () => call("restore", { snapshot_id: out.snapshot_id }));
  await step("after_restore", () => call("run", { command: "cat proj/a.txt" }));
  const fork = await step("fork", () => call("fork", {}));
  out.fork_id = /sandbox ([0-9a-f]+)/.exec(fork.text ?? "")?.[1] ?? "?";
  await step("in_fork", () => call("run", { command: "echo only-in-fork > f; cat proj/a.txt", sandbox: out.fork_id }));
  await step("not_in_original", () => call("run", { command: "test -e f && echo present || echo absent" }));
} catch (e) {
  out.fatal = String(e?.stack ?? e);
} finally {
  const proc = transport._process; // how sbx mcp ended: the SDK keeps no public handle
  await client.close().catch(() => {});
  out.exit = { code: proc?.exitCode ?? null, signal: proc?.signalCode ?? null };
}
process.stdout.write(JSON.stringify(out) + "\n");
