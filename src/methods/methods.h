/* SPDX-License-Identifier: MIT */
/* The protocol's methods: each handler file's rows of the method table (`Method`,
 * server/handler.h) and the handlers they name, on top of the server's request machinery
 * (server/: dispatch, pending, lanes, registry, audit). The program that serves them hands the
 * list to the dispatcher (dispatch_set_methods()). */
#pragma once
#include <jansson.h>
#include "rpc/jsonrpc.h"
#include "server/handler.h"

/* Every table below, NULL-terminated, in the order of docs/PROTOCOL.md. */
extern const Method *const server_method_tables[];

extern const Method server_methods_sandbox[]; /* m_sandbox.c: sandboxes and sessions */
extern const Method server_methods_run[];     /* m_run.c: runs, env, history */
extern const Method server_methods_process[]; /* m_process.c */
extern const Method server_methods_files[];   /* m_files.c */
extern const Method server_methods_watch[];   /* m_watch.c: files.watch, files.unwatch */
extern const Method server_methods_image[];   /* m_image.c: fork, snapshots, export/import */
extern const Method server_methods_server[];  /* m_server.c: health, ping, kill */
extern const Method server_methods_port[];    /* m_port.c: exposed ports */
extern const Method server_methods_code[];    /* m_code.c: code contexts and cells */
extern const Method server_methods_oci[];     /* m_oci.c: OCI images (image.*) */

/* m_sandbox.c: checks a create's sandbox params as a create would read them (limits' keys
 * and ranges, policy, network, metadata, secrets), without creating anything. Returns 0 or -1
 * with e set. */
int sandbox_params_check(json_t *params, RpcError *e);
