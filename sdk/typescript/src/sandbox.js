// The Sandbox handle and its per-sandbox namespaces (commands, files, sessions, env, sandboxes,
// pty, images). A Sandbox is (connection, sandbox id); fork() and sandboxes.create() give more
// handles on the same connection.

import { toBuffer } from "./bytes.js";
import { Client } from "./client.js";
import { CodeHandle, createContext, listContexts, removeContext, restartContext } from "./code.js";
import { Commands, Session, msOption } from "./commands.js";
import { INVALID_PARAMS, SbxError } from "./errors.js";
import { Files } from "./files.js";
import { Images } from "./images.js";
import { Pty } from "./processes.js";

/** The create / sandbox.create params for these options. */
function sandboxParams(opts) {
  const params = {};
  const timeoutMs = msOption("timeoutMs", opts.timeoutMs);
  if (timeoutMs !== undefined) params.timeoutMs = timeoutMs;
  if (opts.fsLimitBytes != null) params.fsLimitBytes = opts.fsLimitBytes;
  if (opts.limits != null) params.limits = { ...opts.limits };
  if (opts.envs != null) params.env = { ...opts.envs };
  if (opts.network) params.network = true;
  if (opts.leftovers != null) params.leftovers = opts.leftovers;
  if (opts.policy != null) params.policy = { ...opts.policy };
  if (opts.image != null) params.image = String(opts.image);
  lifecycleParams(opts, params);
  return params;
}

/** What create / sandbox.create take about a sandbox's life and identity, added to params. */
function lifecycleParams(opts, params) {
  const lifetimeMs = msOption("lifetimeMs", opts.lifetimeMs);
  if (lifetimeMs !== undefined) params.lifetimeMs = lifetimeMs;
  const idleTimeoutMs = msOption("idleTimeoutMs", opts.idleTimeoutMs);
  if (idleTimeoutMs !== undefined) params.idleTimeoutMs = idleTimeoutMs;
  if (opts.metadata != null) params.metadata = { ...opts.metadata };
  if (opts.secrets != null) params.secrets = { ...opts.secrets };
}

/** The `lane` param of a method that sets a worker going, from an options object. */
function laneParams(opts) {
  return opts?.lane != null ? { lane: opts.lane } : {};
}

export class Sandbox {
  /** Use Sandbox.create, Sandbox.connect, fork() or sandboxes.create(). */
  constructor(client, sandboxId, { root = false, ownsServer = false } = {}) {
    this._client = client;
    this._root = root;
    this._ownsServer = ownsServer;
    this._killed = false;
    /** The sandbox's id (32 hex digits). */
    this.sandboxId = sandboxId;
    this.commands = new Commands(client, sandboxId);
    this.files = new Files(client, sandboxId);
    this.sessions = new Sessions(client, sandboxId);
    this.env = new Env(client, sandboxId);
    this.sandboxes = new Sandboxes(client);
    this.pty = new Pty(client, sandboxId);
    /** The daemon's image store: importImage, list, inspect, remove. */
    this.images = new Images(client);
  }

  /**
   * Spawns a private `sbx serve --stdio` (the binary: opts.binary, $SBX_BIN, sbx on $PATH,
   * the repository's build/src/cli/sbx) and creates the sandbox. kill() shuts that server down.
   */
  static async create(opts = {}) {
    const params = sandboxParams(opts);
    const client = Client.spawn(opts.binary, opts.serverArgs);
    try {
      const r = await client.request("create", params);
      return new this(client, String(r.sandboxId), { root: true, ownsServer: true })._watch(opts);
    } catch (e) {
      await client.close(1000);
      throw e;
    }
  }

  /**
   * Connects to `sbx serve --socket socketPath` and creates this connection's root sandbox
   * there (options as for create). kill() closes the connection, which destroys the sandboxes
   * it made (not persistent ones); the server keeps running.
   */
  static async connect(socketPath, opts = {}) {
    const params = sandboxParams(opts);
    const client = await Client.connect(socketPath);
    try {
      const r = await client.request("create", params);
      return new this(client, String(r.sandboxId), { root: true })._watch(opts);
    } catch (e) {
      await client.close();
      throw e;
    }
  }

  /** Registers opts.onExpired, the creating call's hook; returns this. */
  _watch(opts) {
    if (opts.onExpired != null) this.onExpired(opts.onExpired);
    return this;
  }

