// sbx: run untrusted shell commands in Linux-namespace sandboxes with persistent bash sessions,
// from Node. No runtime dependencies; see docs/PROTOCOL.md in the sbx repository for the wire.
export { Sandbox, Sessions, Env, Sandboxes } from "./sandbox.js";
export { Commands, CommandHandle, CommandResult, Session } from "./commands.js";
export { ProcessHandle, TerminalHandle, Pty } from "./processes.js";
export { Files } from "./files.js";
export { Client, findBinary } from "./client.js";
export { SbxError, ProcessEndedError, WaitTimeoutError } from "./errors.js";
