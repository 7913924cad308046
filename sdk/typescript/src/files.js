// `sandbox.files`: the sandbox's filesystem from outside, with E2B's method names. Paths are as
// the sandbox sees them (relative ones from /home/user); the daemon jails them in the sandbox's
// root and acts as the sandbox user, so read-only system directories give SbxError code 1
// ("EROFS: ...") and the sandbox's size limits apply.

import { toBuffer } from "./bytes.js";
import { SbxError } from "./errors.js";

// Bytes per request: the daemon reads at most 4 MiB per call, and a base64 request must stay
// under its 8 MiB line limit.
export const CHUNK = 4 * 1024 * 1024;

export class Files {
  constructor(client, sandboxId) {
    this._client = client;
    this._sandboxId = sandboxId;
  }

  _call(method, params) {
    params.sandboxId = this._sandboxId;
    return this._client.request(method, params);
  }

  /**
   * The file's content: text (UTF-8, invalid bytes replaced) by default, or with
   * {format: "bytes"} a Uint8Array. Larger files are fetched in 4 MiB pieces.
   */
  async read(path, opts = {}) {
    const parts = [];
    let have = 0;
    for (;;) {
      const r = await this._call("files.read", { path, offset: have, length: CHUNK });
      const part = Buffer.from(r.data ?? "", "base64");
      parts.push(part);
      have += part.length;
      if (have >= r.size || !r.length) break;
    }
    const data = parts.length === 1 ? parts[0] : Buffer.concat(parts);
    return opts.format === "bytes" ? data : data.toString("utf8");
  }

  /**
   * Writes a file (text as UTF-8, or bytes), creating missing parents, all or nothing: a
   * failed write leaves no file and no temp file behind. Over 4 MiB it goes as an upload in
   * 4 MiB parts that the daemon renames into place with the last. opts.mode: permission bits.
   */
  async write(path, data, opts = {}) {
    const raw = toBuffer(data);
    const first = { path, data: raw.subarray(0, CHUNK).toString("base64") };
    if (opts.mode != null) first.mode = opts.mode;
    if (raw.length <= CHUNK) {
      await this._call("files.write", first);
      return;
    }
    const { uploadId } = await this._call("files.write", { ...first, upload: "begin" });
    try {
      for (let off = CHUNK; off < raw.length; off += CHUNK) {
        await this._call("files.write", {
          path, uploadId, upload: off + CHUNK >= raw.length ? "commit" : "append",
          data: raw.subarray(off, off + CHUNK).toString("base64"),
        });
      }
    } catch (e) {
      // The daemon ends an upload with the request that failed; anything else (a dead
      // connection aside) could leave its temp file, so it is aborted.
      if (!(e instanceof SbxError)) {
        await this._call("files.write", { path, upload: "abort", uploadId }).catch(() => {});
      }
      throw e;
    }
  }

  /** Entries below a directory, opts.depth levels deep (default 1). */
  async list(path, opts = {}) {
    return (await this._call("files.list", { path, depth: opts.depth ?? 1 })).entries;
  }

  /** Describes a path (a symlink itself, not what it points to). */
  getInfo(path) {
    return this._call("files.stat", { path });
  }

  /** Whether something exists at path. */
  async exists(path) {
    return !!(await this._call("files.exists", { path })).exists;
  }

  /** Creates a directory and (unless opts.parents is false) its missing parents. */
  async makeDir(path, opts = {}) {
    await this._call("files.mkdir", { path, parents: opts.parents ?? true });
  }

  /** Removes a file or (unless opts.recursive is false) a directory tree. */
  async remove(path, opts = {}) {
    await this._call("files.rm", { path, recursive: opts.recursive ?? true });
  }

  /** Renames or moves a path; an existing target is replaced. */
  async rename(oldPath, newPath) {
    await this._call("files.rename", { from: oldPath, to: newPath });
  }
}
