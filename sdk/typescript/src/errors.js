// Errors: every failure the daemon answers, and a lost connection, is an SbxError carrying the
// JSON-RPC code, so callers branch on `code` rather than on message text.

/** JSON-RPC "internal error": also what a dead server or a closed connection gives. */
export const INTERNAL_ERROR = -32603;
/** The server could not parse a line (or it was over limits.rpcBytes); answered with id null. */
export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;
/** A server cap was reached (a lane's queue, sandboxes, sessions, runs per session): retry later,
 * after `retryAfterMs` when the server could tell. */
export const WORKER_UNAVAILABLE = -32001;
/** The server runs with `--mode disabled`: it executes nothing. */
export const SANDBOX_DISABLED = -32002;
/** The server is shutting down: it takes no new work. */
export const POOL_SHUTTING_DOWN = -32003;
/** process.wait: the process ended before the condition held. */
export const PROCESS_ENDED = -32010;
/** process.wait: timeoutMs passed first. */
export const WAIT_TIMEOUT = -32011;
/** A sandbox or file error ("ENOENT: ...", "the sandbox is paused ..."). */
export const SANDBOX_ERROR = 1;

export class SbxError extends Error {
  constructor(code, message, data) {
    super(`${message} (code ${code})`);
    this.name = "SbxError";
    this.code = code;
    // The server's own words, without the code suffix that `message` carries for logs.
    this.rpcMessage = message;
    this.data = data;
  }

  /**
   * For WORKER_UNAVAILABLE: how many ms the server suggests waiting before trying again, when
   * it can tell (a lane's queue was full); else undefined.
   */
  get retryAfterMs() {
    const v = this.data && typeof this.data === "object" ? this.data.retryAfterMs : undefined;
    return Number.isInteger(v) ? v : undefined;
  }
}

export class ProcessEndedError extends SbxError {
  constructor(message, data) {
    super(PROCESS_ENDED, message, data);
    this.name = "ProcessEndedError";
  }
}

export class WaitTimeoutError extends SbxError {
  constructor(message, data) {
    super(WAIT_TIMEOUT, message, data);
    this.name = "WaitTimeoutError";
  }
}

/** The error class for a code: the wait errors get their own, so `instanceof` can tell them. */
export function makeError(code, message, data) {
  if (code === PROCESS_ENDED) return new ProcessEndedError(message, data);
  if (code === WAIT_TIMEOUT) return new WaitTimeoutError(message, data);
  return new SbxError(code, message, data);
}
