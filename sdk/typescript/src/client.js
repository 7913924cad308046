// The JSON-RPC transport: one connection to an `sbx serve` daemon, either a spawned
// `sbx serve --stdio` or a Unix socket to `sbx serve --socket PATH`.
//
// Requests are newline-delimited JSON-RPC 2.0 lines with integer ids from a counter. Answers
// may come out of order; each goes to the promise of its id. `output` and `code.output`
// notifications name the run or cell they belong to (requestId); `process.output` and `process.exit` name only the process,
// so they go to every stream subscribed to that processId (handles drop what they already have
// by its cursor).
//
// The connection keeps Node's event loop alive only while something waits on it: an idle
// sandbox someone forgot to kill does not keep a script from exiting (the daemon then sees its
// stdin or socket close and destroys the connection's sandboxes).

import { spawn } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import net from "node:net";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { INTERNAL_ERROR, PARSE_ERROR, SbxError, makeError } from "./errors.js";

/** The server's default limit on one request line (limits.rpcBytes), newline excluded. */
export const DEFAULT_RPC_BYTES = 8 << 20;
const STDERR_LINES = 50;
// Expired sandboxes remembered for Sandbox.expired; past this many the oldest are forgotten.
const EXPIRED_MAX = 1024;
const STDERR_CHARS = 4000;
const NEWLINE = 0x0a;
const TOO_LARGE = /^Request too large \(limit (\d+) bytes\)/;
// A JSON text the server's parser refuses, so that it cannot read the id: a NUL character or a
// lone surrogate (JSON.stringify escapes both; an even run of backslashes before the escape
// means it is a literal backslash instead), or an integer beyond int64.
const UNREADABLE = /(?:^|[^\\])(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})|\d{19,}|\de\+/i;
// Requests whose answer may take long: an error answer without an id is not theirs.
const LONG = new Set(["run", "process.stream", "process.wait", "process.kill", "snapshot.create",
  "snapshot.restore", "sandbox.fork", "persistence.export", "persistence.import", "code.run", "context.create",
  "context.restart"]);

function isExecutableFile(path) {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** <repo>/build/src/cli/sbx, for an SDK used from a checkout (sdk/typescript/src/client.js). */
function repoBinary() {
  return resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "build", "src", "cli", "sbx");
}

/**
 * The sbx binary to run: `binary` if given, else $SBX_BIN, else `sbx` on $PATH, else the
 * repository's build output (the Python SDK's order).
 */
export function findBinary(binary) {
  if (binary) return String(binary);
  if (process.env.SBX_BIN) return process.env.SBX_BIN;
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir && isExecutableFile(join(dir, "sbx"))) return join(dir, "sbx");
  }
  const repo = repoBinary();
  if (isExecutableFile(repo)) return repo;
  const err = new Error("cannot find the sbx binary: pass binary, set $SBX_BIN, put sbx on $PATH " +
    `or build the repository (${repo} does not exist)`);
  err.code = "ENOENT";
  throw err;
}

/** limits.rpcBytes of create / sandbox.create params, when the server would apply it. */
function rpcBytesParam(params) {
  const v = params?.limits?.rpcBytes;
  return Number.isInteger(v) && v >= 1024 && v <= 2 ** 30 ? v : undefined;
}

export class Client {
  /**
   * @param {object} t transport: write(line), end(), destroy(), setRef(bool), and for a
   *   spawned server its ChildProcess as `child`
   */
  constructor(t, description) {
    this._t = t;
    this.description = description;
    this._nextId = 1;
    this._calls = new Map(); // id -> call
    this._subs = new Map(); // processId -> Set of handlers
    this._expiry = new Map(); // sandboxId -> Set of sandbox.expired handlers
    this._expired = new Map(); // sandboxId -> reason, for the sandboxes this connection saw expire
    this._strong = 0; // waiters that keep the event loop alive
    this._referenced = true;
    this._dead = null; // the SbxError every later request gets
    this._closing = false;
    this.rpcLimit = DEFAULT_RPC_BYTES;
    this._stderr = [];
    this._parts = [];
    this._exited = null;
    this._updateRef();
  }

