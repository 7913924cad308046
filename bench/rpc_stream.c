/* SPDX-License-Identifier: MIT */
/* sbx-bench-rpc o: a process writing 1 GiB of 'x' (`head -c N /dev/zero | tr '\0' x`, so JSON
 * strings), then 256 MiB of 0xFF bytes (base64), through `process.stream`: MB/s of payload
 * received, every piece checked (cursors contiguous, content, total exact, what the log
 * dropped), and the server's VmRSS before, during, after (and VmHWM, reset first). The process
 * waits for a line on its stdin, so the stream is in place before its first byte; the generator
 * alone (into /dev/null, in the same sandbox) is timed too.
 *
 * The pieces are checked in the raw lines, not parsed: the server writes compact JSON and a
 * quote inside a string is always escaped, so a raw `"key":` can only be a key, and parsing
 * 1 GiB would make this client the bottleneck it measures. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/macro.h"
#include "rpc_benches.h"
#include "rpc_common.h"

/* ------------------------------------------------------------------ the server's memory */

/* VmRSS and VmHWM of a process, in kB (0 when unreadable). */
static void proc_rss_kb(pid_t pid, long *rss, long *hwm) {
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
        *rss = *hwm = 0;
        FILE *f = fopen(path, "re");
        if (!f)
                return;
        while (fgets(line, sizeof line, f)) {
                if (strncmp(line, "VmRSS:", 6) == 0)
                        *rss = strtol(line + 6, NULL, 10);
                else if (strncmp(line, "VmHWM:", 6) == 0)
                        *hwm = strtol(line + 6, NULL, 10);
        }
        fclose(f);
}

/* Sets VmHWM back to the current VmRSS (proc(5), clear_refs "5"), so that the peak read later
 * is the peak of what comes after. */
static bool proc_reset_hwm(pid_t pid) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pid);
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        return write(fd, "5", 1) == 1;
}

/* ------------------------------------------------------------------ raw lines */

/* An integer `"key":N` within [from, to): the parts of a line around a big data string, so
 * that the string itself is not scanned again. */
static bool raw_int_in(const char *from, const char *to, const char *key, long long *ret) {
        char pat[64];
        int n = snprintf(pat, sizeof pat, "\"%s\":", key);
        const char *p = to > from ? memmem(from, (size_t)(to - from), pat, (size_t)n) : NULL;
        if (!p)
                return false;
        char *end;
        long long v = strtoll(p + n, &end, 10);
        if (end == p + n)
                return false;
        *ret = v;
        return true;
}

/* Whether a line is the notification `method`: the server writes "jsonrpc", then "method",
 * so it is in the first bytes; a full search only if not (another key order). */
static bool raw_is_notification(const char *line, size_t len, const char *method) {
        char pat[64];
        int n = snprintf(pat, sizeof pat, "\"method\":\"%s\"", method);
        if (memmem(line, (len < 80 ? len : 80), pat, (size_t)n))
                return true;
        return len > 80 && strncmp(line, "{\"jsonrpc\":\"2.0\",\"method\":", 26) != 0 && strstr(line, pat) != NULL;
}

/* The decoded length of a JSON string's raw text (n bytes, no quotes): escapes count as
 * the bytes they stand for (\uXXXX as its UTF-8 length, a surrogate pair as 4). */
static uint64_t json_unescaped_len(const char *s, size_t n) {
        uint64_t len = 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] != '\\' || i + 1 >= n) {
                        len++;
                        continue;
                }
                i++;
                if (s[i] != 'u') {
                        len++;
                        continue;
                }
                unsigned v = i + 4 < n ? (unsigned)strtoul((char[5]){ s[i + 1], s[i + 2], s[i + 3], s[i + 4], 0 }, NULL, 16)
                                       : 0;
                len += v < 0x80 ? 1 : v < 0x800 ? 2 : v >= 0xD800 && v < 0xDC00 ? 4 : v >= 0xDC00 && v < 0xE000 ? 0 : 3;
                i += 4;
        }
        return len;
}

/* ------------------------------------------------------------------ o */

/* Results kept for the report. */
typedef struct StreamResult {
        bool have, ok;
        const char *what;        /* "ASCII" or "binary" */
        char command[300];
        uint64_t want, bytes, dropped, pieces, wire;
        unsigned gaps, dups, bad_content, bad_lines;
        double first_ms, total_ms, mb_s, wire_mb_s, producer_mb_s;
        long rss0, rss_peak, hwm, rss1;    /* the server's, kB */
        long long log_end;      /* process.list's logEnd after the answer: what the log got */
        double srv_cpu_s, cli_cpu_s, srv_run_s, srv_wait_s;
        char status[160];
        char first_bad[300];
} StreamResult;

