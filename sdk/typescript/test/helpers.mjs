// Shared by the tests: where the sbx binary is, and why the tests cannot run here (they drive a
// real daemon, which needs root and a built binary, as the pytest suite does).
import { accessSync, constants, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { spawn } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const SDK_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const REPO = resolve(SDK_DIR, "..", "..");
export const SBX_BIN = process.env.SBX_BIN || join(REPO, "build", "src", "cli", "sbx");

function why() {
  try {
    accessSync(SBX_BIN, constants.X_OK);
  } catch {
    return `sbx binary not found at ${SBX_BIN} (build it, or set SBX_BIN)`;
  }
  if (process.getuid?.() !== 0) return "the sbx SDK tests need root";
  return false;
}

/** false, or why the tests that need a daemon are skipped (node:test's `skip` option). */
export const skip = why();

/** A fresh temporary directory. */
export function tempDir(prefix = "sbx-ts-") {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** Starts `sbx serve --socket PATH ...args` in a temp dir; resolves with {path, child, stop()}. */
export async function socketDaemon(args = []) {
  const dir = tempDir("sbx-ts-sock-");
  const path = join(dir, "sbx.sock");
  const child = spawn(SBX_BIN, ["serve", "--socket", path, ...args], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((r) => child.once("exit", r));
  for (let i = 0; i < 200 && !existsSync(path); i++) {
    if (child.exitCode !== null) break;
    await sleep(25);
  }
  if (!existsSync(path)) {
    child.kill("SIGKILL");
    throw new Error(`sbx serve --socket did not come up: ${stderr}`);
  }
  return {
    path,
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}