  /** Starts `sbx serve --stdio` (see findBinary) and connects to it. */
  static spawn(binary, args = []) {
    const path = findBinary(binary);
    const child = spawn(path, ["serve", "--stdio", ...args], { stdio: ["pipe", "pipe", "pipe"] });
    const pipes = [child.stdin, child.stdout, child.stderr];
    const client = new Client({
      child,
      write: (line) => child.stdin.write(line),
      end: () => child.stdin.end(),
      destroy: () => child.stdin.destroy(),
      setRef(on) {
        for (const p of pipes) on ? p.ref?.() : p.unref?.();
        on ? child.ref() : child.unref();
      },
    }, `${path} serve --stdio`);
    client._exited = new Promise((res) => child.once("close", (code, signal) => res({ code, signal })));
    // A spawn failure (ENOENT, EACCES) is reported here, after the first write was queued.
    child.once("error", (e) => client._fail(new SbxError(INTERNAL_ERROR, `cannot start ${path}: ${e.message}`)));
    child.stdin.on("error", () => {}); // EPIPE: the end of stdout says why
    child.stderr.setEncoding("utf8");
    let partial = "";
    child.stderr.on("data", (s) => {
      const lines = (partial + s).split("\n");
      partial = lines.pop();
      client._stderrLines(lines);
    });
    child.stderr.on("end", () => partial && client._stderrLines([partial]));
    child.stdout.on("data", (chunk) => client._onData(chunk));
    child.stdout.on("end", () => client._onEnd());
    return client;
  }

  /** Connects to `sbx serve --socket socketPath`. */
  static connect(socketPath) {
    return new Promise((res, rej) => {
      const sock = net.createConnection(String(socketPath));
      sock.once("error", rej);
      sock.once("connect", () => {
        sock.off("error", rej);
        sock.setNoDelay?.(true);
        const client = new Client({
          write: (line) => sock.write(line),
          end: () => sock.end(),
          destroy: () => sock.destroy(),
          setRef: (on) => (on ? sock.ref() : sock.unref()),
        }, `sbx socket ${socketPath}`);
        sock.on("error", () => {}); // the 'close' that follows fails the waiters
        sock.on("data", (chunk) => client._onData(chunk));
        sock.on("close", () => client._onEnd());
        res(client);
      });
    });
  }

  /** The spawned server's pid, or undefined for a socket connection. */
  get pid() {
    return this._t.child?.pid;
  }

  /** True once the connection is gone (closed here, or the server went away). */
  get closed() {
    return this._dead !== null;
  }

  /** The server's most recent stderr lines (stdio mode; empty for a socket). */
  stderrTail() {
    return this._stderr.join("\n").slice(-STDERR_CHARS);
  }

  _stderrLines(lines) {
    this._stderr.push(...lines);
    if (this._stderr.length > STDERR_LINES) this._stderr.splice(0, this._stderr.length - STDERR_LINES);
  }

  // ------------------------------------------------------------ keeping the loop alive

  _updateRef() {
    const want = this._strong > 0 && this._dead === null;
    if (want !== this._referenced) {
      this._referenced = want;
      this._t.setRef(want);
    }
  }

  /** Keeps the event loop alive until the returned function is called. */
  hold() {
    this._strong++;
    this._updateRef();
    let released = false;
    return () => {
      if (!released) {
        released = true;
        this._strong--;
        this._updateRef();
      }
    };
  }

  // ------------------------------------------------------------ requests

  /**
   * Sends a request; returns {id, promise}. opts.onNotification gets the params of every
   * `output` or `code.output` notification naming this request; opts.weak: the wait does not keep the event
   * loop alive (a process's stream, which lives as long as the process).
   */
  call(method, params, opts = {}) {
    if (this._dead) return { id: 0, promise: Promise.reject(this._copyDead()) };
    const id = this._nextId;
    let line;
    try {
      line = '{"jsonrpc":"2.0","id":' + id + ',"method":' + JSON.stringify(method) +
        (params ? ',"params":' + JSON.stringify(params) : "") + "}";
    } catch (e) {
      return { id: 0, promise: Promise.reject(e) };
    }
    // Bytes are counted only when the characters could be more than the limit.
    const size = line.length * 3 > this.rpcLimit ? Buffer.byteLength(line) : line.length;
    if (size > this.rpcLimit) {
      return {
        id: 0, promise: Promise.reject(new SbxError(PARSE_ERROR,
          `Request too large (limit ${this.rpcLimit} bytes): this ${method} request is ${size} bytes; ` +
          "raise limits.rpcBytes")),
      };
    }
    this._nextId++;
    const call = { id, method, size, unreadable: UNREADABLE.test(line), onNotification: opts.onNotification,
      weak: !!opts.weak, resolve: null, reject: null };
    const promise = new Promise((res, rej) => {
      call.resolve = res;
      call.reject = rej;
    });
    this._calls.set(id, call);
    if (!call.weak) {
      this._strong++;
      this._updateRef();
    }
    this._t.write(line + "\n");
    return { id, promise };
  }