static StreamResult streams[2];

/* The expected content: every byte 'x' (ASCII), or every byte 0xFF, whose base64 is "////"
 * with "/w==" or "//8=" for a last 1 or 2 bytes. */
static char pat_x[65536], pat_slash[65536];

static bool all_same(const char *s, size_t n, const char *pat) {
        for (size_t o = 0; o < n; o += sizeof pat_x)
                if (memcmp(s + o, pat, (n - o < sizeof pat_x ? n - o : sizeof pat_x)) != 0)
                        return false;
        return true;
}

/* The first unreadable line, for the report. */
static void bad_line(StreamResult *r, const char *l) {
        if (r->bad_lines++ == 0)
                snprintf(r->first_bad, sizeof r->first_bad, "%.240s", l);
}

/* Checks one process.output line (len bytes) against r: the cursor follows on from the
 * last one (no gap, no byte twice), the data is what the generator writes. */
static void stream_piece(StreamResult *r, uint64_t *next, const char *l, size_t len) {
        const char *end = l + len;
        const char *d = strstr(l, "\"data\":\"");
        long long cursor = -1, dropped = 0;
        if (!d) {
                bad_line(r, l);
                return;
        }
        d += 8;
        const char *e = d;
        for (;;) {
                e = memchr(e, '"', (size_t)(end - e));
                if (!e)
                        break;
                const char *b = e;
                while (b > d && b[-1] == '\\')
                        b--;
                if ((e - b) % 2 == 0)
                        break;
                e++;
        }
        if (!e || (!raw_int_in(l, d, "cursor", &cursor) && !raw_int_in(e, end, "cursor", &cursor))) {
                bad_line(r, l);
                return;
        }
        (void)raw_int_in(e, end, "dropped", &dropped);
        size_t raw = (size_t)(e - d);
        bool b64 = memmem(e, (size_t)(end - e), "\"dataEncoding\":\"base64\"", 23) != NULL;
        uint64_t n;
        bool content_ok;
        if (b64) {
                size_t pad = raw >= 1 && d[raw - 1] == '=' ? raw >= 2 && d[raw - 2] == '=' ? 2 : 1 : 0;
                n = raw % 4 == 0 ? raw / 4 * 3 - pad : 0;
                content_ok = raw % 4 == 0 && raw >= 4 && all_same(d, raw - 4, pat_slash) &&
                             (memcmp(d + raw - 4, "////", 4) == 0 || memcmp(d + raw - 4, "/w==", 4) == 0 ||
                              memcmp(d + raw - 4, "//8=", 4) == 0);
        } else {
                n = memchr(d, '\\', raw) ? json_unescaped_len(d, raw) : raw;
                content_ok = all_same(d, raw, pat_x);
        }
        r->wire += len + 1;
        if (dropped > 0) {
                /* The log lost bytes before the cursor asked for: one notification, empty data,
                 * its cursor where the bytes kept begin. */
                r->dropped += (uint64_t)dropped;
                if ((uint64_t)cursor - (uint64_t)dropped != *next)
                        r->gaps++;
                *next = (uint64_t)cursor;
                return;
        }
        r->pieces++;
        r->bytes += n;
        if (!content_ok || b64 != (r->what[0] == 'b')) {
                if (r->bad_content++ == 0)
                        snprintf(r->first_bad, sizeof r->first_bad, "piece at cursor %lld: %.80s", cursor, d);
        }
        if ((uint64_t)cursor - n > *next)
                r->gaps++;
        else if ((uint64_t)cursor - n < *next)
                r->dups++;
        *next = (uint64_t)cursor;
}

/* The time (ms) of the generator alone in this sandbox, into /dev/null, no pipe to us; its
 * rate goes to r->producer_mb_s. */
static void time_generator(Client *c, StreamResult *r, const char *gen) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "%s >/dev/null", gen);
        uint64_t t0 = bench_now_ns();
        _cleanup_(json_decrefp) json_t *a =
                client_call_json(c, "run", json_pack("{s:s, s:i}", "command", cmd, "timeoutMs", 600000));
        double gen_ms = bench_ms_between(t0, c->t_line);
        long long ec = -1;
        if (answer_is_error(a) || !answer_int(a, "exitCode", &ec) || ec != 0) {
                char d[260];
                answer_describe(d, sizeof d, a);
                bench_note("o: the generator alone (`%s`) failed: %.200s", cmd, d);
        } else {
                r->producer_mb_s = (double)r->want / 1e6 / (gen_ms / 1e3);
        }
}

