// Type declarations of the sbx SDK (src/*.js), written by hand: the package ships plain ESM and
// has no build step. Bytes are Uint8Array in these types (at run time they are Node Buffers),
// so the declarations need no @types/node.

/** Text, or bytes (a Node Buffer is a Uint8Array). */
export type Data = string | Uint8Array | ArrayBuffer;

/** Called with each piece of output, decoded as UTF-8 (a character split between pieces whole). */
export type OutputCallback = (text: string) => void;

// ------------------------------------------------------------------ errors

/**
 * A JSON-RPC error the daemon answered, or a lost connection. `code`: -32700 parse error (a
 * NUL character in a string, a request over limits.rpcBytes), -32600 invalid request, -32601
 * unknown method, -32602 invalid params, -32603 internal error (also: the server exited, the
 * connection closed), -32001 a server cap was reached (see retryAfterMs), -32002 the server
 * runs with `--mode disabled`, -32003 the server is shutting down, -32010 / -32011 see
 * ProcessEndedError / WaitTimeoutError, 1 a sandbox or file error ("ENOENT: ...").
 */
export class SbxError extends Error {
  constructor(code: number, message: string, data?: unknown);
  readonly code: number;
  /** The daemon's message (`message` adds " (code N)"). */
  readonly rpcMessage: string;
  readonly data: unknown;
  /** For WORKER_UNAVAILABLE: the ms the server suggests waiting before a retry, when it can
   * tell (a lane's queue was full); else undefined. */
  readonly retryAfterMs: number | undefined;
}

/** -32603: internal error; also a server that exited or a closed connection. */
export const INTERNAL_ERROR: -32603;
/** -32700: a line the server could not parse, or one over limits.rpcBytes. */
export const PARSE_ERROR: -32700;
export const INVALID_REQUEST: -32600;
export const METHOD_NOT_FOUND: -32601;
export const INVALID_PARAMS: -32602;
/** -32001: a server cap was reached (a lane's queue, sandboxes, sessions): retry later,
 * after SbxError.retryAfterMs when it is set. */
export const WORKER_UNAVAILABLE: -32001;
/** -32002: the server runs with `--mode disabled` and executes nothing. */
export const SANDBOX_DISABLED: -32002;
/** -32003: the server is shutting down and takes no new work. */
export const POOL_SHUTTING_DOWN: -32003;
export const PROCESS_ENDED: -32010;
export const WAIT_TIMEOUT: -32011;
/** 1: a sandbox or file error ("ENOENT: ...", a paused sandbox refusing with whilePaused "refuse"). */
export const SANDBOX_ERROR: 1;

/** waitForLog / waitForPort: the process ended before the condition held (code -32010). */
export class ProcessEndedError extends SbxError {
  constructor(message: string, data?: unknown);
}

/** waitForLog / waitForPort: the timeout passed first (code -32011). */
export class WaitTimeoutError extends SbxError {
  constructor(message: string, data?: unknown);
}

// ------------------------------------------------------------------ options

export interface Limits {
  stdoutBytes?: number;
  stderrBytes?: number;
  commandBytes?: number;
  fileCount?: number;
  rpcBytes?: number;
  memoryBytes?: number;
  pids?: number;
  /** CPUs, fractions allowed; default half the host's. */
  cpus?: number;
}

