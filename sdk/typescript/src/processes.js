// Background processes and terminals: commands.run(cmd, {background: true}), commands.list,
// kill and connect, and sandbox.pty.
//
// A handle asks for the process's output with process.stream from a cursor, a byte offset into
// the process's log (stdout and stderr interleaved as they came). The daemon answers with
// process.output notifications, one process.exit once the process ended, then the stream's
// answer. The SDK remembers, per (sandbox, process), the cursor after the last chunk it handed
// to a callback, so that commands.connect(pid) on a new connection resumes exactly there.

import { Utf8Stream, toBuffer } from "./bytes.js";
import { INVALID_PARAMS, SbxError } from "./errors.js";

const DEFAULT_TERM = "xterm-256color";
const DEFAULT_WAIT_MS = 60000;

// ------------------------------------------------------------------ what this SDK delivered

// Processes remembered; past this many the oldest are forgotten (a forgotten process is read
// from the start of what the daemon still holds).
const PROGRESS_MAX = 4096;
const progress = new Map(); // "sandboxId\0processId" -> {cursor, pending: {stdout, stderr}}

function progressKey(sandboxId, processId) {
  return `${sandboxId ?? ""}\0${processId}`;
}

function remember(sandboxId, processId, cursor, decoders) {
  const key = progressKey(sandboxId, processId);
  const p = progress.get(key);
  // Two live handles on one process may report out of order: the cursor never goes back.
  if (p && cursor < p.cursor) return;
  progress.delete(key);
  progress.set(key, { cursor, pending: { stdout: decoders.stdout.pending, stderr: decoders.stderr.pending } });
  if (progress.size > PROGRESS_MAX) progress.delete(progress.keys().next().value);
}

// ------------------------------------------------------------------ handles

/**
 * A background process: from commands.run(cmd, {background: true}) or commands.connect(pid).
 * It receives the process's output from its start (or from where this SDK left off) until the
 * process ends, and keeps it in memory for wait() and iteration.
 */
export class ProcessHandle {
  constructor(client, sandboxId, processId, pid, opts = {}) {
    this._client = client;
    this._sandboxId = sandboxId;
    /** The daemon's id of the process ("p12"). */
    this.processId = processId;
    /** The process's pid inside the sandbox. */
    this.pid = pid;
    this._callbacks = { stdout: opts.onStdout, stderr: opts.onStderr };
    this._onData = opts.onData;
    let cursor = 0;
    let pending = {};
    if (opts.resume) {
      const p = progress.get(progressKey(sandboxId, processId));
      if (p) ({ cursor, pending } = p);
    }
    this._decoders = { stdout: new Utf8Stream(pending.stdout), stderr: new Utf8Stream(pending.stderr) };
    this._startCursor = cursor;
    this._cursor = cursor;
    this._dropped = 0;
    this._chunks = [];
    this._exit = null;
    this._finished = false;
    this._error = null; // the connection's, or the first a callback threw
    this._wake = [];
    this._result = null;
    const params = { processId, cursor };
    if (sandboxId != null) params.sandboxId = sandboxId;
    this._unsubscribe = client.subscribe(processId, (method, p) => this._notified(method, p));
    // Weak: a process may run for ever; only wait() and iteration keep the event loop alive.
    this._stream = client.call("process.stream", params, { weak: true }).promise.then(
      (r) => this._finish(r, null), (e) => this._finish(null, e));
  }

  /** The log offset after the last byte this handle received. */
  get cursor() {
    return this._cursor;
  }

  /** Bytes the daemon's bounded log (1 MiB per process) lost before this handle got them. */
  get droppedBytes() {
    return this._dropped;
  }

  /** The exit code once the process ended (as seen by this handle), else undefined. */
  get exitCode() {
    return this._exit?.exitCode ?? undefined;
  }

  /** Standard output received so far, as text. */
  get stdout() {
    return this._text("stdout");
  }

  /** Standard error received so far, as text. */
  get stderr() {
    return this._text("stderr");
  }

  _text(name) {
    let s = "";
    for (const c of this._chunks) if (c.stream === name) s += c.text;
    return s;
  }

  /** True once the output stream ended: the process ended and all of its output is in. */
  done() {
    return this._finished;
  }

  _notify() {
    const wake = this._wake;
    this._wake = [];
    for (const w of wake) w();
  }