/* Reads the stream of process.stream qid (process.write wid sent "go") up to its answer,
 * returned (NULL when the connection failed: r->first_bad says so); every piece checked into
 * r, the server's RSS sampled every 16 MiB. */
static json_t *read_stream(Client *c, StreamResult *r, long qid, long wid, uint64_t *next, uint64_t *t_first,
                           uint64_t *t_last, bool *exit_seen) {
        uint64_t next_sample = 16u << 20;
        for (;;) {
                size_t len;
                char *l = client_take_line(c, &len);
                if (!l) {
                        ssize_t k = client_fill(c);
                        if (k <= 0) {
                                snprintf(r->first_bad, sizeof r->first_bad, "the connection %s after %" PRIu64 " bytes",
                                         k == 0 ? "closed" : "failed", r->bytes);
                                return NULL;
                        }
                        continue;
                }
                if (raw_is_notification(l, len, "process.output")) {
                        uint64_t before = r->bytes;
                        stream_piece(r, next, l, len);
                        if (r->bytes > before) {
                                *t_last = bench_now_ns();
                                if (!*t_first)
                                        *t_first = *t_last;
                        }
                        if (r->bytes >= next_sample) {
                                long rss, hwm;
                                proc_rss_kb(bench_srv.pid, &rss, &hwm);
                                if (rss > r->rss_peak)
                                        r->rss_peak = rss;
                                next_sample += 16u << 20;
                        }
                        continue;
                }
                if (raw_is_notification(l, len, "process.exit")) {
                        *exit_seen = true;
                        continue;
                }
                json_t *msg = client_parse(l, len);
                long rid = answer_id(msg);
                if (rid == wid && answer_is_error(msg))
                        snprintf(r->first_bad, sizeof r->first_bad, "process.write: %.200s", l);
                if (rid == qid)
                        return msg;
                json_decref(msg);
        }
}

/* process.list's logEnd of process id, a moment after its stream: what its log holds in all
 * (bytes the stream did not send, if more); -1 when not listed. */
static long long log_end(Client *c, const char *id) {
        sleep_us(100000);
        _cleanup_(json_decrefp) json_t *list = client_call(c, "process.list", NULL);
        size_t i;
        json_t *p;
        json_array_foreach(answer_get(list, "processes"), i, p) {
                const char *pid = json_string_value(json_object_get(p, "processId"));
                json_t *end = json_object_get(p, "logEnd");
                if (pid && strcmp(pid, id) == 0)
                        return json_is_integer(end) ? json_integer_value(end) : -1;
        }
        return -1;
}

/* Streams one process that writes r->want bytes once it reads a line on its stdin (so that
 * the stream is in place before the first byte): the line written -> the answer to the
 * stream, every piece checked, the server's RSS sampled. */
static void stream_one(Client *c, StreamResult *r, const char *gen) {
        char params[256], id[40], err[300];
        snprintf(r->command, sizeof r->command, "%s", gen);
        time_generator(c, r, gen);
        sleep_us(cfg.quiet_ms * 1000);

        char cmd[600];
        snprintf(cmd, sizeof cmd, "read -r go && %s", gen);
        if (!proc_start(c, json_pack("{s:s, s:b}", "command", cmd, "stdin", 1), id, sizeof id, err, sizeof err)) {
                snprintf(r->first_bad, sizeof r->first_bad, "process.start: %.250s", err);
                r->have = true;
                return;
        }
        /* The server's peak from here on, not from the benchmarks before. */
        if (!proc_reset_hwm(bench_srv.pid))
                bench_note("o: cannot reset the server's VmHWM (/proc/%d/clear_refs): %s", (int)bench_srv.pid, strerror(errno));
        long hwm;
        proc_rss_kb(bench_srv.pid, &r->rss0, &hwm);
        r->rss_peak = r->rss0;
        double srv0 = proc_cpu_s(bench_srv.pid), cli0 = proc_cpu_s(getpid()), run0, wait0;
        proc_schedstat(bench_srv.pid, &run0, &wait0);

        snprintf(params, sizeof params, "{\"processId\":\"%s\",\"cursor\":0}", id);
        uint64_t t0 = bench_now_ns();
        long qid = client_send_or_die(c, "process.stream", params);
        snprintf(params, sizeof params, "{\"processId\":\"%s\",\"data\":\"Z28K\"}", id); /* "go\n" */
        long wid = client_send_or_die(c, "process.write", params);
        uint64_t next = 0, t_first = 0, t_last = 0;
        bool exit_seen = false;
        _cleanup_(json_decrefp) json_t *a = read_stream(c, r, qid, wid, &next, &t_first, &t_last, &exit_seen);
        if (!a) {
                r->have = true;
                return;
        }
        uint64_t t_end = c->t_line;
        r->srv_cpu_s = proc_cpu_s(bench_srv.pid) - srv0;
        r->cli_cpu_s = proc_cpu_s(getpid()) - cli0;
        proc_schedstat(bench_srv.pid, &r->srv_run_s, &r->srv_wait_s);
        r->srv_run_s -= run0;
        r->srv_wait_s -= wait0;
        proc_rss_kb(bench_srv.pid, &r->rss1, &r->hwm);
        if (r->rss1 > r->rss_peak)
                r->rss_peak = r->rss1;
        long long cur = -1, ecode = -1;
        const char *st = answer_str(a, "status");
        (void)answer_int(a, "cursor", &cur);
        (void)answer_int(a, "exitCode", &ecode);
        snprintf(r->status, sizeof r->status, "%s, exit code %lld, final cursor %lld, process.exit %s", st ? st : "?",
                 ecode, cur, exit_seen ? "sent" : "missing");
        r->log_end = log_end(c, id);
        r->first_ms = t_first ? bench_ms_between(t0, t_first) : 0;
        r->total_ms = bench_ms_between(t0, t_end);
        double span_s = t_last > t0 ? bench_ms_between(t0, t_last) / 1e3 : 0;
        r->mb_s = span_s > 0 ? (double)r->bytes / 1e6 / span_s : 0;
        r->wire_mb_s = span_s > 0 ? (double)r->wire / 1e6 / span_s : 0;
        r->ok = !answer_is_error(a) && st && strcmp(st, "exited") == 0 && ecode == 0 && exit_seen &&
                cur == (long long)r->want && r->bytes + r->dropped == r->want && next == r->want && !r->gaps &&
                !r->dups && !r->bad_content && !r->bad_lines;
        r->have = true;
}