export interface SandboxOpts {
  /** Default per-command timeout in ms (server default 30000). Not the sandbox's lifetime. */
  timeoutMs?: number;
  /** Size of /tmp + /home/user (server default 256 MiB). */
  fsLimitBytes?: number;
  limits?: Limits;
  /** Extra environment variables for every command. */
  envs?: Record<string, string>;
  /** Share the host's network (default: loopback only). */
  network?: boolean;
  /** "kill": what a command leaves running is killed when it ends; "keep" (default): it stays. */
  leftovers?: "keep" | "kill";
  /** Exec policy the kernel enforces for every process of the sandbox: absolute paths or glob
   * patterns ("/usr/bin/**": a directory). allow: only those run; deny alone: all but those. */
  policy?: { allow?: string[]; deny?: string[] };
  /** {NAME: value} or {NAME: {value, mode: "env"}}: in every command's environment as NAME,
   * never shown back; each value of 8 bytes or more reads [REDACTED:NAME] in all output.
   * {NAME: {value, hosts: [patterns]}} (mode "proxy"; network a list or "allowlist"): commands
   * see only the placeholder SBX_SECRET_NAME_<random>, which the proxy replaces by the value in
   * the request line and headers of HTTPS requests to those hosts (allowed with it). */
  secrets?: Record<string, string | { value: string; mode?: "env" } | { value: string; hosts: string[]; mode?: "proxy" }>;
  /** {key: value} shown by sandboxes.list() and getInfo(), and filtered on by
   * sandboxes.list({metadata}): at most 32 keys of [A-Za-z0-9_.-], values up to 1024 bytes. */
  metadata?: Record<string, string>;
  /** The sandbox is destroyed this long after its creation (0 or absent: never; at most 31
   * days); see setTimeout() and onExpired. */
  lifetimeMs?: number;
  /** The sandbox is destroyed after this long with no request naming it (a command that is
   * still running is no activity: only requests are). */
  idleTimeoutMs?: number;
  /** Called once the server destroyed the sandbox because it expired (see Sandbox.onExpired). */
  onExpired?: ExpiredCallback;
  /** An image of the daemon's store (sandbox.images) as the root, read-only: a name ("app:1";
   * "app" is "app:latest"), its id "sha256:HEX" or 12+ hex digits of it. Commands start with
   * its Env; /tmp, /home/user and /dev/shm are the sandbox's own. The image cannot be removed
   * while the sandbox lives. */
  image?: string;
}

/** One sample of what a sandbox used (E2B's SandboxMetric names where E2B has the figure). */
export interface SandboxMetric {
  timestamp: Date;
  /** Its share of the sandbox's CPUs since the sample before, 0 to 100. */
  cpuUsedPct: number;
  cpuCount: number;
  /** Its memory cgroup, bytes (processes, page cache, its tmpfs's pages). */
  memUsed: number;
  memTotal: number;
  /** Bytes used of its writable filesystem (/tmp, /home/user, /dev/shm). */
  diskUsed: number;
  diskTotal: number;
  diskFiles: number;
  pids: number;
  /** Bytes its egress proxy and exposed ports relayed, both ways, so far. */
  netBytes: number;
  /** Runs and processes started in it so far. */
  runs: number;
  cpuUsec: number;
}

/** Why a sandbox expired: its lifetime (lifetimeMs, setTimeout) or its idle timeout. */
export type ExpiryReason = "lifetime" | "idle";
export type ExpiredCallback = (reason: ExpiryReason) => void;

/** The worker lane of a request (see docs/PROTOCOL.md, "Lanes"): "system" slots are kept
 * for it, which interactive work never takes. Default "interactive". */
export type Lane = "interactive" | "system";

/** Options of fork, snapshot, restore, exportState and importState. */
export interface LaneOpts {
  lane?: Lane;
}

export interface CreateOpts extends SandboxOpts {
  /** The sbx binary; default $SBX_BIN, else sbx on $PATH, else the repository's build/src/cli/sbx. */
  binary?: string;
  /** More arguments for `sbx serve --stdio`. */
  serverArgs?: string[];
}

export interface SandboxCreateOpts extends SandboxOpts {
  /** Free text shown by sandboxes.list(). */
  label?: string;
  /** Socket servers only: outlive this connection. */
  persist?: boolean;
}

