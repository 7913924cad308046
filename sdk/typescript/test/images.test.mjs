// OCI images through the SDK: importImage of a `docker save` tar made offline by the pytest
// suite's ocitool.py (the host's bash and tools), a sandbox whose root is that image
// (connect, sandboxes.create and create with the image option), images.list / inspect, and
// remove refused while a sandbox of the image lives, done once it is gone.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { INVALID_PARAMS, Sandbox, SbxError } from "../src/index.js";
import { REPO, skip, socketDaemon, tempDir } from "./helpers.mjs";

const HELLO = "hello from the image\n";

/** A docker save tar of ocitool.host_root() tagged `tag`; resolves with {tar, id}. */
function dockerArchive(dir, tag) {
  const script = [
    "import sys",
    `sys.path.insert(0, ${JSON.stringify(join(REPO, "tests", "integration"))})`,
    "import ocitool",
    "root = ocitool.host_root(sys.argv[1] + '/root')",
    "print(ocitool.write_docker_archive(sys.argv[1] + '/app.tar', [ocitool.tar_of_dir(root)], tags=(sys.argv[2],)))",
  ].join("\n");
  const r = spawnSync("/usr/bin/python3", ["-c", script, dir, tag], { encoding: "utf8", timeout: 120000 });
  assert.equal(r.status, 0, r.stderr);
  return { tar: join(dir, "app.tar"), id: r.stdout.trim() };
}

/** Waits until the image has no live sandbox (a closed connection's are destroyed just after). */
async function unused(images, ref) {
  for (let i = 0; i < 200; i++) {
    if ((await images.inspect(ref)).sandboxes === 0) return;
    await sleep(50);
  }
  assert.fail(`image ${ref} still in use`);
}

describe("images", { skip }, () => {
  let work, top, store, image;
  before(() => {
    work = tempDir("sbx-ts-image-");
    image = dockerArchive(work, "ts/app:1");
    // The store and its parents must be o+x for sandboxes to reach it.
    top = mkdtempSync("/var/tmp/sbx-ts-store-");
    chmodSync(top, 0o755);
    store = join(top, "store");
  });
  after(() => {
    if (work) rmSync(work, { recursive: true, force: true });
    if (top) rmSync(top, { recursive: true, force: true });
  });

  it("imports, runs a sandbox of the image, lists, inspects, refuses then removes", async () => {
    const daemon = await socketDaemon(["--image-store", store, "--pool", "0"]);
    const admin = await Sandbox.connect(daemon.path);
    try {
      assert.deepEqual(await admin.images.list(), []);
      const img = await admin.images.importImage(image.tar);
      assert.equal(img.id, image.id);
      assert.deepEqual(img.names, ["ts/app:1"]);
      assert.equal(img.source, "docker-archive");
      assert.equal(img.bash, true);
      assert.deepEqual(img.config.env, ["PATH=/usr/bin:/bin", "IMAGE_VAR=from-image"]);
      assert.deepEqual((await admin.images.list()).map((i) => i.id), [image.id]);

      const sb = await Sandbox.connect(daemon.path, { image: "ts/app:1" });
      try {
        const r = await sb.commands.run("cat /opt/app/hello.txt; echo $IMAGE_VAR");
        assert.equal(r.exitCode, 0, r.stderr);
        assert.equal(r.stdout, HELLO + "from-image\n");
        const child = await admin.sandboxes.create({ image: image.id.slice(7, 19) });
        assert.equal((await child.commands.run("cat /opt/app/hello.txt")).stdout, HELLO);
        assert.equal((await admin.commands.run("test -e /opt/app/hello.txt || echo absent")).stdout, "absent\n");
        assert.equal((await admin.images.inspect("ts/app:1")).sandboxes, 2);
        await assert.rejects(admin.images.remove(image.id), SbxError);
        await child.kill();
        assert.equal((await admin.images.inspect(image.id)).sandboxes, 1);
        await assert.rejects(admin.images.remove("ts/app:1"), SbxError);
      } finally {
        await sb.kill();
      }
      await unused(admin.images, image.id);
      // A second name, then the image's removal by id.
      const again = await admin.images.importImage(image.tar, { name: "ts/other:2" });
      assert.equal(again.id, image.id);
      assert.equal(again.newLayers, 0);
      assert.deepEqual([...(await admin.images.inspect(image.id)).names].sort(), ["ts/app:1", "ts/other:2"]);
      await admin.images.remove(image.id);
      assert.deepEqual(await admin.images.list(), []);
      await assert.rejects(admin.images.inspect(image.id), (e) => e instanceof SbxError && e.code === INVALID_PARAMS);
      await assert.rejects(admin.sandboxes.create({ image: "ts/app:1" }),
        (e) => e instanceof SbxError && e.code === INVALID_PARAMS && e.message.includes("ts/app:1"));
    } finally {
      await admin.kill();
      await daemon.stop();
    }
  });

  it("Sandbox.create takes the image of a spawned server's store", async () => {
    const serverArgs = ["--image-store", store, "--pool", "0"];
    const first = await Sandbox.create({ serverArgs });
    try {
      assert.deepEqual((await first.images.importImage(image.tar, "ts/spawned:3")).names, ["ts/spawned:3"]);
    } finally {
      await first.kill();
    }
    const sb = await Sandbox.create({ serverArgs, image: "ts/spawned:3" });
    try {
      assert.equal((await sb.commands.run("cat /opt/app/hello.txt")).stdout, HELLO);
      assert.equal((await sb.images.inspect("ts/spawned:3")).sandboxes, 1);
    } finally {
      await sb.kill();
    }
  });
});
