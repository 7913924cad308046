// Compiled by `npm run typecheck` (never run): index.d.ts must accept this use under --strict
// and reject misuse, e.g. a background handle where a result is expected.
import { Sandbox, SbxError, ProcessEndedError, WORKER_UNAVAILABLE, type CommandResult, type ProcessHandle, type OutputChunk, type SandboxInfo, type ExpiryReason, type Execution, type Result, type CodeContext, type CodeHandle, type ExecutionError, type ImageInfo } from "sbx";

async function main(): Promise<void> {
  const sb = await Sandbox.create({ timeoutMs: 5000, limits: { cpus: 0.5 }, envs: { A: "b" } });
  const r: CommandResult = await sb.commands.run("echo hi", { onStdout: (s) => console.log(s), cwd: "/tmp" });
  const code: number = r.exitCode;
  const bytes: Uint8Array = r.stdoutBytes;
  const h: ProcessHandle = await sb.commands.run("sleep 1", { background: true, stdin: true });
  const line: string = await h.waitForLog(/ready/, { timeoutMs: 100 });
  for await (const c of h) { const x: OutputChunk = c; console.log(x.text); }
  const res = await h.wait();
  const st: "exited" | "killed" | "timeout" = res.status;
  const t: string = await sb.files.read("x");
  const b: Uint8Array = await sb.files.read("x", { format: "bytes" });
  await sb.files.write("y", new Uint8Array([1, 2]));
  const f = await sb.fork();
  const id: string = await sb.snapshot();
  await sb.restore(id);
  const handle = sb.commands.start("sleep 3");
  await handle.cancel();
  try { await sb.commands.run("x"); } catch (e) { if (e instanceof SbxError) console.log(e.code); if (e instanceof ProcessEndedError) console.log(e.rpcMessage); }
  const s2 = await Sandbox.connect("/tmp/s.sock");
  const term = await sb.pty.create({ cols: 80, rows: 24, onData: (d) => d.length });
  await term.resize({ cols: 100, rows: 30 });
  const kept = await sb.sandboxes.create({ metadata: { team: "red" }, lifetimeMs: 60000, idleTimeoutMs: 5000,
    secrets: { TOKEN: "abcdefgh", OTHER: { value: "x", mode: "env" } }, onExpired: (why: ExpiryReason) => console.log(why) });
  const infos: SandboxInfo[] = await sb.sandboxes.list({ metadata: { team: "red" } });
  const paused: boolean = (await kept.getInfo()).paused;
  await kept.pause(); await kept.resume(); await kept.setTimeout(1000);
  const off: () => void = kept.onExpired((why) => console.log(why));
  off();
  const gone: ExpiryReason | null = kept.expired;
  await sb.commands.run("true", { lane: "system", whilePaused: "refuse" });
  await sb.commands.run("true", { background: true, lane: "interactive", whilePaused: "wait" });
  await sb.fork({ lane: "system" });
  try { await sb.commands.run("x"); } catch (e) { if (e instanceof SbxError && e.code === WORKER_UNAVAILABLE) console.log(e.retryAfterMs ?? 0); }
  console.log(infos, paused, gone);
  const ctx: CodeContext = await sb.createCodeContext({ language: "bash", cwd: "/tmp", envs: { A: "b" } });
  const ex: Execution = await sb.runCode("x = 1\nx", {
    context: ctx, timeoutMs: 500, envs: { B: "c" }, signal: new AbortController().signal,
    onStdout: (s) => console.log(s), onStderr: (s) => console.log(s),
    onResult: (r: Result) => console.log(r.html ?? r.png), onError: (e: ExecutionError) => console.log(e.traceback),
  });
  const main: string | undefined = ex.text;
  const out: string[] = ex.logs.stdout;
  const err: ExecutionError | null = ex.error;
  const count: number | null = ex.executionCount;
  const formats: string[] = ex.results[0].formats();
  const json: unknown = ex.results[0].json;
  await sb.runCode("echo hi", { language: "bash", context: "default-bash" });
  const ch: CodeHandle = sb.startCode("import time; time.sleep(9)");
  const cancelled: boolean = await ch.cancel();
  const done: Execution = await ch.wait();
  const ctxs: CodeContext[] = await sb.listCodeContexts();
  const again: CodeContext = await sb.restartCodeContext(ctx.id);
  await sb.removeCodeContext(again);
  console.log(main, out, err, count, formats, json, cancelled, done.errorClass, ctxs);
  const img: ImageInfo = await sb.images.importImage("/tmp/app.tar", { name: "app:1" });
  await sb.images.importImage("/tmp/app.tar", "app:2");
  const imgs: ImageInfo[] = await sb.images.list();
  const users: number = (await sb.images.inspect(img.id)).sandboxes;
  const fromImage = await Sandbox.connect("/tmp/s.sock", { image: "app:1" });
  await sb.sandboxes.create({ image: img.id.slice(7, 19) });
  await fromImage.kill(); await sb.images.remove("app:1");
  console.log(imgs, users, img.config.env);
  await f.kill(); await s2.kill(); await sb.kill();
  console.log(code, bytes, line, st, t, b);
}
void main;

async function misuse(sb: Sandbox): Promise<void> {
  // @ts-expect-error a foreground run resolves with a CommandResult, not a handle
  const h: ProcessHandle = await sb.commands.run("x");
  // @ts-expect-error format "bytes" gives bytes
  const s: string = await sb.files.read("x", { format: "bytes" });
  // @ts-expect-error lanes are "interactive" or "system"
  await sb.commands.run("x", { lane: "fast" });
  // @ts-expect-error metadata values are strings
  await sb.sandboxes.create({ metadata: { n: 1 } });
  // @ts-expect-error code contexts are "python" or "bash"
  await sb.runCode("x", { language: "cobol" });
  // @ts-expect-error runCode resolves with an Execution, not a CommandResult
  const cr: CommandResult = await sb.runCode("x");
  // @ts-expect-error an image is named by a string
  await sb.sandboxes.create({ image: 1 });
  // @ts-expect-error png is base64 text, not bytes
  const png: Uint8Array | undefined = (await sb.runCode("x")).results[0].png;
  console.log(h, s, cr, png);
}
void misuse;