export interface RunOpts {
  /** Working directory for this command only. */
  cwd?: string;
  /** Extra environment variables for this command only. */
  envs?: Record<string, string>;
  /** Foreground: killed after this long (exit 124, errorClass "TIMEOUT"; default the sandbox's).
   * Background: the process and all it started are killed (status "timeout"; default never). */
  timeoutMs?: number;
  /** Session name (default "default", created on first use). */
  session?: string;
  /** Called with each piece of standard output as it arrives. */
  onStdout?: OutputCallback;
  /** Called with each piece of standard error as it arrives. */
  onStderr?: OutputCallback;
  /** On a paused sandbox: "wait" (default) for resume(), or "refuse": reject at once
   * (SbxError code 1). */
  whilePaused?: "wait" | "refuse";
  /** The worker lane (default "interactive"). */
  lane?: Lane;
}

export interface ForegroundOpts extends RunOpts {
  background?: false;
  /** Bytes (or text, as UTF-8) on standard input; default /dev/null. */
  stdin?: Data;
  /** "kill": what this command leaves running is killed when it ends; "keep": it stays. */
  leftovers?: "keep" | "kill";
  /** Aborting it cancels the command (exit 125, errorClass "CANCELLED"). */
  signal?: AbortSignal;
}

export interface BackgroundOpts extends RunOpts {
  background: true;
  /** true: keep stdin open for sendStdin() / closeStdin(); bytes or text: written, then closed. */
  stdin?: boolean | Data;
  /** Free text shown by commands.list(). */
  label?: string;
}

// ------------------------------------------------------------------ results

/** The outcome of a foreground command. A non-zero exit is a result, not an exception. */
export class CommandResult {
  private constructor();
  /** Standard output as UTF-8 text (invalid bytes replaced by U+FFFD). */
  readonly stdout: string;
  readonly stderr: string;
  /** The exit status; 124 on timeout, 125 when cancelled. */
  readonly exitCode: number;
  readonly executionTimeMs: number;
  /** Which output hit its cap (limits.stdoutBytes / stderrBytes), or null. */
  readonly truncated: { stdout: boolean; stderr: boolean } | null;
  /** What went past the caps, or null. */
  readonly droppedBytes: { stdout: number; stderr: number } | null;
  readonly errorClass: "TIMEOUT" | "CANCELLED" | "LIMIT_EXCEEDED" | "PIDS_LIMIT" | "OOM" | "FS_FULL" | "UNAVAILABLE" | null;
  /** Processes a timeout, cancel or process limit killed. */
  readonly killedProcesses: number;
  /** The command did not end on its own (a timeout, a cancel, a stop at the process limit, or
   * its shell killed by a signal: `kill -9 $$`, the OOM killer): what it changed in the session
   * (cwd, variables, functions) was not kept. */
  readonly stateDiscarded: boolean;
  /** The shell holding the session's state was killed from inside the sandbox during this
   * command or since the last result: the session started over, as a new session. */
  readonly sessionReset: boolean;
  /** Standard output exactly as written. */
  readonly stdoutBytes: Uint8Array;
  readonly stderrBytes: Uint8Array;
  /** exitCode === 0. */
  readonly ok: boolean;
}

/** A background process's outcome, from ProcessHandle.wait(). */
export interface ProcessResult {
  /** The exit status, or 128 + the signal's number (143 TERM, 137 KILL and timeout). */
  exitCode: number;
  status: "exited" | "killed" | "timeout";
  /** The signal that ended it ("TERM", "KILL", ...), or null. */
  signal: string | null;
  /** The output this handle received (from where it started), as text. */
  stdout: string;
  stderr: string;
  stdoutBytes: Uint8Array;
  stderrBytes: Uint8Array;
  /** Bytes the daemon's bounded log (1 MiB per process) lost before this handle got them. */
  droppedBytes: number;
  /** The log offset after the last byte received. */
  cursor: number;
}

/** One piece of a background process's output, as iterating over its handle yields it. */
export interface OutputChunk {
  /** A terminal's output is all "stdout". */
  stream: "stdout" | "stderr";
  data: Uint8Array;
  /** data as UTF-8 text, a character split between chunks whole in the later one. */
  text: string;
  /** The log offset after this chunk. */
  cursor: number;
}