  _notified(method, params) {
    if (method === "process.exit") {
      this._exit = params;
      return;
    }
    if (method === "close") {
      return; // the stream's promise fails with the connection's error
    }
    if (method !== "process.output" || !(params.stream in this._decoders)) return;
    const name = params.stream;
    const base64 = params.dataEncoding === "base64" || params.encoding === "base64";
    let data = base64 ? Buffer.from(params.data ?? "", "base64") : Buffer.from(String(params.data ?? ""), "utf8");
    let str = base64 ? undefined : String(params.data ?? "");
    const dropped = params.dropped;
    if (Number.isInteger(dropped) && dropped > 0) {
      // The log no longer holds [cursor, cursor + dropped): what is left starts there.
      this._dropped += dropped;
      this._cursor += dropped;
    }
    const end = params.cursor;
    if (Number.isInteger(end)) {
      const start = end - data.length;
      if (end <= this._cursor) return; // delivered already (a second stream of the same process)
      if (start < this._cursor) {
        data = data.subarray(this._cursor - start);
        str = undefined;
      } else if (start > this._cursor) {
        this._dropped += start - this._cursor;
      }
      this._cursor = end;
    } else {
      this._cursor += data.length;
    }
    if (!data.length) return;
    const text = this._decoders[name].decode(data, str);
    this._chunks.push({ stream: name, data, text, cursor: this._cursor });
    this._notify();
    if (this._error) return;
    try {
      this._onData?.(data);
      const cb = this._callbacks[name];
      if (cb && text) cb(text);
    } catch (e) {
      // Handed to wait(); what a failed callback got is not counted as delivered.
      this._error = e;
      return;
    }
    remember(this._sandboxId, this.processId, this._cursor, this._decoders);
  }

  _finish(result, error) {
    this._unsubscribe();
    if (result && typeof result === "object") {
      if (!this._exit) this._exit = result;
      if (Number.isInteger(result.cursor) && result.cursor > this._cursor) this._cursor = result.cursor;
      // The process is over: an incomplete character at the end is never completed.
      for (const name of ["stdout", "stderr"]) {
        const text = this._decoders[name].end();
        if (!text) continue;
        this._chunks.push({ stream: name, data: Buffer.alloc(0), text, cursor: this._cursor });
        if (!this._error) {
          try {
            this._callbacks[name]?.(text);
          } catch (e) {
            this._error = e;
          }
        }
      }
      if (!this._error) remember(this._sandboxId, this.processId, this._cursor, this._decoders);
    } else if (!this._error) {
      this._error = error ?? new SbxError(-32603, `malformed process.stream result: ${JSON.stringify(result)}`);
    }
    this._finished = true;
    this._notify();
  }

  /**
   * Waits for the process to end and for all its output; resolves with a ProcessResult. A
   * non-zero exit is a result. Rejects when the connection went away, or with what a callback
   * threw.
   */
  async wait() {
    if (this._result) return this._result;
    const release = this._client.hold();
    try {
      await this._stream;
    } finally {
      release();
    }
    if (this._error) throw this._error;
    const ex = this._exit ?? {};
    const join = (name) => Buffer.concat(this._chunks.filter((c) => c.stream === name).map((c) => c.data));
    const out = join("stdout");
    const err = join("stderr");
    this._result = {
      exitCode: Number.isInteger(ex.exitCode) ? ex.exitCode : -1,
      status: ex.status ?? "exited",
      signal: ex.signal ?? null,
      stdout: out.toString("utf8"),
      stderr: err.toString("utf8"),
      stdoutBytes: out,
      stderrBytes: err,
      droppedBytes: this._dropped,
      cursor: this._cursor,
    };
    return this._result;
  }

  /** The output chunks {stream, data, text, cursor}, from this handle's first, until it ended. */
  async *[Symbol.asyncIterator]() {
    const release = this._client.hold();
    try {
      let i = 0;
      for (;;) {
        if (i < this._chunks.length) {
          yield this._chunks[i++];
          continue;
        }
        if (this._finished) break;
        await new Promise((r) => this._wake.push(r));
      }
      if (this._error) throw this._error;
    } finally {
      release();
    }
  }

  _params(extra) {
    const params = { processId: this.processId };
    if (this._sandboxId != null) params.sandboxId = this._sandboxId;
    for (const [k, v] of Object.entries(extra ?? {})) if (v !== undefined && v !== null) params[k] = v;
    return params;
  }

  /**
   * Resolves with the first line of stdout or stderr (also one written before) matching
   * `pattern`, a POSIX extended regex. Rejects with ProcessEndedError (-32010) when the
   * process ends first, WaitTimeoutError (-32011) after opts.timeoutMs (default 60000).
   */
  async waitForLog(pattern, opts = {}) {
    const source = pattern instanceof RegExp ? pattern.source : String(pattern);
    const r = await this._client.request("process.wait",
      this._params({ until: "log", pattern: source, timeoutMs: opts.timeoutMs ?? DEFAULT_WAIT_MS }));
    return String(r.line ?? "");
  }

  /** Resolves once something in the sandbox accepts TCP connections on `port`. */
  async waitForPort(port, opts = {}) {
    await this._client.request("process.wait",
      this._params({ until: "port", port, timeoutMs: opts.timeoutMs ?? DEFAULT_WAIT_MS }));
  }

  /**
   * Kills the process and all it started: opts.signal (default TERM), then KILL after
   * opts.graceMs (default 2000). Resolves true once all is dead, false when it had ended.
   */
  kill(opts = {}) {
    return killProcess(this._client, this._sandboxId, this.processId, opts);
  }

  /** Writes to the process's stdin (text as UTF-8); it must have been started with stdin: true. */
  async sendStdin(data) {
    await this._client.request("process.write", this._params({ data: toBuffer(data).toString("base64") }));
  }

