// Running commands: foreground runs (`run`, answered with the whole result), their handles, and
// the entry points to background processes (processes.js).

import { Utf8Stream, toBuffer } from "./bytes.js";
import { INTERNAL_ERROR, INVALID_PARAMS, SbxError } from "./errors.js";
import { ProcessHandle, TerminalHandle, findProcess, killProcess, listProcesses, startProcess } from "./processes.js";

/** The outcome of one foreground command. A non-zero exit is a result, not an exception. */
export class CommandResult {
  constructor(r) {
    const out = r.stdoutEncoding === "base64" ? Buffer.from(r.stdout ?? "", "base64") : null;
    const err = r.stderrEncoding === "base64" ? Buffer.from(r.stderr ?? "", "base64") : null;
    this.stdout = out ? out.toString("utf8") : String(r.stdout ?? "");
    this.stderr = err ? err.toString("utf8") : String(r.stderr ?? "");
    this.exitCode = Number.isInteger(r.exitCode) ? r.exitCode : -1;
    this.executionTimeMs = r.executionTimeMs ?? 0;
    this.truncated = r.truncated ?? null;
    this.droppedBytes = r.droppedBytes ?? null;
    this.errorClass = r.errorClass ?? null;
    this.killedProcesses = r.killedProcesses ?? 0;
    this.stateDiscarded = r.stateDiscarded === true;
    this.sessionReset = r.sessionReset === true;
    // Bytes are made on first use: most callers want only the text.
    Object.defineProperty(this, "_raw", { value: { out, err }, enumerable: false });
  }

  /** Standard output exactly as the command wrote it. */
  get stdoutBytes() {
    return (this._raw.out ??= Buffer.from(this.stdout, "utf8"));
  }

  /** Standard error exactly as the command wrote it. */
  get stderrBytes() {
    return (this._raw.err ??= Buffer.from(this.stderr, "utf8"));
  }

  /** True when the command exited 0. */
  get ok() {
    return this.exitCode === 0;
  }
}

/** Turns `output` notifications into onStdout / onStderr calls, whole characters only. */
function outputRouter(onStdout, onStderr) {
  const callbacks = { stdout: onStdout, stderr: onStderr };
  const decoders = { stdout: new Utf8Stream(), stderr: new Utf8Stream() };
  const route = (params) => {
    const cb = callbacks[params.stream];
    if (!cb) return;
    const base64 = params.encoding === "base64";
    const data = base64 ? Buffer.from(params.data ?? "", "base64") : Buffer.from(String(params.data ?? ""), "utf8");
    const text = decoders[params.stream].decode(data, base64 ? undefined : String(params.data ?? ""));
    if (text) cb(text);
  };
  route.flush = () => {
    for (const name of ["stdout", "stderr"]) {
      const text = decoders[name].end();
      if (text && callbacks[name]) callbacks[name](text);
    }
  };
  return route;
}