/** One process of a sandbox, as commands.list() reports it (process.list). */
export interface ProcessInfo {
  processId: string;
  /** Its pid inside the sandbox. */
  pid: number;
  command: string;
  label: string | null;
  status: "running" | "exited" | "killed" | "timeout";
  exitCode: number | null;
  signal: string | null;
  /** Milliseconds since the epoch. */
  startedAt: number;
  endedAt: number | null;
  /** "start": run(..., {background: true}) or a terminal; "leftover": what a run left running. */
  origin: "start" | "leftover";
  pty: boolean;
  stdin: boolean;
  /** Something of it still runs. */
  alive?: boolean;
  logEnd?: number;
}

export interface EntryInfo {
  name: string;
  /** Absolute, as the sandbox sees it. */
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  /** ISO 8601, UTC. */
  mtime: string;
  /** Where a symlink points. */
  target?: string;
}

export interface HistoryEntry {
  index: number;
  command: string;
  /** ISO 8601, UTC. */
  timestamp: string;
}

export interface SnapshotInfo {
  id: string;
  /** ISO 8601, UTC. */
  createdAt: string;
  bytes: number;
}

export interface SandboxInfo {
  sandboxId: string;
  label?: string;
  metadata: Record<string, string>;
  paused: boolean;
  /** ISO 8601, UTC. */
  createdAt: string;
  persist: boolean;
  root: boolean;
}

/** An image of the daemon's store, as image.import, image.list and image.inspect give it. */
export interface ImageInfo {
  /** "sha256:HEX": the digest of its config. */
  id: string;
  /** "name:tag"s; may be empty. */
  names: string[];
  layers: { diffId: string; bytes: number; entries: number; dropped: number; stripped: number }[];
  /** The unpacked size of its layers. */
  bytes: number;
  /** It has /bin/bash (a sandbox needs it). */
  bash: boolean;
  config: {
    env: string[];
    workingDir: string;
    user: string;
    entrypoint: string[] | null;
    cmd: string[] | null;
    architecture: string;
    os: string;
    created: string;
  };
  /** "oci-layout", "oci-archive" or "docker-archive". */
  source: string;
  /** The manifest's digest. */
  manifest: string;
  /** Unix seconds. */
  importedAt: number;
  /** Layers this import unpacked (the store had the others). */
  newLayers: number;
  /** Sandboxes made from it that live now. */
  sandboxes: number;
}

// ------------------------------------------------------------------ handles

/** A foreground command sent and perhaps still running, from commands.start(). */
export class CommandHandle {
  private constructor();
  /** The JSON-RPC id of the `run` request. */
  readonly requestId: number;
  done(): boolean;
  /** The result; rejects with an SbxError the server answered or what a callback threw. */
  wait(): Promise<CommandResult>;
  /** Cancels it (exit 125, "CANCELLED"); false when it had finished already. */
  cancel(): Promise<boolean>;
}

export interface KillOpts {
  /** "TERM" (default), "INT", "SIGKILL", ... or a number. */
  signal?: string | number;
  /** Then KILL to all of it after this long (default 2000; 0: at once). */
  graceMs?: number;
}

export interface WaitOpts {
  /** Default 60000. */
  timeoutMs?: number;
}

