// Code contexts: Python (IPython) and bash cells whose state carries from cell to cell, with
// E2B code-interpreter's names (runCode, Execution, Result, createCodeContext...).
//
// A cell is one `code.run` request, answered with the whole Execution; with a callback the
// server also sends `code.output` notifications ({requestId, seq, type: stdout|stderr|result|
// error, ...}) as the cell prints and shows results. A cell killed by its timeout or a cancel,
// or whose process dies, leaves its context as it was before the cell: the Execution's error
// says why (TimeoutError, CancelledError, CellDied), it is not an exception.

import { INTERNAL_ERROR, SbxError } from "./errors.js";
import { cancelOnAbort, cancelRequest, msOption } from "./commands.js";

// Result's getters and the mime type each reads.
const FORMATS = {
  text: "text/plain", html: "text/html", markdown: "text/markdown", svg: "image/svg+xml", png: "image/png",
  jpeg: "image/jpeg", pdf: "application/pdf", latex: "text/latex", json: "application/json",
  javascript: "application/javascript",
};
const KNOWN = new Set(Object.values(FORMATS));

function plainObject(v) {
  return v && typeof v === "object" && !Array.isArray(v) ? v : {};
}

/**
 * One result of a cell: its value (isMainResult) or something it displayed, a mime bundle.
 * png, jpeg and pdf are base64 text, as in Jupyter and E2B.
 */
export class Result {
  constructor(raw = {}) {
    /** The mime bundle: {"text/plain": ..., "text/html": ..., ...}. */
    this.data = { ...plainObject(raw.data) };
    /** True for the cell's value (its last expression), false for what it displayed. */
    this.isMainResult = raw.isMainResult === true;
    this.metadata = { ...plainObject(raw.metadata) };
  }

  get text() {
    return this.data[FORMATS.text];
  }

  get html() {
    return this.data[FORMATS.html];
  }

  get markdown() {
    return this.data[FORMATS.markdown];
  }

  get svg() {
    return this.data[FORMATS.svg];
  }

  /** A PNG image (a matplotlib figure), base64. */
  get png() {
    return this.data[FORMATS.png];
  }

  get jpeg() {
    return this.data[FORMATS.jpeg];
  }

  get pdf() {
    return this.data[FORMATS.pdf];
  }

  get latex() {
    return this.data[FORMATS.latex];
  }

  /** application/json: any JSON value, as sent. */
  get json() {
    return this.data[FORMATS.json];
  }

  get javascript() {
    return this.data[FORMATS.javascript];
  }

  /** The mime types of the bundle that have no getter of their own: {mime: value}. */
  get extra() {
    const out = {};
    for (const [mime, v] of Object.entries(this.data)) if (!KNOWN.has(mime)) out[mime] = v;
    return out;
  }

  /** The names of the getters that have a value ("text", "html", "png", ...). */
  formats() {
    return Object.entries(FORMATS).filter(([, mime]) => mime in this.data).map(([name]) => name);
  }
}

/**
 * The cell's exception (traceback as IPython formats it), or why it did not end: TimeoutError,
 * CancelledError, CellDied (the context is then as it was before the cell), ContextReset (a
 * fresh interpreter took over), ExitError (a bash cell's non-zero status).
 */
export class ExecutionError {
  constructor(raw = {}) {
    this.name = String(raw.name ?? "");
    this.value = String(raw.value ?? "");
    this.traceback = String(raw.traceback ?? "");
  }
}

/** The outcome of one cell (code.run). An exception in the cell is `error`, not a rejection. */
export class Execution {
  constructor(r) {
    const logs = plainObject(r.logs);
    /** The cell's value (isMainResult) and what it displayed, in order. */
    this.results = (Array.isArray(r.results) ? r.results : []).map((x) => new Result(plainObject(x)));
    /** What the cell printed and what its processes wrote, in pieces as they came. */
    this.logs = {
      stdout: (Array.isArray(logs.stdout) ? logs.stdout : []).map(String),
      stderr: (Array.isArray(logs.stderr) ? logs.stderr : []).map(String),
    };
    this.error = r.error && typeof r.error === "object" ? new ExecutionError(r.error) : null;
    /** IPython's counter (Cell In [n]); null for a bash context. */
    this.executionCount = Number.isInteger(r.executionCount) ? r.executionCount : null;
    this.contextId = String(r.contextId ?? "");
    this.language = String(r.language ?? "");
    /** 0; 1 for an exception; 124 timeout, 125 cancelled; a bash cell's status. */
    this.exitCode = Number.isInteger(r.exitCode) ? r.exitCode : -1;
    this.executionTimeMs = r.executionTimeMs ?? 0;
    /** "TIMEOUT", "CANCELLED", "OOM", "PIDS_LIMIT", "LIMIT_EXCEEDED", ... or null. */
    this.errorClass = r.errorClass ?? null;
    /** What the context could not keep (threads of earlier cells). */
    this.warnings = Array.isArray(r.warnings) ? r.warnings.map(String) : [];
    /** True when the interpreter itself died and a fresh one (no variables) took over. */
    this.contextReset = r.contextReset === true;
    /** Bytes of output and results left out of this answer (over the server's cap). */
    this.droppedBytes = Number.isInteger(r.droppedBytes) ? r.droppedBytes : 0;
    /** Processes of the cell a timeout, cancel or process limit killed. */
    this.killedProcesses = Number.isInteger(r.killedProcesses) ? r.killedProcesses : 0;
  }