void bench_stream(Client *ctl) {
        memset(pat_x, 'x', sizeof pat_x);
        memset(pat_slash, '/', sizeof pat_slash);
        Client c;
        rpc_open_with_sandbox(&c);
        /* Lines of about 64 KiB come one after the other: read them in big gulps. */
        if (client_reserve(&c, 8u << 20) < 0)
                bench_die("out of memory");
        char gen[300];
        for (int k = 0; k < 2; k++) {
                StreamResult *r = &streams[k];
                uint64_t n = k == 0 ? cfg.stream_bytes : cfg.stream_bin_bytes;
                if (!n)
                        continue;
                r->what = k == 0 ? "ASCII" : "binary";
                r->want = n;
                if (k == 0 && cfg.stream_cmd)
                        snprintf(gen, sizeof gen, "%s", cfg.stream_cmd);
                else
                        snprintf(gen, sizeof gen, "head -c %" PRIu64 " /dev/zero | tr '\\0' %s", n, k == 0 ? "x" : "'\\377'");
                bench_progress("o: process.stream of `%s` (%" PRIu64 " bytes, %s)", gen, n, k == 0 ? "JSON strings" : "base64");
                stream_one(&c, r, gen);
                if (!r->ok)
                        bench_note("o (%s): not as expected: %" PRIu64 " bytes received, %" PRIu64 " dropped, %u gaps, "
                                   "%u duplicates, %u pieces with other content, %u unreadable lines; %s; %s",
                                   r->what, r->bytes, r->dropped, r->gaps, r->dups, r->bad_content, r->bad_lines,
                                   r->status, r->first_bad);
                bench_progress("o: %.0f MB/s of payload in %.2f s (the generator alone %.0f MB/s), %" PRIu64 " dropped; "
                               "server RSS %ld -> peak %ld (VmHWM %ld) -> %ld kB; CPU-s: server %.2f, client %.2f",
                               r->mb_s, r->total_ms / 1e3, r->producer_mb_s, r->dropped, r->rss0, r->rss_peak, r->hwm,
                               r->rss1, r->srv_cpu_s, r->cli_cpu_s);
        }
        client_close(&c);
        (void)wait_no_sandboxes(ctl, 10000);
}

/* ------------------------------------------------------------------ report */

/* A row of the stream table: one cell per variant measured. */
static void stream_row(const char *name, void (*cell)(const StreamResult *r, char *buf, size_t size)) {
        printf("| %s |", name);
        for (int k = 0; k < 2; k++) {
                char buf[400] = "–";
                if (streams[k].have)
                        cell(&streams[k], buf, sizeof buf);
                printf(" %s |", buf);
        }
        printf("\n");
}