  /** True for the connection's root sandbox (made by create or connect). */
  get isRoot() {
    return this._root;
  }

  /** The JSON-RPC connection this sandbox is reached through. */
  get client() {
    return this._client;
  }

  _params(extra) {
    const params = { sandboxId: this.sandboxId };
    for (const [k, v] of Object.entries(extra ?? {})) if (v !== undefined && v !== null) params[k] = v;
    return params;
  }

  _request(method, extra) {
    return this._client.request(method, this._params(extra));
  }

  // ------------------------------------------------------------ code contexts

  /**
   * Runs a cell in a code context and resolves with its Execution (E2B code-interpreter's
   * runCode). Without opts.context, the default context of opts.language ("python", the
   * default, or "bash"), made on first use. Python cells have IPython's semantics: the last
   * expression is the main result (execution.text), display() adds results, a matplotlib
   * figure comes as result.png (base64), a DataFrame as result.html. An exception in the cell
   * is execution.error, not a rejection. A cell killed by opts.timeoutMs (default the
   * sandbox's) or cancelled (opts.signal), or whose process dies, leaves the context as it was
   * before the cell. onStdout / onStderr (text), onResult (a Result) and onError (an
   * ExecutionError) are called as the cell goes. Rejects with SbxError for bad input (an
   * unknown context: -32602).
   */
  runCode(code, opts = {}) {
    try {
      return new CodeHandle(this._client, this.sandboxId, code, opts).wait();
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** As runCode, without waiting: the handle's wait() gives the Execution, cancel() stops it. */
  startCode(code, opts = {}) {
    return new CodeHandle(this._client, this.sandboxId, code, opts);
  }

  /**
   * A new code context, its interpreter started: opts.language "python" (default) or "bash",
   * opts.cwd (default /home/user), opts.envs kept for all its cells. Not carried by fork,
   * snapshots or export.
   */
  createCodeContext(opts = {}) {
    return createContext(this._client, this.sandboxId, opts);
  }

  /** The sandbox's code contexts, the default ones (default-python, default-bash) once used. */
  listCodeContexts() {
    return listContexts(this._client, this.sandboxId);
  }

  /**
   * A fresh interpreter for a context (a CodeContext or its id), with its cwd and envs as
   * created: every variable is gone; its running and queued cells end as cancelled.
   */
  restartCodeContext(context, opts = {}) {
    return restartContext(this._client, this.sandboxId, context, opts);
  }

  /** Ends a context (a CodeContext or its id): its cells end as cancelled. */
  removeCodeContext(context) {
    return removeContext(this._client, this.sandboxId, context);
  }

  // ------------------------------------------------------------ history, server

  /** Commands run in a session (default "default"): [{index, command, timestamp}]. */
  async history(session) {
    return (await this._request("shell.history.list", { session })).entries;
  }

  async clearHistory(session) {
    await this._request("shell.history.clear", { session });
  }

  /** Server statistics. */
  health() {
    return this._client.request("health");
  }

  /**
   * "127.0.0.1:N": an address on the host that reaches TCP `port` inside the sandbox
   * (port.expose: the daemon forwards each connection into the sandbox's network namespace).
   * Asking again for the same port gives the same address; it lives as long as the sandbox.
   */
  async getHost(port) {
    try {
      const r = await this._request("port.expose", { port });
      return `${r.host}:${r.port}`;
    } catch (e) {
      if (!(e instanceof SbxError) || e.code !== -32602) throw e;
      // Already exposed (E2B's getHost may be called any number of times): its mapping.
      const { ports } = await this._request("port.list", {});
      const hit = ports.find((p) => p.port === port);
      if (!hit) throw e;
      return `${hit.host}:${hit.hostPort}`;
    }
  }

  /** True when the server answers; false when the connection is gone. */
  async ping() {
    try {
      return (await this._client.request("ping"))?.pong === true;
    } catch (e) {
      if (this._client.closed) return false;
      throw e;
    }
  }

  // ------------------------------------------------------------ life: pause, expiry, info

  /**
   * Freezes every process of the sandbox in place (sandbox.pause: the cgroup freezer; memory
   * kept, no CPU), resolved once frozen. Commands sent meanwhile wait for resume() (or fail at
   * once with whilePaused: "refuse"); fork, snapshots, export and import are refused. A
   * running command's timeout keeps counting.
   */
  async pause() {
    await this._request("sandbox.pause");
  }

  /** Lets a paused sandbox go on exactly where it was (sandbox.resume); waiting commands start. */
  async resume() {
    await this._request("sandbox.resume");
  }

  /**
   * E2B's getMetrics: what the sandbox used over time (sandbox.metrics), a sample every 5 s for
   * the last hour, oldest first, each {timestamp (a Date), cpuUsedPct, cpuCount, memUsed,
   * memTotal, diskUsed, diskTotal, diskFiles, pids, netBytes, runs, cpuUsec}; start and end (Dates
   * or ms since the epoch) keep those in between.
   */
  async getMetrics({ start, end } = {}) {
    const ms = (name, v) => {
      if (v === undefined || v === null) return undefined;
      const n = v instanceof Date ? v.getTime() : v;
      if (typeof n !== "number" || !Number.isFinite(n) || n < 0) throw new TypeError(`${name}: a Date or ms since the epoch`);
      return Math.floor(n);
    };
    const params = {};
    if (ms("start", start) !== undefined) params.start = ms("start", start);
    if (ms("end", end) !== undefined) params.end = ms("end", end);
    const r = await this._request("sandbox.metrics", params);
    return r.samples.map((s) => ({
      timestamp: new Date(s.timestamp), cpuUsedPct: s.cpuUsedPct, cpuCount: r.cpuCount, memUsed: s.memoryBytes,
      memTotal: r.memoryLimitBytes, diskUsed: s.fsBytes, diskTotal: r.fsLimitBytes, diskFiles: s.fsFiles,
      pids: s.pids, netBytes: s.netBytes, runs: s.runs, cpuUsec: s.cpuUsec,
    }));
  }

  /**
   * E2B's setTimeout: the sandbox is destroyed timeoutMs from now (0: never), unless set again
   * (sandbox.setTimeout). Its idleTimeoutMs stays. Not a command timeout.
   */
  async setTimeout(timeoutMs) {
    const ms = msOption("timeoutMs", timeoutMs);
    if (ms === undefined) throw new TypeError("setTimeout needs a number of ms (0: never)");
    await this._request("sandbox.setTimeout", { lifetimeMs: ms });
  }

  /**
   * Calls handler(reason) once the server destroyed this sandbox because it expired: reason
   * "lifetime" (lifetimeMs, setTimeout) or "idle" (idleTimeoutMs). Returns a function that
   * unsubscribes. Only the connection that owns the sandbox is told.
   */
  onExpired(handler) {
    return this._client.onExpired(this.sandboxId, handler);
  }

  /** "lifetime" or "idle" once this connection was told the sandbox expired, else null. */
  get expired() {
    return this._client.expiredReason(this.sandboxId);
  }

  /**
   * This sandbox as sandbox.list shows it: {sandboxId, label?, metadata, paused, createdAt,
   * persist, root}. Rejects with SbxError -32602 when it is gone (destroyed or expired).
   */
  async getInfo() {
    const { sandboxes } = await this._client.request("sandbox.list");
    const info = sandboxes.find((s) => s.sandboxId === this.sandboxId);
    if (!info) {
      const why = this.expired ? ` (it expired: ${this.expired})` : "";
      throw new SbxError(INVALID_PARAMS, `Unknown sandboxId: ${this.sandboxId}${why}`);
    }
    return info;
  }

  // ------------------------------------------------------------ fork, snapshots, export

  /**
   * A new sandbox with a copy of this one's files, every session's state, its limits and
   * options, on the same connection (background processes are not copied). End it with
   * kill().
   */
  async fork(opts = {}) {
    const r = await this._request("sandbox.fork", laneParams(opts));
    return new Sandbox(this._client, String(r.sandboxId));
  }

  /** Saves the files and session states; resolves with the snapshot id. */
  async snapshot(opts = {}) {
    return String((await this._request("snapshot.create", laneParams(opts))).id);
  }

  /** Brings back a snapshot's files and session states; background processes are killed. */
  async restore(snapshotId, opts = {}) {
    await this._request("snapshot.restore", { id: snapshotId, ...laneParams(opts) });
  }

  /** [{id, createdAt, bytes}], oldest first. */
  async listSnapshots() {
    return (await this._request("snapshot.list")).snapshots;
  }

  async deleteSnapshot(snapshotId) {
    await this._request("snapshot.delete", { id: snapshotId });
  }

  /** The sandbox as a zstd-compressed tar (files, session states, limits, digest). */
  async exportState(opts = {}) {
    return Buffer.from((await this._request("persistence.export", laneParams(opts))).data, "base64");
  }

  /** Replaces files and session states with an exported archive's; a refused one changes nothing. */
  async importState(blob, opts = {}) {
    await this._request("persistence.import", { data: toBuffer(blob).toString("base64"), ...laneParams(opts) });
  }

  // ------------------------------------------------------------ ending

  /**
   * Ends the sandbox; idempotent. A spawned server (create) is told to shut down and waited
   * for; a socket connection (connect) is closed, which destroys the sandboxes it made; a fork
   * or a sandboxes.create() one is destroyed (sandbox.destroy), the connection staying open.
   */
  async kill() {
    if (this._killed) return;
    if (!this._root) {
      try {
        await this._client.request("sandbox.destroy", { sandboxId: this.sandboxId });
      } catch (e) {
        if (!(e instanceof SbxError) || !this._client.closed) throw e;
      }
      this._killed = true;
      return;
    }
    this._killed = true;
    if (this._ownsServer) {
      // Not waited for: pending runs still get their answers until the server closes stdout.
      this._client.request("kill").catch(() => {});
    }
    await this._client.close();
  }

  /** Alias of kill() (the Python SDK's name for a fork's end). */
  destroy() {
    return this.kill();
  }

  /** Alias of kill(). */
  close() {
    return this.kill();
  }
}

/** `sandbox.sessions`: named sessions, each with its own shell state and history. */
export class Sessions {
  constructor(client, sandboxId) {
    this._client = client;
    this._sandboxId = sandboxId;
  }

  /** Creates a session (name: 1-64 of [A-Za-z0-9_.-]); -32602 when it exists or is invalid. */
  async create(name) {
    const r = await this._client.request("session.create", { sandboxId: this._sandboxId, name });
    return new Session(this._client, this._sandboxId, String(r.name ?? name));
  }

  /** A handle on a session by name, without asking the server (runs create it on first use). */
  get(name) {
    return new Session(this._client, this._sandboxId, name);
  }

  /** The names of the sandbox's sessions. */
  async list() {
    return (await this._client.request("session.list", { sandboxId: this._sandboxId })).sessions.map((s) => s.name);
  }

  /** Ends a session; its running command is cancelled. */
  async delete(name) {
    await this._client.request("session.delete", { sandboxId: this._sandboxId, name });
  }
}

/** `sandbox.env`: variables exported in a session's shell (they persist). */
export class Env {
  constructor(client, sandboxId) {
    this._client = client;
    this._sandboxId = sandboxId;
  }

  _params(name, session, extra) {
    const params = { sandboxId: this._sandboxId, name, ...extra };
    if (session != null) params.session = session;
    return params;
  }

  /** Exports name=value in a session (default "default"). */
  async set(name, value, session) {
    await this._client.request("env.set", this._params(name, session, { value }));
  }

  /** The value of an exported variable, or null when unset. */
  async get(name, session) {
    return (await this._client.request("env.get", this._params(name, session))).value ?? null;
  }
}

/** `sandbox.sandboxes`: more sandboxes on the same connection. */
export class Sandboxes {
  constructor(client) {
    this._client = client;
  }

  /**
   * Creates another sandbox (sandbox.create): it lives until its kill(), or until this
   * connection closes unless opts.persist (socket servers only). opts.label is shown by list().
   */
  async create(opts = {}) {
    const params = sandboxParams(opts);
    if (opts.label != null) params.label = opts.label;
    if (opts.persist) params.persist = true;
    const r = await this._client.request("sandbox.create", params);
    return new Sandbox(this._client, String(r.sandboxId))._watch(opts);
  }

  /** A handle on an existing sandbox this connection may use, without asking the server. */
  get(sandboxId) {
    return new Sandbox(this._client, sandboxId);
  }

  /**
   * [{sandboxId, label?, metadata, paused, createdAt, persist, root}]: the sandboxes this
   * connection may use; with opts.metadata only those whose metadata has every one of its
   * {key: value} pairs.
   */
  async list(opts = {}) {
    const params = opts.metadata != null ? { metadata: { ...opts.metadata } } : undefined;
    return (await this._client.request("sandbox.list", params)).sandboxes;
  }
}