  /** Sends a request and resolves with its result (rejects with an SbxError). */
  request(method, params, opts) {
    const { promise } = this.call(method, params, opts);
    if (method === "create" || method === "sandbox.create") {
      const limit = rpcBytesParam(params);
      // The server adopts limits.rpcBytes only once the sandbox exists.
      if (limit !== undefined) return promise.then((r) => ((this.rpcLimit = limit), r));
    }
    return promise;
  }

  _settle(call, error, result) {
    if (!call.weak) {
      this._strong--;
      this._updateRef();
    }
    if (error) call.reject(error);
    else call.resolve(result);
  }

  // ------------------------------------------------------------ process streams

  /** Routes process.output and process.exit of processId to handler until unsubscribed. */
  subscribe(processId, handler) {
    let set = this._subs.get(processId);
    if (!set) this._subs.set(processId, (set = new Set()));
    set.add(handler);
    return () => {
      set.delete(handler);
      if (set.size === 0 && this._subs.get(processId) === set) this._subs.delete(processId);
    };
  }

  // ------------------------------------------------------------ expiry

  /**
   * Calls handler(reason) when the server says sandboxId expired (sandbox.expired: "lifetime"
   * or "idle"); at once, deferred, if it did already. Returns the function that unsubscribes.
   * A handler does not keep the event loop alive.
   */
  onExpired(sandboxId, handler) {
    if (typeof handler !== "function") throw new TypeError("onExpired needs a function");
    const reason = this._expired.get(sandboxId);
    if (reason !== undefined) {
      let live = true;
      queueMicrotask(() => live && handler(reason));
      return () => (live = false);
    }
    let set = this._expiry.get(sandboxId);
    if (!set) this._expiry.set(sandboxId, (set = new Set()));
    set.add(handler);
    return () => {
      set.delete(handler);
      if (set.size === 0 && this._expiry.get(sandboxId) === set) this._expiry.delete(sandboxId);
    };
  }

  /** "lifetime" or "idle" when this connection was told that sandboxId expired, else null. */
  expiredReason(sandboxId) {
    return this._expired.get(sandboxId) ?? null;
  }

  _sandboxExpired(params) {
    const id = params.sandboxId;
    if (typeof id !== "string") return;
    const reason = typeof params.reason === "string" ? params.reason : "lifetime";
    this._expired.set(id, reason);
    if (this._expired.size > EXPIRED_MAX) this._expired.delete(this._expired.keys().next().value);
    const set = this._expiry.get(id);
    this._expiry.delete(id);
    for (const handler of set ?? []) {
      try {
        handler(reason);
      } catch (e) {
        // The user's bug surfaces as an uncaught exception, as an EventEmitter listener's
        // would, but only after the rest of this chunk of the server's lines is routed.
        queueMicrotask(() => {
          throw e;
        });
      }
    }
  }

  // ------------------------------------------------------------ reading

  _onData(chunk) {
    let start = 0;
    let nl = chunk.indexOf(NEWLINE);
    while (nl !== -1) {
      let line;
      if (this._parts.length) {
        this._parts.push(chunk.subarray(start, nl));
        line = Buffer.concat(this._parts);
        this._parts = [];
      } else {
        line = chunk.subarray(start, nl);
      }
      this._dispatch(line);
      start = nl + 1;
      nl = chunk.indexOf(NEWLINE, start);
    }
    if (start < chunk.length) this._parts.push(chunk.subarray(start));
  }

  _dispatch(line) {
    let msg;
    try {
      msg = JSON.parse(line.toString("utf8"));
    } catch {
      if (line.length) this._stderrLines(["sbx sdk: unparsable line from the server: " + line.toString("utf8", 0, 200)]);
      return;
    }
    if (msg === null || typeof msg !== "object") return;
    if (msg.method !== undefined && msg.id === undefined) {
      this._notification(msg.method, msg.params);
      return;
    }
    let error = null;
    if (msg.error !== undefined) {
      const e = msg.error;
      error = e && typeof e === "object"
        ? makeError(Number.isInteger(e.code) ? e.code : INTERNAL_ERROR, String(e.message ?? ""), e.data)
        : new SbxError(INTERNAL_ERROR, `malformed error from the server: ${JSON.stringify(e)}`);
    }
    let call = Number.isInteger(msg.id) ? this._calls.get(msg.id) : undefined;
    if (call) {
      this._calls.delete(msg.id);
      if (error) this._learnLimit(error); // the server answers an oversized line to its id when it can
    } else if (error) call = this._unmatchedCall(error);
    if (!call) {
      this._stderrLines(["sbx sdk: dropped an answer to no pending request: " + line.toString("utf8", 0, 200)]);
      return;
    }
    if (!error && call.callbackError) error = call.callbackError;
    this._settle(call, error, msg.result);
  }