/** A background process of a sandbox. Async iteration yields its output chunks. */
export class ProcessHandle implements AsyncIterable<OutputChunk> {
  protected constructor();
  readonly processId: string;
  /** Its pid inside the sandbox. */
  readonly pid: number;
  readonly cursor: number;
  readonly droppedBytes: number;
  /** Once it ended, else undefined. */
  readonly exitCode: number | undefined;
  /** Output received so far, as text. */
  readonly stdout: string;
  readonly stderr: string;
  /** The process ended and all of its output is in. */
  done(): boolean;
  /** Waits for the end and all output; a non-zero exit is a result. */
  wait(): Promise<ProcessResult>;
  /** The first line of stdout or stderr (earlier ones count) matching a POSIX extended regex. */
  waitForLog(pattern: string | RegExp, opts?: WaitOpts): Promise<string>;
  /** Resolves once something in the sandbox accepts TCP connections on port. */
  waitForPort(port: number, opts?: WaitOpts): Promise<void>;
  /** Kills it and all it started; false when it had ended already. */
  kill(opts?: KillOpts): Promise<boolean>;
  /** Writes to its stdin (started with stdin: true). */
  sendStdin(data: Data): Promise<void>;
  closeStdin(): Promise<void>;
  [Symbol.asyncIterator](): AsyncIterator<OutputChunk>;
}

/** An interactive program on a terminal, from sandbox.pty.create(). */
export class TerminalHandle extends ProcessHandle {
  sendInput(data: Data): Promise<void>;
  resize(size: { cols: number; rows: number }): Promise<void>;
}

// ------------------------------------------------------------------ code contexts

export type CodeLanguage = "python" | "bash";

/** A code context: a Python (IPython) interpreter or a bash session whose state its cells keep. */
export class CodeContext {
  private constructor();
  /** Its id; the default contexts are "default-python" and "default-bash". */
  readonly id: string;
  readonly language: CodeLanguage;
  readonly cwd: string;
}

/**
 * One result of a cell: its value (isMainResult) or something it displayed, a mime bundle.
 * png, jpeg and pdf are base64 text. A getter is undefined when the bundle lacks its type.
 */
export class Result {
  private constructor();
  /** The mime bundle: {"text/plain": ..., "text/html": ..., ...}. */
  readonly data: Record<string, unknown>;
  readonly isMainResult: boolean;
  readonly metadata: Record<string, unknown>;
  /** text/plain */
  readonly text: string | undefined;
  /** text/html (a pandas DataFrame, IPython.display.HTML) */
  readonly html: string | undefined;
  readonly markdown: string | undefined;
  /** image/svg+xml */
  readonly svg: string | undefined;
  /** image/png, base64 (a matplotlib figure) */
  readonly png: string | undefined;
  readonly jpeg: string | undefined;
  /** application/pdf, base64 */
  readonly pdf: string | undefined;
  readonly latex: string | undefined;
  /** application/json: any JSON value */
  readonly json: unknown;
  readonly javascript: string | undefined;
  /** The bundle's mime types that have no getter of their own. */
  readonly extra: Record<string, unknown>;
  /** The names of the getters that have a value: "text", "html", "png", ... */
  formats(): string[];
}

/**
 * The cell's exception (traceback as IPython formats it), or why it did not end:
 * "TimeoutError", "CancelledError", "CellDied" (the context is as it was before the cell),
 * "ContextReset" (a fresh interpreter took over), "ExitError" (a bash cell's non-zero status).
 */
export class ExecutionError {
  private constructor();
  readonly name: string;
  readonly value: string;
  readonly traceback: string;
}

/** The outcome of a cell. An exception in the cell is `error`, not a rejection. */
export class Execution {
  private constructor();
  /** The cell's value (isMainResult) and what it displayed, in order. */
  readonly results: Result[];
  /** What the cell printed and its processes wrote, in pieces as they came. */
  readonly logs: { stdout: string[]; stderr: string[] };
  readonly error: ExecutionError | null;
  /** IPython's counter; null in a bash context. */
  readonly executionCount: number | null;
  readonly contextId: string;
  readonly language: CodeLanguage;
  /** 0; 1 after an exception; 124 timeout; 125 cancelled; a bash cell's status. */
  readonly exitCode: number;
  readonly executionTimeMs: number;
  readonly errorClass: "TIMEOUT" | "CANCELLED" | "LIMIT_EXCEEDED" | "PIDS_LIMIT" | "OOM" | "FS_FULL" | "UNAVAILABLE" | null;
  /** What the context could not keep (threads of earlier cells). */
  readonly warnings: string[];
  /** The interpreter died and a fresh one (no variables) took over. */
  readonly contextReset: boolean;
  /** Bytes of output and results left out of the answer (over the server's cap). */
  readonly droppedBytes: number;
  /** Processes of the cell a timeout, cancel or process limit killed. */
  readonly killedProcesses: number;
  /** The text/plain of the main result (the cell's value), or undefined. */
  readonly text: string | undefined;
}

