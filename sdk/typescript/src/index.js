// sbx: run untrusted shell commands and code cells in Linux-namespace sandboxes with persistent
// bash sessions and code contexts, from Node. No runtime dependencies; see docs/PROTOCOL.md in
// the sbx repository for the wire.
export { Sandbox, Sessions, Env, Sandboxes } from "./sandbox.js";
export { Commands, CommandHandle, CommandResult, Session } from "./commands.js";
export { ProcessHandle, TerminalHandle, Pty } from "./processes.js";
export { Files } from "./files.js";
export { Images } from "./images.js";
export { CodeContext, CodeHandle, Execution, ExecutionError, Result } from "./code.js";
export { Client, findBinary } from "./client.js";
export {
  SbxError, ProcessEndedError, WaitTimeoutError, INTERNAL_ERROR, PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND,
  INVALID_PARAMS, WORKER_UNAVAILABLE, SANDBOX_DISABLED, POOL_SHUTTING_DOWN, PROCESS_ENDED, WAIT_TIMEOUT,
  SANDBOX_ERROR,
} from "./errors.js";