export function msOption(name, value) {
  if (value === undefined || value === null) return undefined;
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${name} must be a non-negative number of ms`);
  return Math.round(value);
}

function runParams(sandboxId, cmd, opts, stream) {
  const params = { command: cmd };
  if (sandboxId != null) params.sandboxId = sandboxId;
  if (opts.session != null) params.session = opts.session;
  if (opts.cwd != null) params.cwd = opts.cwd;
  if (opts.envs != null) params.env = { ...opts.envs };
  const timeoutMs = msOption("timeoutMs", opts.timeoutMs);
  if (timeoutMs !== undefined) params.timeoutMs = timeoutMs;
  if (opts.stdin != null) params.stdin = toBuffer(opts.stdin).toString("base64");
  if (stream) params.stream = true;
  if (opts.leftovers != null) params.leftovers = opts.leftovers;
  if (opts.whilePaused != null) params.whilePaused = opts.whilePaused;
  if (opts.lane != null) params.lane = opts.lane;
  return params;
}

/**
 * Sends `cancel` for a handle's pending request (handle: {_client, requestId, done()}).
 * Resolves true when the cancel was accepted, false when the request had been answered.
 */
export async function cancelRequest(handle) {
  if (handle.done()) return false;
  try {
    await handle._client.request("cancel", { requestId: handle.requestId });
  } catch (e) {
    // The request's answer precedes the refusal on the wire, so a finished one is done by now.
    if (handle.done() && e instanceof SbxError && e.code === INVALID_PARAMS) return false;
    if (handle.done() && e instanceof SbxError && e.code === INTERNAL_ERROR) return false;
    throw e;
  }
  return true;
}

/** Cancels handle (cancel(), wait()) when signal, an AbortSignal, aborts before it is answered. */
export function cancelOnAbort(signal, handle) {
  if (!signal) return;
  const abort = () => handle.cancel().catch(() => {});
  if (signal.aborted) abort();
  else {
    signal.addEventListener("abort", abort, { once: true });
    handle.wait().finally(() => signal.removeEventListener("abort", abort)).catch(() => {});
  }
}

/** A foreground command sent to the server and perhaps still running: wait() or cancel(). */
export class CommandHandle {
  constructor(client, sandboxId, cmd, opts) {
    if (opts.stdin === true) throw new TypeError("stdin: true (an open stdin) needs background: true");
    if (opts.label != null) throw new TypeError("label applies to background processes only (background: true)");
    const stream = !!(opts.onStdout || opts.onStderr);
    const router = stream ? outputRouter(opts.onStdout, opts.onStderr) : undefined;
    this._client = client;
    this._done = false;
    const { id, promise } = client.call("run", runParams(sandboxId, cmd, opts, stream), { onNotification: router });
    /** The JSON-RPC id of the `run` request (what `cancel` names). */
    this.requestId = id;
    this._result = promise.then(
      (raw) => {
        this._done = true;
        router?.flush();
        if (!raw || typeof raw !== "object") throw new SbxError(INTERNAL_ERROR, `malformed run result: ${JSON.stringify(raw)}`);
        return new CommandResult(raw);
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
   * The result, once the command finished; the callbacks have all been called by then. Rejects
   * with the SbxError the server answered, or with what an output callback threw.
   */
  wait() {
    return this._result;
  }

  /**
   * Asks the server to cancel the command: its result then has exit code 125 and errorClass
   * "CANCELLED". Resolves true when the cancel was accepted, false when it had finished.
   */
  cancel() {
    return cancelRequest(this);
  }
}

/** `sandbox.commands`: runs commands (by default in session "default"). */
export class Commands {
  constructor(client, sandboxId) {
    this._client = client;
    this._sandboxId = sandboxId;
  }

  /**
   * Runs a bash command and resolves with its CommandResult, or with background: true starts
   * it as a background process (process.start) and resolves with its ProcessHandle.
   */
  run(cmd, opts = {}) {
    if (opts.background) {
      if (opts.leftovers != null) return Promise.reject(new TypeError("leftovers applies to foreground runs only"));
      return startProcess(this._client, this._sandboxId, cmd, opts);
    }
    try {
      return new CommandHandle(this._client, this._sandboxId, cmd, opts).wait();
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Starts a foreground command and returns its handle at once (wait(), cancel()). */
  start(cmd, opts = {}) {
    return new CommandHandle(this._client, this._sandboxId, cmd, opts);
  }

  /** The sandbox's background processes (process.list), oldest first. */
  list() {
    return listProcesses(this._client, this._sandboxId);
  }

  /**
   * Kills a background process and all it started, by its pid in the sandbox (or its
   * processId, a string): opts.signal (default TERM), then KILL after opts.graceMs (2000).
   * Resolves true once all is dead, false when no running process has that pid.
   */
  async kill(pid, opts = {}) {
    const info = await findProcess(this._client, this._sandboxId, pid);
    if (!info || info.status !== "running") return false;
    return killProcess(this._client, this._sandboxId, info.processId, opts);
  }

  /**
   * A handle on a background process (running or ended), by pid or processId. Its output is
   * delivered from where this SDK last delivered that process's output, else from the start.
   */
  async connect(pid, opts = {}) {
    const info = await findProcess(this._client, this._sandboxId, pid);
    if (!info) throw new SbxError(INVALID_PARAMS, `no background process with pid ${JSON.stringify(pid)} in this sandbox`);
    const Cls = info.pty ? TerminalHandle : ProcessHandle;
    return new Cls(this._client, this._sandboxId, info.processId, info.pid, { ...opts, resume: true });
  }

  /**
   * Kills everything earlier commands left running and every background process, in one
   * call; running commands and session shells are untouched. Resolves with how many trees.
   */
  async killAll() {
    const params = this._sandboxId != null ? { sandboxId: this._sandboxId } : {};
    const r = await this._client.request("process.killAll", params);
    return r.killed ?? r.groups;
  }
}

/** A named shell session, with its own cwd, variables and history. */
export class Session {
  constructor(client, sandboxId, name) {
    this._client = client;
    this._sandboxId = sandboxId;
    this.name = name;
    this._commands = new Commands(client, sandboxId);
  }

  _params(extra) {
    const params = { session: this.name, ...extra };
    if (this._sandboxId != null) params.sandboxId = this._sandboxId;
    return params;
  }

  /** commands.run in this session. */
  run(cmd, opts = {}) {
    if (opts.session != null && opts.session !== this.name) {
      return Promise.reject(new TypeError(`this is session ${JSON.stringify(this.name)}, not ${JSON.stringify(opts.session)}`));
    }
    return this._commands.run(cmd, { ...opts, session: this.name });
  }

  /** commands.start in this session. */
  start(cmd, opts = {}) {
    return this._commands.start(cmd, { ...opts, session: this.name });
  }

  /** Ends the session; its running command is cancelled. */
  async delete() {
    const params = { name: this.name };
    if (this._sandboxId != null) params.sandboxId = this._sandboxId;
    await this._client.request("session.delete", params);
  }

  /** Commands run in this session: [{index, command, timestamp}], oldest first. */
  async history() {
    return (await this._client.request("shell.history.list", this._params())).entries;
  }

  async clearHistory() {
    await this._client.request("shell.history.clear", this._params());
  }
}
