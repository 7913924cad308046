/* SPDX-License-Identifier: MIT */
/* Helpers of the CLI's process subcommands: process lookup, exit status, output bytes. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/macro.h"
#include "base/text.h"
#include "base/util.h"
#include "cli/procs.h"
#include "rpc/jsonrpc.h"

int procs_find(Client *c, const char *sandbox, const char *proc, json_t **ret, ClientError *err) {
        json_t *res = NULL;
        if (client_request(c, "process.list", json_pack("{s:s}", "sandboxId", sandbox), NULL, NULL, &res, err) < 0)
                return -1;
        uint64_t pid = 0;
        bool by_pid = parse_u64(proc, INT32_MAX, &pid) == 0;
        json_t *list = json_object_get(res, "processes"), *found = NULL, *p;
        size_t i;
        json_array_foreach(list, i, p) {
                bool match = by_pid ? json_integer_value(json_object_get(p, "pid")) == (json_int_t)pid
                                    : strcmp(json_string_value(json_object_get(p, "processId")) ?: "", proc) == 0;
                if (!match)
                        continue;
                /* The list is oldest first: a later match is newer, a running one wins. */
                const char *st = json_string_value(json_object_get(p, "status"));
                bool running = st && strcmp(st, "running") == 0;
                const char *fst = found ? json_string_value(json_object_get(found, "status")) : NULL;
                if (!found || running || !(fst && strcmp(fst, "running") == 0))
                        found = p;
        }
        if (!found) {
                json_decref(res);
                err->code = RPC_INVALID_PARAMS;
                err->errnum = 0;
                snprintf(err->message, sizeof err->message, "Unknown processId: %s (sandbox %s has no process %s %s)", proc,
                         sandbox, by_pid ? "with pid" : "named", proc);
                return -1;
        }
        *ret = json_incref(found);
        json_decref(res);
        return 0;
}

/* A signal's number from its name with or without SIG ("TERM", "SIGKILL"), 0 if unknown. */
static int signal_number(const char *name) {
        if (strncmp(name, "SIG", 3) == 0)
                name += 3;
        for (int s = 1; s < NSIG; s++) {
                const char *abbrev = sigabbrev_np(s);
                if (abbrev && strcmp(abbrev, name) == 0)
                        return s;
        }
        return 0;
}

int procs_exit_status(json_t *obj) {
        json_t *code = json_object_get(obj, "exitCode");
        if (json_is_integer(code))
                return (int)(json_integer_value(code) & 0xff);
        json_t *sig = json_object_get(obj, "signal");
        int n = json_is_integer(sig) ? (int)json_integer_value(sig)
                : json_is_string(sig)  ? signal_number(json_string_value(sig))
                                       : 0;
        if (n > 0 && n < NSIG)
                return 128 + n;
        /* A leftover (what a command left running, maybe many processes) has no status of its
         * own: 0 once all of it ended, as if KILLed when it was killed or timed out. */
        const char *status = json_string_value(json_object_get(obj, "status"));
        if (status && (strcmp(status, "killed") == 0 || strcmp(status, "timeout") == 0))
                return 128 + SIGKILL;
        return status && strcmp(status, "exited") == 0 ? 0 : 1;
}

bool procs_exit_known(json_t *obj) {
        return json_is_integer(json_object_get(obj, "exitCode")) || json_is_integer(json_object_get(obj, "signal")) ||
               json_is_string(json_object_get(obj, "signal"));
}

static bool raw_output;
/* Per fd (stdout, stderr): whether it is shown, known once asked; a lead byte of a C1 control
 * (0xc2) that ended the last piece, waiting for the byte that says whether it starts one. */
static struct Shown {
        int known; /* 0 not asked yet, 1 shown, -1 raw */
        bool carry;
} shown[3];

void procs_set_raw(bool raw) { raw_output = raw; }

/* Writes what a sandbox sent to a terminal with its control characters as text
 * (text_show_controls()). */
static int write_shown(int fd, struct Shown *st, const uint8_t *d, size_t len) {
        char out[TEXT_SHOWN_MAX(2048)];
        for (size_t i = 0; i < len; i += 2048) {
                size_t k = MIN(len - i, (size_t)2048);
                int r = write_all(fd, out, text_show_controls(d + i, k, &st->carry, out));
                if (r < 0)
                        return r;
        }
        return 0;
}

static int write_out(int fd, const void *d, size_t len) {
        struct Shown *st = fd >= 1 && fd <= 2 ? &shown[fd] : NULL;
        if (st && !st->known)
                st->known = !raw_output && isatty(fd) ? 1 : -1;
        return st && st->known > 0 ? write_shown(fd, st, d, len) : write_all(fd, d, len);
}

int procs_write_bytes(int fd, json_t *obj, const char *key, const char *enc_key) {
        json_t *v = json_object_get(obj, key);
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (!s || n == 0)
                return 0;
        const char *enc = json_string_value(json_object_get(obj, enc_key));
        if (!enc || strcmp(enc, "base64") != 0)
                return write_out(fd, s, n);
        size_t len = 0;
        _cleanup_free_ uint8_t *d = b64_decode(s, n, &len);
        if (!d)
                return errno == ENOMEM ? -ENOMEM : -EBADMSG;
        return write_out(fd, d, len);
}

void procs_print_text(FILE *f, const char *s) {
        for (; s && *s; s++) {
                unsigned char ch = (unsigned char)*s;
                if (ch == '\n')
                        fputs("\\n", f);
                else if (ch == '\t')
                        fputs("\\t", f);
                else if (ch < 0x20 || ch == 0x7f)
                        fprintf(f, "\\x%02x", ch);
                else
                        fputc(ch, f);
        }
}