export interface RunCodeOpts {
  /** Without context: the default context of this language (default "python"). Not both. */
  language?: CodeLanguage;
  /** The context to run in (a CodeContext or its id). */
  context?: CodeContext | { id: string } | string;
  /** Kill the cell after this long (errorClass "TIMEOUT"; default the sandbox's timeout);
   * the context stays as it was before the cell. */
  timeoutMs?: number;
  /** Environment variables for this cell only. */
  envs?: Record<string, string>;
  /** Called with what the cell prints, as it prints it. */
  onStdout?: OutputCallback;
  onStderr?: OutputCallback;
  /** Called with each result as the cell shows it (display(), then its value). */
  onResult?: (result: Result) => void;
  /** Called with the cell's exception. */
  onError?: (error: ExecutionError) => void;
  /** Aborting it cancels the cell (CancelledError, errorClass "CANCELLED"). */
  signal?: AbortSignal;
  whilePaused?: "wait" | "refuse";
  lane?: Lane;
}

export interface CreateCodeContextOpts {
  /** Default "python". */
  language?: CodeLanguage;
  /** An absolute path; default /home/user. */
  cwd?: string;
  /** Environment variables for all of its cells. */
  envs?: Record<string, string>;
  whilePaused?: "wait" | "refuse";
  lane?: Lane;
}

/** A cell sent and perhaps still running, from sandbox.startCode(). */
export class CodeHandle {
  private constructor();
  /** The JSON-RPC id of the `code.run` request. */
  readonly requestId: number;
  done(): boolean;
  /** The Execution; rejects with an SbxError the server answered or what a callback threw. */
  wait(): Promise<Execution>;
  /** Cancels the cell (CancelledError; the context as before it); false when it had finished. */
  cancel(): Promise<boolean>;
}

// ------------------------------------------------------------------ namespaces

export class Commands {
  private constructor();
  /** Runs a command and resolves with its result, or starts it in the background. */
  run(cmd: string, opts?: ForegroundOpts): Promise<CommandResult>;
  run(cmd: string, opts: BackgroundOpts): Promise<ProcessHandle>;
  /** Starts a foreground command; its handle can wait() or cancel(). */
  start(cmd: string, opts?: ForegroundOpts): CommandHandle;
  /** The sandbox's background processes (started ones and leftovers), oldest first. */
  list(): Promise<ProcessInfo[]>;
  /** Kills a background process by its pid in the sandbox (or its processId). */
  kill(pid: number | string, opts?: KillOpts): Promise<boolean>;
  /** A handle on a background process, resuming where this SDK last delivered its output. */
  connect(pid: number | string, opts?: { onStdout?: OutputCallback; onStderr?: OutputCallback }): Promise<ProcessHandle>;
  /** Kills every background process and leftover; resolves with how many trees. */
  killAll(): Promise<number>;
}

export class Session {
  private constructor();
  readonly name: string;
  run(cmd: string, opts?: ForegroundOpts): Promise<CommandResult>;
  run(cmd: string, opts: BackgroundOpts): Promise<ProcessHandle>;
  start(cmd: string, opts?: ForegroundOpts): CommandHandle;
  delete(): Promise<void>;
  history(): Promise<HistoryEntry[]>;
  clearHistory(): Promise<void>;
}

export class Sessions {
  private constructor();
  create(name: string): Promise<Session>;
  get(name: string): Session;
  list(): Promise<string[]>;
  delete(name: string): Promise<void>;
}

