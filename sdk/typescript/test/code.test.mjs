// Code contexts through the SDK against a real daemon (`sbx serve --stdio`): runCode and its
// Execution, rich results, exceptions, streaming callbacks, timeouts and cancels that leave the
// context as it was, contexts created, listed, restarted and removed, bash contexts, bad input.
// One sandbox serves the whole file; tests that need their own state use their own context.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { CodeContext, Execution, ExecutionError, INVALID_PARAMS, Result, Sandbox, SbxError } from "../src/index.js";
import { SBX_BIN, skip } from "./helpers.mjs";

const noPython = existsSync("/usr/bin/python3") ? false : "no /usr/bin/python3";
const noIpython = existsSync("/usr/lib/python3/dist-packages/IPython")
  ? false : "python3-ipython is not installed (build.sh installs it)";

/** Resolves once check() is true, polling; rejects after ms. */
async function until(check, ms, what) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("code contexts", { skip: skip || noPython }, () => {
  let sb;
  before(async () => {
    sb = await Sandbox.create({ binary: SBX_BIN, timeoutMs: 30000 });
  });
  after(async () => {
    await sb?.kill();
  });

  it("keeps state across cells of the default context", async () => {
    const first = await sb.runCode("rows = []\nimport math");
    assert.ok(first instanceof Execution);
    assert.equal(first.error, null);
    assert.equal(first.contextId, "default-python");
    assert.equal(first.language, "python");
    assert.equal(first.exitCode, 0);
    for (let i = 0; i < 4; i++) {
      const ex = await sb.runCode(`rows.append(${i} * 3)\nlen(rows)`);
      assert.equal(ex.error, null, ex.error?.value);
      assert.equal(ex.text, String(i + 1));
      assert.equal(ex.executionCount, first.executionCount + i + 1);
    }
    const ex = await sb.runCode("math.floor(sum(rows) / 2), rows");
    assert.equal(ex.text, "(9, [0, 3, 6, 9])");
    assert.equal(ex.results.length, 1);
    assert.ok(ex.results[0] instanceof Result);
    assert.equal(ex.results[0].isMainResult, true);
    // A cell's envs are for that cell only.
    assert.equal((await sb.runCode("import os\nos.environ.get('ONLY')", { envs: { ONLY: "this cell" } })).text, "'this cell'");
    assert.equal((await sb.runCode("repr(os.environ.get('ONLY'))")).text, "'None'");
  });

  it("kills a cell at timeoutMs and leaves the variables as they were", async () => {
    const ctx = await sb.createCodeContext();
    await sb.runCode("items = [1, 2, 3]\nd = {'k': 'v'}", { context: ctx });
    const t0 = Date.now();
    const ex = await sb.runCode("items.append(4)\nd['k'] = 'changed'\nimport time\ntime.sleep(60)",
      { context: ctx, timeoutMs: 500 });
    assert.ok(Date.now() - t0 < 15000, `took ${Date.now() - t0} ms`);
    assert.ok(ex.error instanceof ExecutionError);
    assert.equal(ex.error.name, "TimeoutError");
    assert.match(ex.error.value, /as it was before/);
    assert.equal(ex.errorClass, "TIMEOUT");
    assert.equal(ex.exitCode, 124);
    assert.equal((await sb.runCode("items, d", { context: ctx })).text, "([1, 2, 3], {'k': 'v'})");
    // A cell that ends keeps what it did.
    await sb.runCode("items.append(4)", { context: ctx });
    assert.equal((await sb.runCode("items", { context: ctx })).text, "[1, 2, 3, 4]");
    await sb.removeCodeContext(ctx);
  });

  it("gives displayed objects as rich results", { skip: noIpython }, async () => {
    const ex = await sb.runCode("from IPython.display import HTML, Markdown, JSON\n" +
      "display(HTML('<b>bold</b>'))\ndisplay(Markdown('# title'), JSON({'a': [1, 2]}))\n'last'");
    assert.equal(ex.error, null, ex.error?.traceback);
    assert.equal(ex.results.length, 4);
    const [html, md, json, main] = ex.results;
    assert.equal(html.html, "<b>bold</b>");
    assert.equal(html.isMainResult, false);
    assert.deepEqual(html.formats(), ["text", "html"]);
    assert.equal(html.png, undefined);
    assert.equal(html.data["text/html"], "<b>bold</b>");
    assert.equal(md.markdown, "# title");
    assert.deepEqual(json.json, { a: [1, 2] });
    assert.deepEqual(json.formats(), ["text", "json"]);
    assert.equal(main.isMainResult, true);
    assert.equal(main.text, "'last'");
    assert.equal(ex.text, "'last'");
    // A trailing semicolon hides the value, as in IPython: no main result, no text.
    const quiet = await sb.runCode("1 + 1;");
    assert.deepEqual(quiet.results, []);
    assert.equal(quiet.text, undefined);
  });

  it("reports an exception's name, value and traceback, keeping what ran before it", async () => {
    await sb.runCode("def inner(x):\n    return {}[x]\n");
    const ex = await sb.runCode("before_error = 5\ninner('missing')");
    assert.ok(ex.error instanceof ExecutionError);
    assert.equal(ex.error.name, "KeyError");
    assert.equal(ex.error.value, "'missing'");
    assert.match(ex.error.traceback, /inner/);
    assert.match(ex.error.traceback, /KeyError/);
    assert.equal(ex.exitCode, 1);
    assert.equal(ex.errorClass, null);
    assert.equal((await sb.runCode("before_error")).text, "5");
    assert.equal((await sb.runCode("def broken(:\n    pass")).error?.name, "SyntaxError");
  });

  it("streams output, results and errors to the callbacks in order", { skip: noIpython }, async () => {
    const seen = [];
    const ex = await sb.runCode("import sys\nprint('one')\ndisplay(2)\nprint('err', file=sys.stderr)\nprint('three')\n4", {
      onStdout: (s) => seen.push(["out", s]),
      onStderr: (s) => seen.push(["err", s]),
      onResult: (r) => seen.push(["res", r.text, r.isMainResult, r instanceof Result]),
      onError: (e) => seen.push(["error", e.name]),
    });
    assert.equal(ex.error, null);
    assert.deepEqual(seen, [
      ["out", "one\n"], ["res", "2", false, true], ["err", "err\n"], ["out", "three\n"], ["res", "4", true, true],
    ]);
    assert.equal(ex.logs.stdout.join(""), "one\nthree\n");
    assert.deepEqual(ex.logs.stderr, ["err\n"]);
    seen.length = 0;
    const bad = await sb.runCode("1/0", { onError: (e) => seen.push([e.name, e instanceof ExecutionError]) });
    assert.deepEqual(seen, [["ZeroDivisionError", true]]);
    assert.equal(bad.error?.name, "ZeroDivisionError");
  });

  it("rejects runCode with what a callback threw", async () => {
    const boom = new Error("callback failed");
    await assert.rejects(sb.runCode("print('x')", { onStdout: () => { throw boom; } }), (e) => e === boom);
    assert.equal((await sb.runCode("'after'")).text, "'after'");
  });

  it("cancels a running cell and leaves the context as it was", async () => {
    const ctx = await sb.createCodeContext();
    await sb.runCode("n = 10", { context: ctx });
    let out = "";
    const h = sb.startCode("n += 1\nprint('started', flush=True)\nimport time\ntime.sleep(60)",
      { context: ctx, onStdout: (s) => (out += s) });
    assert.equal(typeof h.requestId, "number");
    await until(() => out.includes("started"), 20000, "the cell to start");
    assert.equal(h.done(), false);
    assert.equal(await h.cancel(), true);
    const ex = await h.wait();
    assert.equal(ex.error?.name, "CancelledError");
    assert.equal(ex.errorClass, "CANCELLED");
    assert.equal(h.done(), true);
    assert.equal(await h.cancel(), false);
    assert.equal((await sb.runCode("n", { context: ctx })).text, "10");

    // The same through an AbortSignal.
    const ac = new AbortController();
    let started = false;
    const p = sb.runCode("n = 99\nprint('go', flush=True)\nimport time\ntime.sleep(60)",
      { context: ctx, signal: ac.signal, onStdout: () => (started = true) });
    await until(() => started, 20000, "the second cell to start");
    ac.abort();
    const ex2 = await p;
    assert.equal(ex2.errorClass, "CANCELLED");
    assert.equal((await sb.runCode("n", { context: ctx })).text, "10");
    await sb.removeCodeContext(ctx.id);
  });

  it("creates, lists, restarts and removes contexts", async () => {
    const ctx = await sb.createCodeContext({ cwd: "/tmp", envs: { GREETING: "hello" } });
    assert.ok(ctx instanceof CodeContext);
    assert.equal(ctx.language, "python");
    assert.equal(ctx.cwd, "/tmp");
    assert.notEqual(ctx.id, "default-python");
    const ex = await sb.runCode("import os\nv = 7\n(os.getcwd(), os.environ['GREETING'])", { context: ctx });
    assert.equal(ex.text, "('/tmp', 'hello')");
    assert.equal(ex.contextId, ctx.id);
    // Contexts are apart from each other and from the default one.
    assert.equal((await sb.runCode("'v' in dir()")).text, "False");
    assert.equal((await sb.runCode("v", { context: ctx.id })).text, "7");
    const ids = (await sb.listCodeContexts()).map((c) => c.id);
    assert.ok(ids.includes(ctx.id), ids.join());
    assert.ok(ids.includes("default-python"), ids.join());

    const again = await sb.restartCodeContext(ctx);
    assert.equal(again.id, ctx.id);
    assert.equal(again.cwd, "/tmp");
    const fresh = await sb.runCode("import os\n('v' in dir(), os.getcwd(), os.environ['GREETING'])", { context: ctx });
    assert.equal(fresh.text, "(False, '/tmp', 'hello')");

    await sb.removeCodeContext(ctx);
    assert.ok(!(await sb.listCodeContexts()).some((c) => c.id === ctx.id));
    await assert.rejects(sb.runCode("1", { context: ctx }),
      (e) => e instanceof SbxError && e.code === INVALID_PARAMS && /no context/.test(e.rpcMessage));
  });

  it("runs bash cells in a bash context", async () => {
    const ctx = await sb.createCodeContext({ language: "bash", cwd: "/tmp", envs: { A: "b" } });
    assert.equal(ctx.language, "bash");
    const set = await sb.runCode("cd /home/user && X=5", { context: ctx });
    assert.equal(set.error, null);
    assert.equal(set.language, "bash");
    const ex = await sb.runCode("echo $PWD $A $X; echo oops >&2", { context: ctx });
    assert.deepEqual(ex.logs.stdout, ["/home/user b 5\n"]);
    assert.deepEqual(ex.logs.stderr, ["oops\n"]);
    assert.equal(ex.executionCount, null);
    const failed = await sb.runCode("exit 3", { context: ctx });
    assert.equal(failed.error?.name, "ExitError");
    assert.equal(failed.exitCode, 3);
    // The default bash context, by language.
    const d = await sb.runCode("echo $((2 + 2))", { language: "bash" });
    assert.equal(d.contextId, "default-bash");
    assert.deepEqual(d.logs.stdout, ["4\n"]);
    await sb.removeCodeContext(ctx);
  });

  it("rejects bad input with a clear error", async () => {
    const invalid = (re) => (e) => e instanceof SbxError && e.code === INVALID_PARAMS && re.test(e.rpcMessage);
    await assert.rejects(sb.runCode("1", { context: "nope" }), invalid(/no context nope/));
    await assert.rejects(sb.restartCodeContext("nope"), invalid(/no context nope/));
    await assert.rejects(sb.removeCodeContext({ id: "nope" }), invalid(/no context nope/));
    await assert.rejects(sb.runCode("1", { language: "cobol" }), invalid(/language/));
    await assert.rejects(sb.runCode("1", { context: "default-python", language: "python" }), invalid(/not both/));
    await assert.rejects(sb.createCodeContext({ cwd: "relative" }), invalid(/absolute/));
    await assert.rejects(sb.runCode("1", { context: 5 }), TypeError);
    await assert.rejects(sb.removeCodeContext(null), TypeError);
    await assert.rejects(sb.runCode("1", { timeoutMs: -1 }), RangeError);
    assert.throws(() => sb.startCode("1", { context: {} }), TypeError);
    // The default context still works after all that.
    assert.equal((await sb.runCode("2 + 2")).text, "4");
  });
});
