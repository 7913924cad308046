/* SPDX-License-Identifier: MIT */
/* One JSON-RPC request to a running `sbx serve --socket` (for sbx export and sbx import). */
#pragma once
#include <jansson.h>
#include <stddef.h>

/* Sends method(params) (params is taken over) and waits for the answer. Returns 0 with
 * *ret_result set (the caller's to json_decref), or -1 with err saying why: the connection,
 * or the server's error message. */
int client_call(const char *socket_path, const char *method, json_t *params, json_t **ret_result, char *err,
                size_t errlen);
