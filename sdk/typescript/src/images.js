// `sandbox.images`: the daemon's image store (sbx serve --image-store DIR), shared by every
// connection. A sandbox made with the `image` option has one of them as its root.

import { resolve } from "node:path";

export class Images {
  constructor(client) {
    this._client = client;
  }

  /**
   * Imports an OCI layout directory, an OCI archive or a `docker save` / `podman save` tar
   * (compressed or not) at `path` on this host (image.import; a relative path is resolved
   * here) and resolves with the image's record once it is in the store, which may take
   * seconds. opts.name (or a string in its place: "x:tag", "x" is "x:latest") names it; else
   * the names the input carries. Rejects with SbxError when the server has no store or refuses
   * the input (one line says why).
   */
  async importImage(path, opts = {}) {
    const name = typeof opts === "string" ? opts : opts?.name;
    const params = { path: resolve(String(path)) };
    if (name != null) params.name = String(name);
    return (await this._client.request("image.import", params)).image;
  }

  /** The records of the store's images (image.list). */
  async list() {
    return (await this._client.request("image.list")).images;
  }

  /** One image's record, by name, id ("sha256:HEX") or 12+ hex digits of its id; -32602 when none. */
  inspect(ref) {
    return this._client.request("image.inspect", { image: String(ref) });
  }

  /**
   * Takes a name off its image; given the id or the image's last name, removes the image and
   * the layers no other image has (image.remove). Refused while a sandbox made from it lives.
   */
  async remove(ref) {
    await this._client.request("image.remove", { image: String(ref) });
  }
}