export class Env {
  private constructor();
  set(name: string, value: string, session?: string): Promise<void>;
  get(name: string, session?: string): Promise<string | null>;
}

export class Files {
  private constructor();
  read(path: string, opts?: { format?: "text" }): Promise<string>;
  read(path: string, opts: { format: "bytes" }): Promise<Uint8Array>;
  /** Atomic; creates missing parents; over 4 MiB as an upload in parts. */
  write(path: string, data: Data, opts?: { mode?: number }): Promise<void>;
  list(path: string, opts?: { depth?: number }): Promise<EntryInfo[]>;
  getInfo(path: string): Promise<EntryInfo>;
  exists(path: string): Promise<boolean>;
  makeDir(path: string, opts?: { parents?: boolean }): Promise<void>;
  remove(path: string, opts?: { recursive?: boolean }): Promise<void>;
  rename(oldPath: string, newPath: string): Promise<void>;
}

export class Pty {
  private constructor();
  create(opts?: {
    cols?: number;
    rows?: number;
    onData?: (data: Uint8Array) => void;
    cwd?: string;
    envs?: Record<string, string>;
    timeoutMs?: number;
    /** Default "exec bash -i". */
    command?: string;
    whilePaused?: "wait" | "refuse";
    lane?: Lane;
  }): Promise<TerminalHandle>;
  sendInput(pid: number | string, data: Data): Promise<void>;
  resize(pid: number | string, size: { cols: number; rows: number }): Promise<void>;
  kill(pid: number | string): Promise<boolean>;
}

export class Sandboxes {
  private constructor();
  create(opts?: SandboxCreateOpts): Promise<Sandbox>;
  get(sandboxId: string): Sandbox;
  /** The sandboxes this connection may use; with metadata, those whose metadata has every
   * one of these pairs. */
  list(opts?: { metadata?: Record<string, string> }): Promise<SandboxInfo[]>;
}

/** `sandbox.images`: the daemon's image store (sbx serve --image-store), shared by every
 * connection. */
export class Images {
  private constructor();
  /** Imports an OCI layout directory, an OCI archive or a docker / podman save tar at path on
   * this host (a relative path is resolved here); resolves once it is in the store. opts.name,
   * or a string in its place, names it ("x" is "x:latest"). */
  importImage(path: string, opts?: { name?: string } | string): Promise<ImageInfo>;
  list(): Promise<ImageInfo[]>;
  /** By name, id or 12+ hex digits of the id; rejects (-32602) when there is none. */
  inspect(ref: string): Promise<ImageInfo>;
  /** Takes a name off its image, or (the id, its last name) removes it; refused while a
   * sandbox of it lives. */
  remove(ref: string): Promise<void>;
}