static void c_cmd(const StreamResult *r, char *b, size_t n) { snprintf(b, n, "`read -r go && %s`", r->command); }
static void c_bytes(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%" PRIu64 " of %" PRIu64 " (%s); %" PRIu64 " dropped by the log", r->bytes, r->want,
                 r->bytes + r->dropped == r->want ? "all accounted for" : "**some missing**", r->dropped);
}
static void c_pieces(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%" PRIu64 " `process.output`; cursors: %u gaps, %u duplicates; %u with other content, "
                 "%u unreadable", r->pieces, r->gaps, r->dups, r->bad_content, r->bad_lines);
}
static void c_end(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%s; logEnd %lld a moment later", r->status, r->log_end);
}
static void c_first(const StreamResult *r, char *b, size_t n) { snprintf(b, n, "%.2f ms", r->first_ms); }
static void c_rate(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "**%.0f MB/s** (%.2f s to the last piece)", r->mb_s, r->mb_s > 0 ? (double)r->bytes / 1e6 / r->mb_s : 0);
}
static void c_wire(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%.0f MB/s (%" PRIu64 " bytes of lines)", r->wire_mb_s, r->wire);
}
static void c_gen(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, r->producer_mb_s > 0 ? "%.0f MB/s" : "failed", r->producer_mb_s);
}
static void c_rss(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%ld → %ld → %ld kB (VmHWM %ld kB)", r->rss0, r->rss_peak, r->rss1, r->hwm);
}
static void c_srv(const StreamResult *r, char *b, size_t n) {
        snprintf(b, n, "%.2f CPU-s (on a CPU %.2f s, waiting for one %.2f s, of %.2f s)", r->srv_cpu_s, r->srv_run_s,
                 r->srv_wait_s, r->total_ms / 1e3);
}
static void c_cli(const StreamResult *r, char *b, size_t n) { snprintf(b, n, "%.2f CPU-s", r->cli_cpu_s); }

void stream_report(void) {
        if (!streams[0].have && !streams[1].have)
                return;
        printf("\n## The daemon: a process's output through `process.stream` (1 MB = 10⁶ bytes)\n\n");
        printf("| | ASCII: JSON strings | binary: base64 |\n|---|---|---|\n");
        stream_row("command (`process.start`, stdin: true; \"go\" written once the stream is in place)", c_cmd);
        stream_row("payload bytes received", c_bytes);
        stream_row("pieces", c_pieces);
        stream_row("the stream's end", c_end);
        stream_row("stream request written → first payload byte", c_first);
        stream_row("payload rate, stream request written → last piece read", c_rate);
        stream_row("on the wire", c_wire);
        stream_row("the generator alone in the same sandbox, into /dev/null (a `run`)", c_gen);
        stream_row("server VmRSS before → peak (read every 16 MiB) → after", c_rss);
        stream_row("server CPU during the stream (/proc/PID/stat, schedstat)", c_srv);
        stream_row("this client's CPU", c_cli);
}

/* Growth of the server's RSS over a stream that stays within the bounds it keeps: the log
 * (1 MiB), the output queue (pauses at 4 MiB) and a piece in flight, with room for malloc. */
#define STREAM_RSS_SLACK_KB (16L * 1024)

void stream_targets(void) {
        const StreamResult *a = &streams[0];
        if (a->have) {
                bool whole = a->ok && a->bytes + a->dropped == a->want;
                printf("| `process.stream` of a process writing %" PRIu64 " MiB (ASCII) ≥ 300 MB/s, every byte accounted "
                       "for | %.0f MB/s; %" PRIu64 " bytes received, %" PRIu64 " dropped; %s | %s%s |\n",
                       a->want >> 20, a->mb_s, a->bytes, a->dropped, a->status, bench_verdict(true, a->mb_s >= 300 && whole),
                       whole ? "" : " (bytes missing at the end of the stream)");
                long grow = a->rss_peak - a->rss0;
                for (int k = 1; k < 2; k++)
                        if (streams[k].have && streams[k].rss_peak - streams[k].rss0 > grow)
                                grow = streams[k].rss_peak - streams[k].rss0;
                printf("| the server's RSS stays flat while it streams (peak ≤ before + %ld MiB) | ASCII %ld → %ld → %ld kB",
                       STREAM_RSS_SLACK_KB / 1024, a->rss0, a->rss_peak, a->rss1);
                if (streams[1].have)
                        printf("; binary %ld → %ld → %ld kB", streams[1].rss0, streams[1].rss_peak, streams[1].rss1);
                printf(" | %s |\n", bench_verdict(true, grow <= STREAM_RSS_SLACK_KB));
        } else {
                printf("| `process.stream` of 1 GiB ≥ 300 MB/s | – | not measured |\n");
        }
}
