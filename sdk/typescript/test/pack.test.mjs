// `npm pack` makes a tarball that installs with no network (the package has no dependencies)
// and works: a scratch project imports it by name and runs `echo hi` in a sandbox.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SBX_BIN, SDK_DIR, skip, tempDir } from "./helpers.mjs";

const npm = spawnSync("npm", ["--version"], { encoding: "utf8" });
const noNpm = npm.status === 0 ? false : "npm is missing";

function run(cmd, args, opts) {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: 120000, ...opts });
  assert.equal(r.status, 0, `${cmd} ${args.join(" ")}: ${r.error ?? ""}${r.stderr}`);
  return r.stdout;
}

describe("npm pack", { skip: skip || noNpm }, () => {
  it("packs a tarball that installs offline and runs echo hi", () => {
    const dir = tempDir("sbx-ts-pack-");
    try {
      // npm's own cache in the temp dir: nothing of the user's is read or written.
      const env = { ...process.env, npm_config_cache: join(dir, "cache"), npm_config_update_notifier: "false",
        npm_config_fund: "false", npm_config_audit: "false" };
      run("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: SDK_DIR, env });
      const tarball = readdirSync(dir).find((f) => f.endsWith(".tgz"));
      assert.ok(tarball, "no tarball");
      const listing = run("tar", ["-tzf", join(dir, tarball)]).split("\n");
      assert.ok(listing.includes("package/index.d.ts"));
      assert.ok(listing.includes("package/src/index.js"));
      assert.ok(!listing.some((f) => f.startsWith("package/test/")), "tests are not shipped");

      const project = join(dir, "project");
      run("mkdir", ["-p", project]);
      writeFileSync(join(project, "package.json"), JSON.stringify({ name: "scratch", private: true, type: "module" }));
      run("npm", ["install", "--offline", "--ignore-scripts", "--no-package-lock", join(dir, tarball)], { cwd: project, env });
      writeFileSync(join(project, "example.mjs"), [
        'import { Sandbox } from "sbx";',
        "const sb = await Sandbox.create();",
        'const r = await sb.commands.run("echo hi");',
        "console.log(r.stdout.trim(), r.exitCode);",
        "await sb.kill();",
      ].join("\n"));
      const out = run(process.execPath, ["example.mjs"], { cwd: project, env: { ...env, SBX_BIN } });
      assert.equal(out, "hi 0\n");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
