/* SPDX-License-Identifier: MIT */
/* Handlers for OCI images (sbx/image.h): image.import, .list, .inspect, .remove. An import
 * and a removal are jobs of the store, answered through their callbacks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/macro.h"
#include "sbx/image.h"
#include "server/handler.h"
#include "methods/methods.h"

/* The record with what only the daemon knows: the sandboxes made from it that live. */
static json_t *image_json(const SbxImageInfo *i) {
        json_t *j = json_loads(i->json, 0, NULL);
        if (j)
                json_object_set_new(j, "sandboxes", json_integer(i->sandboxes));
        return j;
}

static int fail_store(RpcError *e, int r, const char *err) {
        return rpc_fail(e, r == -EINVAL || r == -ENOENT ? RPC_INVALID_PARAMS : RPC_SANDBOX_ERROR, "%s%s%s",
                        r == -EINVAL || r == -ENOENT ? "" : strerrorname_np(-r) ? strerrorname_np(-r) : "EIO",
                        r == -EINVAL || r == -ENOENT ? "" : ": ", err);
}

static void image_done(void *ud, int error, const char *message, const SbxImageInfo *img) {
        Pending *p = ud;
        if (p->conn) {
                if (error < 0) {
                        RpcError e;
                        fail_store(&e, error == -ECANCELED ? -ESHUTDOWN : error, message ? message : "failed");
                        conn_reply_error(p->conn, p->id, &e);
                } else if (img) {
                        json_t *j = image_json(img);
                        conn_reply(p->conn, p->id, j ? json_pack("{s:o}", "image", j) : json_pack("{s:b}", "ok", 1));
                } else {
                        conn_reply(p->conn, p->id, handler_ok_json());
                }
        }
        pending_free(p);
}

/* image.progress {requestId, layer, layers, bytes, done, have}: where an import is. */
static void image_progress(void *ud, const SbxImageProgress *pr) {
        Pending *p = ud;
        if (p->conn)
                conn_notify(p->conn, "image.progress",
                            json_pack("{s:O, s:i, s:i, s:I, s:b, s:b}", "requestId", p->id, "layer", (int)pr->layer,
                                      "layers", (int)pr->layers, "bytes", (json_int_t)pr->bytes, "done", pr->done,
                                      "have", pr->have));
}

static int m_image_import(Req *r, json_t **ret, RpcError *e) {
        const char *path, *name = NULL;
        char err[512];
        Pending *p;
        if (param_string(r->params, "path", true, &path, NULL, e) < 0 ||
            param_string(r->params, "name", false, &name, NULL, e) < 0)
                return -1;
        if (pending_new(&r->core->pending, r->core, r->conn, r->id, PENDING_OP, &p) < 0)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        /* A socket's client imports only what it could read itself; stdio's is the daemon's user. */
        int as = conn_is_stdio(r->conn) ? -1 : (int)conn_uid(r->conn);
        int rr = sbx_image_import(r->core->ctx, path, name, as, image_progress, image_done, p, err, sizeof err);
        if (rr < 0) {
                pending_free(p);
                return fail_store(e, rr, err);
        }
        return 1;
}

static int m_image_remove(Req *r, json_t **ret, RpcError *e) {
        const char *ref;
        char err[512];
        Pending *p;
        if (param_string(r->params, "image", true, &ref, NULL, e) < 0)
                return -1;
        if (pending_new(&r->core->pending, r->core, r->conn, r->id, PENDING_OP, &p) < 0)
                return rpc_fail(e, RPC_INTERNAL_ERROR, "out of memory");
        int rr = sbx_image_remove(r->core->ctx, ref, image_done, p, err, sizeof err);
        if (rr < 0) {
                pending_free(p);
                return fail_store(e, rr, err);
        }
        return 1;
}

static int m_image_list(Req *r, json_t **ret, RpcError *e) {
        SbxContext *ctx = r->core->ctx;
        json_t *a = json_array();
        SbxImageInfo info;
        for (size_t i = 0; a && sbx_image_get(ctx, i, &info) >= 0; i++)
                json_array_append_new(a, image_json(&info));
        uint64_t max, used = sbx_image_store_bytes(ctx, &max);
        const char *dir = sbx_image_store_dir(ctx);
        *ret = json_pack("{s:o, s:o, s:I, s:I}", "images", a ? a : json_array(), "store", dir ? json_string(dir) : json_null(),
                         "storeBytes", (json_int_t)used, "storeMaxBytes", (json_int_t)max);
        return 0;
}

static int m_image_inspect(Req *r, json_t **ret, RpcError *e) {
        const char *ref;
        SbxImageInfo info;
        if (param_string(r->params, "image", true, &ref, NULL, e) < 0)
                return -1;
        int rr = sbx_image_find(r->core->ctx, ref, &info);
        if (rr == -EINVAL)
                return rpc_fail(e, RPC_INVALID_PARAMS, "'%.200s' begins more than one image's id: give more of it", ref);
        if (rr < 0)
                return rpc_fail(e, RPC_INVALID_PARAMS, "no image '%.200s'%s", ref,
                                sbx_image_store_dir(r->core->ctx) ? "" : " (the daemon has no image store)");
        *ret = image_json(&info);
        return 0;
}

static const Param p_image_import[] = {
        { "path", P_STRING, true, "absolute path on the daemon's host: an OCI layout directory, an OCI archive, or a `docker save` / `podman save` tar (compressed or not), read with the client's rights" },
        { "name", P_STRING, false, "name:tag it gets (\"x\" is \"x:latest\"); else the names it carries (RepoTags, io.containerd.image.name, a ref.name with a repository); with several images in the input, the one of this name is taken" },
        { 0 } };
static const Param p_image_ref[] = {
        { "image", P_STRING, true, "a name (\"busybox\" is \"busybox:latest\"), the id (\"sha256:HEX\"), or 12 or more hex digits that begin one id" },
        { 0 } };

const Method server_methods_oci[] = {
        { "image.import", m_image_import, 0, p_image_import,
          "{image: {id, names, layers: [{diffId, bytes, entries, dropped, stripped}], bytes, bash, config: {env, workingDir, user, entrypoint, cmd, startCommand (entrypoint and cmd as one bash line, single-quoted: what the image would run, never run unasked), architecture, os, created}, source, manifest, importedAt, newLayers, sandboxes}}",
          "Imports an image into the daemon's store (sbx serve --image-store), answered when done; meanwhile the notification `image.progress` {requestId, layer, layers, bytes, done, have} says where it is, as each layer starts and ends and every 16 MiB of one (bytes of that layer, as the store counts them; have: the store had it, nothing read). Each layer is unpacked once, by its diff id, and shared by every image and sandbox that has it: a layer the store has is not read again (newLayers says how many were). Checked as untrusted input: the config's digest against the manifest's, each layer's diff id (and an OCI blob's digest) against its bytes; a path out of a layer, a hard link to what is not in it, indexes that loop or nest past 4, a layer or archive past the store's room, an image for another architecture: refused with one line saying which. Device nodes are left out (dropped) and setuid/setgid bits taken off (stripped), extended attributes never kept. A half-imported image is never listed. A name another image had moves to this one." },
        { "image.list", m_image_list, 0, handler_params_none,
          "{images: [image], store, storeBytes, storeMaxBytes}", "The images of the store, as image.import answers them." },
        { "image.inspect", m_image_inspect, 0, p_image_ref, "image", "One image of the store." },
        { "image.remove", m_image_remove, 0, p_image_ref, "{ok: true}",
          "Takes a name off its image, or, given the id or the image's last name, removes the image and the layers no other image has. Refused while a sandbox made from it lives." },
        { 0 } };
