// SPDX-License-Identifier: MIT
// E2B's code interpreter SDK (npm `@e2b/code-interpreter`, pinned in package.json), unchanged,
// against `sbx serve --http`. Usage: node tests/e2b/interp.mjs, with E2B_API_URL and
// E2B_SANDBOX_URL pointing at the daemon. Prints one JSON object of what the SDK saw;
// tests/integration/test_e2b.py checks it. Every step is recorded as its value, or as
// {threw, name} when the SDK threw.
import { Sandbox } from "@e2b/code-interpreter";

const out = {};

async function step(name, f) {
  try {
    out[name] = await f();
  } catch (e) {
    out[name] = { threw: String(e?.message ?? e), name: e?.name ?? null };
  }
  return out[name];
}

const brief = (ex) => ({
  text: ex.text ?? null,
  results: ex.results.map((r) => ({ main: r.isMainResult, formats: r.formats(), text: r.text ?? null })),
  stdout: ex.logs.stdout.join(""),
  stderr: ex.logs.stderr.join(""),
  error: ex.error ? { name: ex.error.name, value: ex.error.value, traceback: ex.error.traceback } : null,
  count: ex.executionCount ?? null,
});

try {
  const sbx = await Sandbox.create();
  out.id = sbx.sandboxId;
  await step("first", async () => brief(await sbx.runCode("x = 41\nprint('hello')\nx + 1")));
  await step("kept", async () => brief(await sbx.runCode("x")));
  await step("streamed", async () => {
    const seen = [];
    const ex = await sbx.runCode("print('a')\ndisplay(2)\nprint('b')\n3", {
      onStdout: (m) => seen.push("out:" + m.line),
      onResult: (r) => seen.push("res:" + r.text),
    });
    return { seen, count: ex.executionCount };
  });
  await step("error", async () => brief(await sbx.runCode("def f():\n    raise ValueError('bad')\nf()")));
  // The SDK's timeoutMs aborts the request: the cell is cancelled with it, x stays 41.
  await step("killed", () => sbx.runCode("x = 0\nwhile True: pass", { timeoutMs: 1000 }));
  await step("after_kill", async () => brief(await sbx.runCode("x")));
  await step("chart", async () => {
    const ex = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()");
    const png = ex.results.find((r) => r.png)?.png ?? "";
    return { formats: ex.results.map((r) => r.formats()), pngMagic: Buffer.from(png, "base64").subarray(0, 4).toString("hex") };
  });
  await step("frame", async () => {
    const ex = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2]})");
    return { html: (ex.results[0]?.html ?? "").includes("<table"), text: ex.text };
  });
  await step("context", async () => {
    const ctx = await sbx.createCodeContext({ cwd: "/tmp" });
    const a = await sbx.runCode("import os\nv = 5\nos.getcwd()", { context: ctx });
    const b = await sbx.runCode("'v' in dir()");
    const listed = (await sbx.listCodeContexts()).map((c) => c.id).includes(ctx.id);
    await sbx.restartCodeContext(ctx);
    const c = await sbx.runCode("'v' in dir()", { context: ctx });
    await sbx.removeCodeContext(ctx.id);
    const gone = !(await sbx.listCodeContexts()).map((c) => c.id).includes(ctx.id);
    return { language: ctx.language, cwd: ctx.cwd, a: a.text, b: b.text, listed, c: c.text, gone };
  });
  await step("bash", async () => brief(await sbx.runCode("echo $((6 * 7))", { language: "bash" })));
  await step("unknown_context", () => sbx.runCode("1", { context: { id: "nope" } }));
  await step("both", () => sbx.runCode("1", { context: { id: "x" }, language: "python" }));
  await sbx.kill();
} catch (e) {
  out.fatal = String(e?.stack ?? e);
}
console.log(JSON.stringify(out));