  /** The text/plain of the main result (the cell's value), or undefined. */
  get text() {
    return this.results.find((r) => r.isMainResult)?.text;
  }
}

/** A code context: a Python interpreter or a bash session whose state its cells keep. */
export class CodeContext {
  constructor(raw) {
    this.id = String(raw.id);
    this.language = String(raw.language ?? "");
    this.cwd = String(raw.cwd ?? "");
  }
}

/** The id of a context given as a CodeContext (any object with an id) or as its id. */
export function contextId(ctx) {
  if (typeof ctx === "string") return ctx;
  if (ctx && typeof ctx === "object" && typeof ctx.id === "string") return ctx.id;
  throw new TypeError("a code context is a context object (with an id) or its id, a string");
}

function laneOpts(params, opts) {
  if (opts.whilePaused != null) params.whilePaused = opts.whilePaused;
  if (opts.lane != null) params.lane = opts.lane;
  return params;
}

function runParams(sandboxId, code, opts, stream) {
  const params = { code };
  if (sandboxId != null) params.sandboxId = sandboxId;
  if (opts.context != null) params.contextId = contextId(opts.context);
  if (opts.language != null) params.language = opts.language;
  const timeoutMs = msOption("timeoutMs", opts.timeoutMs);
  if (timeoutMs !== undefined) params.timeoutMs = timeoutMs;
  if (opts.envs != null) params.env = { ...opts.envs };
  if (stream) params.stream = true;
  return laneOpts(params, opts);
}

/** Turns `code.output` notifications into the caller's callbacks. */
function outputRouter(opts) {
  return (params) => {
    switch (params.type) {
      case "stdout":
        opts.onStdout?.(String(params.text ?? ""));
        break;
      case "stderr":
        opts.onStderr?.(String(params.text ?? ""));
        break;
      case "result":
        opts.onResult?.(new Result(params));
        break;
      case "error":
        opts.onError?.(new ExecutionError(params));
        break;
    }
  };
}

/** A cell sent to the server and perhaps still running: wait() or cancel(). */
export class CodeHandle {
  constructor(client, sandboxId, code, opts = {}) {
    const stream = !!(opts.onStdout || opts.onStderr || opts.onResult || opts.onError);
    this._client = client;
    this._done = false;
    const { id, promise } = client.call("code.run", runParams(sandboxId, code, opts, stream),
      { onNotification: stream ? outputRouter(opts) : undefined });
    /** The JSON-RPC id of the `code.run` request (what `cancel` names). */
    this.requestId = id;
    this._result = promise.then(
      (raw) => {
        this._done = true;
        if (!raw || typeof raw !== "object") throw new SbxError(INTERNAL_ERROR, `malformed code.run result: ${JSON.stringify(raw)}`);
        return new Execution(raw);
      },
      (e) => {
        this._done = true;
        throw e;
      });
    // Whoever awaits wait() gets the error; an abandoned handle must not crash the process.
    this._result.catch(() => {});
    cancelOnAbort(opts.signal, this);
  }

  /** True once the server answered. */
  done() {
    return this._done;
  }

  /**
   * The Execution, once the cell ended; the callbacks have all been called by then. Rejects
   * with the SbxError the server answered (an unknown context...) or what a callback threw.
   */
  wait() {
    return this._result;
  }

  /**
   * Asks the server to cancel the cell (running or queued): its Execution then has error
   * CancelledError, errorClass "CANCELLED", and the context is as it was before the cell.
   * Resolves true when the cancel was accepted, false when the cell had finished.
   */
  cancel() {
    return cancelRequest(this);
  }
}

/** context.create params. */
export function contextParams(sandboxId, opts = {}) {
  const params = {};
  if (sandboxId != null) params.sandboxId = sandboxId;
  if (opts.language != null) params.language = opts.language;
  if (opts.cwd != null) params.cwd = opts.cwd;
  if (opts.envs != null) params.env = { ...opts.envs };
  return laneOpts(params, opts);
}

export async function createContext(client, sandboxId, opts = {}) {
  return new CodeContext(await client.request("context.create", contextParams(sandboxId, opts)));
}

export async function listContexts(client, sandboxId) {
  const r = await client.request("context.list", sandboxId != null ? { sandboxId } : {});
  return (r?.contexts ?? []).map((c) => new CodeContext(c));
}

export async function restartContext(client, sandboxId, ctx, opts = {}) {
  const params = { contextId: contextId(ctx) };
  if (sandboxId != null) params.sandboxId = sandboxId;
  return new CodeContext(await client.request("context.restart", laneOpts(params, opts)));
}

export async function removeContext(client, sandboxId, ctx) {
  const params = { contextId: contextId(ctx) };
  if (sandboxId != null) params.sandboxId = sandboxId;
  await client.request("context.destroy", params);
}