  _notification(method, params) {
    if (!params || typeof params !== "object") return;
    if (method === "output" || method === "code.output") {
      const call = this._calls.get(params.requestId);
      if (call?.onNotification && !call.callbackError) {
        try {
          call.onNotification(params);
        } catch (e) {
          // Handed to the waiter once the run answers; the run's later output is not passed on.
          call.callbackError = e;
        }
      }
      return;
    }
    if (method === "sandbox.expired") {
      this._sandboxExpired(params);
      return;
    }
    const set = this._subs.get(params.processId);
    if (set) for (const handler of [...set]) handler(method, params);
  }

  /**
   * The pending call an error answered with id null belongs to: the server answers so a line
   * it could not read (over its limit, or refused by its JSON parser), at once. Without that
   * the caller would wait forever. It goes to the oldest call the server could not have read,
   * else to the oldest that is not a long-running one, else to the oldest.
   */
  /** The server's line limit, when error says it ("Request too large (limit N bytes)"),
   * adopted for the next requests' own check; undefined otherwise. */
  _learnLimit(error) {
    const m = error.code === PARSE_ERROR ? TOO_LARGE.exec(error.rpcMessage) : null;
    if (!m) return undefined;
    this.rpcLimit = Number(m[1]);
    return this.rpcLimit;
  }

  _unmatchedCall(error) {
    if (this._calls.size === 0) return undefined;
    const limit = this._learnLimit(error);
    let culprit;
    if (limit !== undefined) {
      culprit = (c) => c.size > limit;
    } else {
      culprit = (c) => c.unreadable;
    }
    const calls = [...this._calls.values()];
    const call = calls.find(culprit) ?? calls.find((c) => !LONG.has(c.method)) ?? calls[0];
    this._calls.delete(call.id);
    return call;
  }

  async _onEnd() {
    if (this._dead) return;
    let err;
    if (this._closing) {
      err = new SbxError(INTERNAL_ERROR, "connection closed");
    } else if (this._exited) {
      // Let the process finish and its last stderr words arrive before quoting them.
      let timer;
      const status = await Promise.race([this._exited, new Promise((r) => (timer = setTimeout(r, 2000)))]);
      clearTimeout(timer);
      const tail = this.stderrTail().trim();
      const detail = tail || (status ? `exit status ${status.code ?? status.signal}, nothing on stderr` : "stdout closed");
      err = new SbxError(INTERNAL_ERROR, "server exited: " + detail);
    } else {
      err = new SbxError(INTERNAL_ERROR, "server exited: connection closed by the server");
    }
    this._fail(err);
  }

  _copyDead() {
    return new SbxError(this._dead.code, this._dead.rpcMessage, this._dead.data);
  }

  _fail(err) {
    if (!this._dead) this._dead = err;
    const calls = [...this._calls.values()];
    this._calls.clear();
    for (const call of calls) this._settle(call, this._copyDead());
    for (const set of this._subs.values()) for (const handler of [...set]) handler("close", null);
    this._updateRef();
  }

  // ------------------------------------------------------------ shutdown

  /**
   * Closes the connection: a spawned server gets its stdin closed (it then exits), is waited
   * for waitMs, then terminated (and killed 5 s later). Pending calls fail with -32603
   * "connection closed". Idempotent.
   */
  async close(waitMs = 5000) {
    if (this._dead) return;
    // Awaiting a promise alone would not keep the loop alive: the server could be left behind.
    const release = this.hold();
    this._closing = true;
    this._t.end();
    const child = this._t.child;
    if (child) {
      // Whether the server exited within ms; the timer must not outlive the race.
      const exitedWithin = async (ms) => {
        let timer;
        const late = new Promise((r) => (timer = setTimeout(r, ms, false)));
        try {
          return await Promise.race([this._exited.then(() => true), late]);
        } finally {
          clearTimeout(timer);
        }
      };
      if (child.exitCode === null && child.signalCode === null && !(await exitedWithin(waitMs))) {
        child.kill("SIGTERM");
        if (!(await exitedWithin(5000))) {
          child.kill("SIGKILL");
          await this._exited;
        }
      }
    } else {
      this._t.destroy();
    }
    this._fail(new SbxError(INTERNAL_ERROR, "connection closed"));
    release();
  }
}