  /** Closes the process's stdin (it reads end of file once what was sent is read). */
  async closeStdin() {
    await this._client.request("process.closeStdin", this._params());
  }
}

/** An interactive program on a terminal of the sandbox's own, from sandbox.pty.create(). */
export class TerminalHandle extends ProcessHandle {
  /** Types into the terminal: "\x03" is Ctrl-C, "\x04" on an empty line ends the shell. */
  sendInput(data) {
    return this.sendStdin(data);
  }

  /** The terminal's new size (the program gets SIGWINCH). */
  async resize(size) {
    await this._client.request("process.resize", this._params({ cols: size.cols, rows: size.rows }));
  }
}

export async function killProcess(client, sandboxId, processId, opts = {}) {
  const params = { processId };
  if (sandboxId != null) params.sandboxId = sandboxId;
  if (opts.signal != null) params.signal = opts.signal;
  if (opts.graceMs != null) params.graceMs = opts.graceMs;
  try {
    await client.request("process.kill", params);
  } catch (e) {
    if (!(e instanceof SbxError) || e.code !== INVALID_PARAMS) throw e;
    // The same code names an unknown process: only an ended one is "not killed".
    const info = await findProcess(client, sandboxId, processId);
    if (!info || info.status === "running") throw e;
    return false;
  }
  return true;
}

// ------------------------------------------------------------------ starting, finding

export async function startProcess(client, sandboxId, cmd, opts = {}) {
  const params = { command: cmd };
  if (sandboxId != null) params.sandboxId = sandboxId;
  if (opts.session != null) params.session = opts.session;
  if (opts.cwd != null) params.cwd = opts.cwd;
  if (opts.envs != null) params.env = { ...opts.envs };
  if (opts.timeoutMs != null) params.timeoutMs = opts.timeoutMs;
  if (opts.label != null) params.label = opts.label;
  const data = opts.stdin != null && opts.stdin !== false && opts.stdin !== true ? toBuffer(opts.stdin) : null;
  if (opts.stdin === true || data) params.stdin = true;
  if (opts.pty) params.pty = { cols: opts.pty.cols, rows: opts.pty.rows };
  if (opts.whilePaused != null) params.whilePaused = opts.whilePaused;
  if (opts.lane != null) params.lane = opts.lane;
  const r = await client.request("process.start", params);
  const Cls = opts.pty ? TerminalHandle : ProcessHandle;
  const handle = new Cls(client, sandboxId, String(r.processId), r.pid, opts);
  if (data) {
    if (data.length) await handle.sendStdin(data);
    await handle.closeStdin();
  }
  return handle;
}

/** process.list: every process of the sandbox, oldest first. */
export async function listProcesses(client, sandboxId) {
  const r = await client.request("process.list", sandboxId != null ? { sandboxId } : {});
  return r.processes;
}

/**
 * The process with this in-sandbox pid (a number) or processId (a string): a running one if
 * any (pids are reused once a process ended), else the newest.
 */
export async function findProcess(client, sandboxId, which) {
  const found = (await listProcesses(client, sandboxId))
    .filter((p) => (typeof which === "number" ? p.pid === which : p.processId === which));
  return found.filter((p) => p.status === "running").pop() ?? found.pop();
}

/** `sandbox.pty`: interactive shells on terminals. */
export class Pty {
  constructor(client, sandboxId) {
    this._client = client;
    this._sandboxId = sandboxId;
  }

  /**
   * Starts an interactive bash (or opts.command) on a cols x rows terminal; its output reaches
   * opts.onData as bytes. TERM defaults to xterm-256color.
   */
  create(opts = {}) {
    const envs = { TERM: DEFAULT_TERM, ...(opts.envs ?? {}) };
    return startProcess(this._client, this._sandboxId, opts.command ?? "exec bash -i", {
      cwd: opts.cwd, envs, timeoutMs: opts.timeoutMs, stdin: true, onData: opts.onData, lane: opts.lane,
      whilePaused: opts.whilePaused,
      pty: { cols: opts.cols ?? 80, rows: opts.rows ?? 24 },
    });
  }

  async _id(pid) {
    const info = await findProcess(this._client, this._sandboxId, pid);
    if (!info) throw new SbxError(INVALID_PARAMS, `no terminal with pid ${JSON.stringify(pid)} in this sandbox`);
    return info.processId;
  }

  /** Types into the terminal of pid. */
  async sendInput(pid, data) {
    const params = { processId: await this._id(pid), data: toBuffer(data).toString("base64") };
    if (this._sandboxId != null) params.sandboxId = this._sandboxId;
    await this._client.request("process.write", params);
  }

  /** Resizes the terminal of pid. */
  async resize(pid, size) {
    const params = { processId: await this._id(pid), cols: size.cols, rows: size.rows };
    if (this._sandboxId != null) params.sandboxId = this._sandboxId;
    await this._client.request("process.resize", params);
  }

  /** Kills the terminal of pid and all in it; false when it had ended. */
  async kill(pid) {
    return killProcess(this._client, this._sandboxId, await this._id(pid), {});
  }
}