export class Sandbox {
  private constructor();
  /** Spawns `sbx serve --stdio` and creates the sandbox. */
  static create(opts?: CreateOpts): Promise<Sandbox>;
  /** Connects to `sbx serve --socket socketPath` and creates this connection's root sandbox. */
  static connect(socketPath: string, opts?: SandboxOpts): Promise<Sandbox>;
  readonly sandboxId: string;
  readonly isRoot: boolean;
  readonly client: Client;
  readonly commands: Commands;
  readonly files: Files;
  readonly sessions: Sessions;
  readonly env: Env;
  readonly sandboxes: Sandboxes;
  readonly pty: Pty;
  readonly images: Images;
  /** Runs a cell in a code context (default: the language's default context). */
  runCode(code: string, opts?: RunCodeOpts): Promise<Execution>;
  /** As runCode, returning at once a handle to wait() for or cancel(). */
  startCode(code: string, opts?: RunCodeOpts): CodeHandle;
  createCodeContext(opts?: CreateCodeContextOpts): Promise<CodeContext>;
  listCodeContexts(): Promise<CodeContext[]>;
  /** A fresh interpreter (cwd and envs as created): every variable is gone. */
  restartCodeContext(context: CodeContext | { id: string } | string, opts?: { whilePaused?: "wait" | "refuse"; lane?: Lane }): Promise<CodeContext>;
  removeCodeContext(context: CodeContext | { id: string } | string): Promise<void>;
  history(session?: string): Promise<HistoryEntry[]>;
  clearHistory(session?: string): Promise<void>;
  health(): Promise<Record<string, unknown>>;
  ping(): Promise<boolean>;
  /** "127.0.0.1:N" on the host, forwarded to TCP `port` inside the sandbox (port.expose). */
  getHost(port: number): Promise<string>;
  /** Freezes every process in place (memory kept, no CPU); commands sent meanwhile wait for
   * resume() unless whilePaused: "refuse". */
  pause(): Promise<void>;
  /** Lets a paused sandbox go on exactly where it was. */
  resume(): Promise<void>;
  /** E2B's getMetrics: a sample every 5 s for the last hour (sandbox.metrics), oldest first;
   * start and end keep those in between. */
  getMetrics(opts?: { start?: Date | number; end?: Date | number }): Promise<SandboxMetric[]>;
  /** E2B's setTimeout: the sandbox is destroyed timeoutMs from now (0: never). Not a command
   * timeout. */
  setTimeout(timeoutMs: number): Promise<void>;
  /** Calls handler once the server destroyed this sandbox because it expired; returns the
   * function that unsubscribes. */
  onExpired(handler: ExpiredCallback): () => void;
  /** Why the sandbox expired, once this connection was told; else null. */
  readonly expired: ExpiryReason | null;
  /** This sandbox as sandboxes.list() shows it; rejects (-32602) once it is gone. */
  getInfo(): Promise<SandboxInfo>;
  /** An independent copy on the same connection; end it with kill(). */
  fork(opts?: LaneOpts): Promise<Sandbox>;
  /** Resolves with the snapshot's id. */
  snapshot(opts?: LaneOpts): Promise<string>;
  restore(snapshotId: string, opts?: LaneOpts): Promise<void>;
  listSnapshots(): Promise<SnapshotInfo[]>;
  deleteSnapshot(snapshotId: string): Promise<void>;
  /** A zstd-compressed tar: `tar --zstd -xf` opens it. */
  exportState(opts?: LaneOpts): Promise<Uint8Array>;
  importState(blob: Data, opts?: LaneOpts): Promise<void>;
  /** Ends the sandbox (a spawned server shuts down; a socket connection closes). Idempotent. */
  kill(): Promise<void>;
  destroy(): Promise<void>;
  close(): Promise<void>;
}

// ------------------------------------------------------------------ transport

export interface CallOpts {
  onNotification?: (params: Record<string, unknown>) => void;
  /** The wait does not keep Node's event loop alive. */
  weak?: boolean;
}

/** One JSON-RPC connection to an sbx daemon; most code wants Sandbox. */
export class Client {
  private constructor();
  static spawn(binary?: string, args?: string[]): Client;
  static connect(socketPath: string): Promise<Client>;
  readonly description: string;
  /** The spawned server's pid; undefined for a socket. */
  readonly pid: number | undefined;
  readonly closed: boolean;
  /** The longest request line the server takes on this connection, in bytes. */
  rpcLimit: number;
  stderrTail(): string;
  request(method: string, params?: Record<string, unknown>, opts?: CallOpts): Promise<any>;
  call(method: string, params?: Record<string, unknown>, opts?: CallOpts): { id: number; promise: Promise<any> };
  /** Keeps the event loop alive until the returned function is called. */
  hold(): () => void;
  /** Calls handler when the server says sandboxId expired; returns the unsubscriber. */
  onExpired(sandboxId: string, handler: ExpiredCallback): () => void;
  expiredReason(sandboxId: string): ExpiryReason | null;
  close(waitMs?: number): Promise<void>;
}

/** The sbx binary Sandbox.create runs: binary, $SBX_BIN, sbx on $PATH, the repository's build. */
export function findBinary(binary?: string): string;
