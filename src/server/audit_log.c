/* SPDX-License-Identifier: MIT */
/* The audit log's files: the writer process that numbers, chains, appends and rotates, and
 * the verifier that checks the chain (audit_log.h has the format). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "base/limits.h"
#include "base/macro.h"
#include "base/util.h"
#include "server/audit_log.h"

void audit_ts(uint64_t wall_ms, char out[AUDIT_TS_SIZE]) {
        time_t t = (time_t)(wall_ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        snprintf(out, AUDIT_TS_SIZE, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(wall_ms % 1000));
}

void audit_line_hash(const char *line, size_t len, char out[SHA256_HEX_SIZE]) {
        struct sha256_ctx ctx;
        sha256_init(&ctx);
        sha256_feed(&ctx, line, len);
        sha256_digest_hex(&ctx, out);
}

static bool is_hex64(const char *s) {
        if (!s || strlen(s) != 64)
                return false;
        return strspn(s, "0123456789abcdef") == 64;
}

/* Reads seq and prev of a line; false when it is not an audit line. */
static bool parse_line(const char *line, size_t len, uint64_t *ret_seq, char ret_prev[SHA256_HEX_SIZE]) {
        json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
        json_t *seq = json_object_get(o, "seq"), *prev = json_object_get(o, "prev");
        bool ok = json_is_object(o) && json_is_integer(seq) && json_integer_value(seq) >= 0 &&
                  is_hex64(json_string_value(prev));
        if (ok) {
                *ret_seq = (uint64_t)json_integer_value(seq);
                memcpy(ret_prev, json_string_value(prev), SHA256_HEX_SIZE);
        }
        json_decref(o);
        return ok;
}

/* ------------------------------------------------------------------ the writer */

enum { PIN_START, PIN_SANDBOX, PIN_PROCESS };

/* A line a rotation carries into the new file: the newest server.start, or a begin whose end
 * is still to come. */
typedef struct Pin {
        int kind;
        char *sandbox;  /* the sandbox it is of (its own id for PIN_SANDBOX); NULL for the start */
        char *process;  /* processId of a PIN_PROCESS */
        char *line;     /* as written (seq and prev in it), without its newline */
        size_t len;
} Pin;

typedef struct Writer {
        const char *path;
        uint64_t max_bytes;
        unsigned keep;
        int fd;
        uint64_t size;                 /* of the file fd, all whole lines */
        char prev[SHA256_HEX_SIZE];    /* hash of the last line written */
        uint64_t lost;                 /* failed events no audit.lost line has told yet */
        uint64_t cut;                  /* bytes of a partial last line cut off at start */
        int status_fd;
        bool report_due;
        uint64_t reported_ms;
        AuditStatus st;
        char *out;                     /* the line being written */
        size_t out_cap;
        Pin *pins;                     /* in the order they were written */
        size_t n_pins, pins_cap;
        uint64_t pinned_bytes;
        uint64_t uncarried;            /* begins past the carry budget since the last start */
        bool carrying;                 /* writing a rotation's carried lines */
} Writer;

static void set_detail(Writer *w, int error, const char *fmt, ...) _printf_(3, 4);
static void set_detail(Writer *w, int error, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->st.detail, sizeof w->st.detail, fmt, ap);
        va_end(ap);
        w->st.error = error;
}

/* Sends the counters; a full pipe (the daemon reads in its loop, so only a stalled daemon
 * fills it) leaves the report due. */
static void report(Writer *w) {
        if (w->status_fd < 0)
                return;
        char rec[sizeof(AuditStatus)];
        w->st.size = sizeof w->st;
        memcpy(rec, &w->st, sizeof rec);
        ssize_t n = write(w->status_fd, rec, sizeof rec);
        if (n == (ssize_t)sizeof rec) {
                w->report_due = false;
                w->reported_ms = now_ms();
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                /* The daemon is gone: what is left in the pipe is still written, unreported. */
                w->status_fd = safe_close(w->status_fd);
        }
}

static int path_n(char *buf, size_t size, const char *path, unsigned i) {
        int n = i ? snprintf(buf, size, "%s.%u", path, i) : snprintf(buf, size, "%s", path);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* PATH becomes PATH.1, PATH.1 PATH.2 and so on, the one past keep-1 removed, and a new
 * empty PATH is opened. The new file is made first under another name, so a failure leaves
 * the log as it was (the line then goes on into the full file). */
static int rotate(Writer *w) {
        char from[PATH_MAX], to[PATH_MAX], fresh[PATH_MAX];
        if (snprintf(fresh, sizeof fresh, "%s.new", w->path) >= (int)sizeof fresh)
                return -ENAMETOOLONG;
        int fd = open(fresh, O_RDWR | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
                int r = negerrno();
                set_detail(w, -r, "rotate: open %s: %s", fresh, strerror(-r));
                return r;
        }
        /* What was written so far reaches the disk before its name changes. */
        (void)fdatasync(w->fd);
        int r = 0;
        for (unsigned i = w->keep - 1; r == 0 && i >= 1; i--) {
                if (path_n(to, sizeof to, w->path, i) < 0 || path_n(from, sizeof from, w->path, i - 1) < 0)
                        r = -ENAMETOOLONG;
                else if (i == w->keep - 1 && unlink(to) < 0 && errno != ENOENT)
                        r = negerrno();
                else if (rename(from, to) < 0 && (errno != ENOENT || i == 1))
                        r = negerrno();
        }
        if (w->keep <= 1 && unlink(w->path) < 0 && errno != ENOENT)
                r = negerrno();
        if (r == 0 && rename(fresh, w->path) < 0)
                r = negerrno();
        if (r < 0) {
                set_detail(w, -r, "rotate %s: %s", w->path, strerror(-r));
                (void)unlink(fresh);
                close(fd);
                return r;
        }
        close(w->fd);
        w->fd = fd;
        w->size = 0;
        return 0;
}

/* Appends one line whole, or nothing: a short write (a full disk) is cut off again. */
static int append(Writer *w, const char *line, size_t len) {
        size_t done = 0;
        while (done < len) {
                ssize_t n = write(w->fd, line + done, len - done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        int r = n < 0 ? negerrno() : -ENOSPC;
                        if (done > 0 && ftruncate(w->fd, (off_t)w->size) < 0)
                                set_detail(w, errno, "cannot cut a partial line off %s: %s", w->path, strerror(errno));
                        else
                                set_detail(w, -r, "write %s: %s", w->path, strerror(-r));
                        return r;
                }
                done += (size_t)n;
        }
        w->size += len;
        return 0;
}

static void track(Writer *w, const char *body, size_t len, const char *line, size_t line_len);
static void carry(Writer *w);

/* Numbers, chains and writes one event ({...} without its newline). Returns 0 or -errno. */
static int emit(Writer *w, const char *body, size_t len) {
        char head[32];
        int hn = snprintf(head, sizeof head, "{\"seq\":%llu", (unsigned long long)(w->st.seq + 1));
        size_t line_len = (size_t)hn + (len > 2 ? len - 1 : 0) + sizeof ",\"prev\":\"\"}" + 64;
        /* On a failed rotation the line goes on into the full file. */
        if (!w->carrying && w->size > 0 && w->size + line_len > w->max_bytes && rotate(w) == 0) {
                carry(w);
                hn = snprintf(head, sizeof head, "{\"seq\":%llu", (unsigned long long)(w->st.seq + 1));
        }
        size_t need = (size_t)hn + 1 + len + sizeof ",\"prev\":\"\"}\n" + 64;
        if (need > w->out_cap) {
                char *o = realloc(w->out, need);
                if (!o)
                        return -ENOMEM;
                w->out = o;
                w->out_cap = need;
        }
        size_t n = 0;
        memcpy(w->out, head, (size_t)hn);
        n += (size_t)hn;
        if (len > 2) {
                w->out[n++] = ',';
                memcpy(w->out + n, body + 1, len - 2);
                n += len - 2;
        }
        n += (size_t)sprintf(w->out + n, ",\"prev\":\"%s\"}", w->prev);
        w->out[n] = '\n';
        int r = append(w, w->out, n + 1);
        if (r < 0) {
                w->st.failing = true;
        } else {
                audit_line_hash(w->out, n, w->prev);
                w->st.seq++;
                w->st.written++;
                w->st.failing = false;
                track(w, body, len, w->out, n);
        }
        return r;
}

/* A line of the writer's own: {"ts":...,"type":type<rest>}. */
static int emit_own(Writer *w, const char *type, const char *rest) {
        char ts[AUDIT_TS_SIZE], body[256];
        audit_ts(wall_ms(), ts);
        int n = snprintf(body, sizeof body, "{\"ts\":\"%s\",\"type\":\"%s\"%s}", ts, type, rest);
        return emit(w, body, (size_t)MIN((size_t)n, sizeof body - 1));
}

/* ------------------------------------------------------------------ what a rotation carries */

static void pin_free(Pin *p) {
        free(p->sandbox);
        free(p->process);
        free(p->line);
}

static void unpin_at(Writer *w, size_t i) {
        w->pinned_bytes -= w->pins[i].len;
        pin_free(&w->pins[i]);
        memmove(w->pins + i, w->pins + i + 1, (w->n_pins - i - 1) * sizeof *w->pins);
        w->n_pins--;
}

static void unpin_all(Writer *w) {
        while (w->n_pins)
                unpin_at(w, w->n_pins - 1);
        w->uncarried = 0;
}

/* Out of memory, or past the budget, the begin is counted instead: the rotated line says so. */
static void pin(Writer *w, int kind, const char *sandbox, const char *process, const char *line, size_t len) {
        uint64_t budget = MIN((uint64_t)SBX_AUDIT_CARRY_BYTES, w->max_bytes / 4);
        if (kind != PIN_START && w->pinned_bytes + len > budget) {
                w->uncarried++;
                return;
        }
        if (w->n_pins == w->pins_cap) {
                size_t cap = w->pins_cap ? 2 * w->pins_cap : 16;
                Pin *p = reallocarray(w->pins, cap, sizeof *p);
                if (!p) {
                        w->uncarried++;
                        return;
                }
                w->pins = p;
                w->pins_cap = cap;
        }
        Pin p = { .kind = kind, .sandbox = sandbox ? strdup(sandbox) : NULL, .process = process ? strdup(process) : NULL,
                  .line = strndup(line, len), .len = len };
        if (!p.line || (sandbox && !p.sandbox) || (process && !p.process)) {
                pin_free(&p);
                w->uncarried++;
                return;
        }
        w->pins[w->n_pins++] = p;
        w->pinned_bytes += len;
}

/* The event's type, from the head the daemon gives every event ({"ts":"...","type":"..."). */
static bool type_is(const char *body, size_t len, const char *type) {
        static const char key[] = ",\"type\":\"";
        size_t tl = strlen(type), window = MIN(len, (size_t)(AUDIT_TS_SIZE + sizeof key + 8));
        const char *k = memmem(body, window, key, sizeof key - 1);
        if (!k)
                return false;
        const char *t = k + sizeof key - 1;
        return (size_t)(body + len - t) > tl && memcmp(t, type, tl) == 0 && t[tl] == '"';
}

/* Keeps the begins a later rotation must carry and lets go of the ones whose end came. */
static void track(Writer *w, const char *body, size_t len, const char *line, size_t line_len) {
        static const char *const types[] = { "server.start", "sandbox.create", "sandbox.fork", "sandbox.destroy",
                                              "process.start", "process.exit" };
        size_t t = 0;
        while (t < ELEMENTSOF(types) && !type_is(body, len, types[t]))
                t++;
        if (t == ELEMENTSOF(types))
                return;
        if (t == 0) { /* a new daemon: nothing of the last one is still to end */
                unpin_all(w);
                pin(w, PIN_START, NULL, NULL, line, line_len);
                return;
        }
        json_t *o = json_loadb(body, len, 0, NULL);
        const char *sid = json_string_value(json_object_get(o, "sandboxId"));
        const char *fork = json_string_value(json_object_get(o, "forkId"));
        const char *pid = json_string_value(json_object_get(o, "processId"));
        if (t == 1 && sid)
                pin(w, PIN_SANDBOX, sid, NULL, line, line_len);
        else if (t == 2 && fork)
                pin(w, PIN_SANDBOX, fork, NULL, line, line_len);
        else if (t == 4 && sid && pid)
                pin(w, PIN_PROCESS, sid, pid, line, line_len);
        else if ((t == 3 && sid) || (t == 5 && sid && pid))
                for (size_t i = w->n_pins; i-- > 0;) {
                        Pin *p = &w->pins[i];
                        if (p->sandbox && strcmp(p->sandbox, sid) == 0 && (t == 3 || (p->process && strcmp(p->process, pid) == 0)))
                                unpin_at(w, i);
                }
        json_decref(o);
}

static int emit_own(Writer *w, const char *type, const char *rest);

/* Right after a rotation: what the kept begins were, so dropping the oldest file never drops
 * the start of the server that writes, nor a begin whose end is still to come. */
static void carry(Writer *w) {
        char rest[96], ts[AUDIT_TS_SIZE];
        w->carrying = true;
        snprintf(rest, sizeof rest, ",\"carried\":%zu,\"notCarried\":%llu", w->n_pins,
                 (unsigned long long)w->uncarried);
        (void)emit_own(w, "audit.rotated", rest);
        audit_ts(wall_ms(), ts);
        for (size_t i = 0; i < w->n_pins; i++) {
                _cleanup_free_ char *body = NULL;
                int n = asprintf(&body, "{\"ts\":\"%s\",\"type\":\"audit.carried\",\"line\":%.*s}", ts,
                                 (int)w->pins[i].len, w->pins[i].line);
                if (n > 0)
                        (void)emit(w, body, (size_t)n);
        }
        w->carrying = false;
}

/* Tells, in the log, how many events could not be written since the last line that could. */
static void tell_lost(Writer *w) {
        char rest[96];
        const char *name = strerrorname_np(w->st.error);
        snprintf(rest, sizeof rest, ",\"count\":%llu,\"error\":\"%s\"", (unsigned long long)w->lost,
                 name ? name : "EIO");
        if (emit_own(w, "audit.lost", rest) == 0)
                w->lost = 0;
}

static void event(Writer *w, const char *body, size_t len) {
        bool was_failing = w->st.failing;
        w->report_due = true;
        if (len < 2 || body[0] != '{' || body[len - 1] != '}') {
                set_detail(w, EBADMSG, "an event that is not a JSON object (%zu bytes)", len);
                w->st.failed++;
                w->lost++;
                return;
        }
        if (w->lost)
                tell_lost(w);
        if (emit(w, body, len) < 0) {
                w->st.failed++;
                w->lost++;
        }
        /* The daemon's fail-closed acts on this: told at once, not at the next report. */
        if (was_failing != w->st.failing)
                report(w);
}

/* The last whole line of fd (size bytes): seq and prev's chain go on from it. With repair, a
 * partial line after it (a crash in the middle of a write) is cut off into w->cut. Returns
 * 0, or -EBADMSG when the file does not end with an audit line. */
static int scan_tail(Writer *w, int fd, uint64_t size, bool repair) {
        size_t window = (size_t)MIN(size, 2ULL * SBX_AUDIT_LINE_BYTES + 2);
        _cleanup_free_ char *buf = malloc(window + 1);
        if (!buf)
                return -ENOMEM;
        size_t got = 0;
        while (got < window) {
                ssize_t n = pread(fd, buf + got, window - got, (off_t)(size - window + got));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? negerrno() : -EIO;
                got += (size_t)n;
        }
        size_t end = window;
        while (end > 0 && buf[end - 1] != '\n')
                end--;
        if (end == 0)
                return -EBADMSG;
        uint64_t cut = window - end;
        size_t start = end - 1;
        while (start > 0 && buf[start - 1] != '\n')
                start--;
        if (start == 0 && window < size)
                return -EBADMSG; /* longer than any line the writer makes */
        uint64_t seq;
        char prev[SHA256_HEX_SIZE];
        if (!parse_line(buf + start, end - 1 - start, &seq, prev))
                return -EBADMSG;
        w->st.seq = seq;
        audit_line_hash(buf + start, end - 1 - start, w->prev);
        if (repair && cut) {
                if (ftruncate(fd, (off_t)(size - cut)) < 0)
                        return negerrno();
                w->cut = cut;
        }
        return 0;
}

static int open_log(Writer *w) {
        char older[PATH_MAX];
        struct stat st;
        memcpy(w->prev, AUDIT_GENESIS, SHA256_HEX_SIZE);
        w->fd = open(w->path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (w->fd < 0) {
                int r = negerrno();
                set_detail(w, -r, "open %s: %s", w->path, strerror(-r));
                return r;
        }
        if (fstat(w->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                set_detail(w, EINVAL, "%s is not a regular file", w->path);
                return -EINVAL;
        }
        w->size = (uint64_t)st.st_size;
        int r = 0;
        if (w->size > 0) {
                r = scan_tail(w, w->fd, w->size, true);
                w->size -= w->cut;
        } else if (w->keep > 1 && path_n(older, sizeof older, w->path, 1) == 0) {
                /* An empty PATH right after a rotation: the chain goes on from PATH.1. */
                _cleanup_close_ int ofd = open(older, O_RDONLY | O_CLOEXEC);
                if (ofd >= 0 && fstat(ofd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
                        r = scan_tail(w, ofd, (uint64_t)st.st_size, false);
                        if (r == -EBADMSG)
                                set_detail(w, EBADMSG, "%s does not end with an audit line; move it away, or give "
                                           "another --audit path", older);
                }
        }
        if (r == -EBADMSG && !w->st.detail[0])
                set_detail(w, EBADMSG, "%s does not end with an audit line; move it away, or give another --audit "
                           "path", w->path);
        else if (r < 0 && !w->st.detail[0])
                set_detail(w, -r, "read %s: %s", w->path, strerror(-r));
        return r;
}

int audit_writer_main(int in_fd, int status_fd, const char *path, uint64_t max_bytes, unsigned keep) {
        /* The daemon gone, its last events are still in the pipe: write them, unreported. */
        signal(SIGPIPE, SIG_IGN);
        Writer w = { .path = path, .max_bytes = max_bytes, .keep = keep, .fd = -1, .status_fd = status_fd };
        (void)fd_set_nonblock(status_fd, true);
        if (open_log(&w) < 0) {
                report(&w);
                safe_close(w.fd);
                return 1;
        }
        w.st.started = 1;
        if (w.cut) {
                char rest[64];
                snprintf(rest, sizeof rest, ",\"cutBytes\":%llu", (unsigned long long)w.cut);
                (void)emit_own(&w, "audit.repaired", rest);
        }
        report(&w);
        size_t cap = SBX_AUDIT_LINE_BYTES + 1, have = 0;
        char *buf = malloc(cap);
        bool skipping = false; /* in a line longer than cap, which is dropped */
        for (;;) {
                int timeout = -1;
                if (w.lost && w.st.failing)
                        timeout = SBX_AUDIT_RETRY_MS;
                if (w.report_due)
                        timeout = (int)MIN((uint64_t)(timeout < 0 ? INT_MAX : timeout), SBX_AUDIT_REPORT_MS);
                struct pollfd p = { .fd = in_fd, .events = POLLIN };
                int n = poll(&p, 1, timeout);
                if (n < 0 && errno != EINTR)
                        break;
                if (w.report_due && now_ms() - w.reported_ms >= SBX_AUDIT_REPORT_MS)
                        report(&w);
                if (n == 0 && w.lost && w.st.failing) {
                        tell_lost(&w);
                        report(&w);
                }
                if (n <= 0 || !buf)
                        continue;
                ssize_t got = read(in_fd, buf + have, cap - have);
                if (got < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (got <= 0)
                        break;
                have += (size_t)got;
                size_t start = 0;
                for (char *nl; (nl = memchr(buf + start, '\n', have - start)); start = (size_t)(nl - buf) + 1) {
                        if (skipping) {
                                skipping = false;
                                w.st.failed++;
                                w.lost++;
                                set_detail(&w, EMSGSIZE, "an event longer than %u bytes", SBX_AUDIT_LINE_BYTES);
                        } else {
                                event(&w, buf + start, (size_t)(nl - buf) - start);
                        }
                }
                memmove(buf, buf + start, have - start);
                have -= start;
                if (have == cap) {
                        skipping = true;
                        have = 0;
                }
        }
        if (have > 0 || skipping) {
                w.st.failed++;
                w.lost++;
        }
        if (w.lost)
                tell_lost(&w);
        (void)fdatasync(w.fd);
        report(&w);
        free(buf);
        free(w.out);
        unpin_all(&w);
        free(w.pins);
        safe_close(w.fd);
        safe_close(w.status_fd);
        return 0;
}

/* ------------------------------------------------------------------ verify */

typedef struct Rec {
        const char *file;
        uint64_t lineno;
        bool valid; /* an object with seq and prev */
        bool whole; /* ended with a newline */
        uint64_t seq;
        char prev[SHA256_HEX_SIZE], hash[SHA256_HEX_SIZE];
} Rec;

typedef struct Reader {
        char *const *files;
        size_t n, i;
        FILE *f;
        uint64_t lineno;
        char *buf;
        size_t cap;
} Reader;

/* The next line of the files, in order. Returns 1, 0 at the end, -errno (msg set). */
static int reader_next(Reader *rd, Rec *ret, char *msg, size_t msglen) {
        for (;;) {
                if (!rd->f) {
                        if (rd->i >= rd->n)
                                return 0;
                        rd->f = fopen(rd->files[rd->i], "re");
                        if (!rd->f) {
                                int r = negerrno();
                                snprintf(msg, msglen, "%s: %s", rd->files[rd->i], strerror(-r));
                                return r;
                        }
                        rd->lineno = 0;
                }
                ssize_t len = getline(&rd->buf, &rd->cap, rd->f);
                if (len < 0) {
                        bool err = ferror(rd->f);
                        fclose(rd->f);
                        rd->f = NULL;
                        if (err) {
                                snprintf(msg, msglen, "%s: read error", rd->files[rd->i]);
                                return -EIO;
                        }
                        rd->i++;
                        continue;
                }
                Rec r = { .file = rd->files[rd->i], .lineno = ++rd->lineno };
                r.whole = len > 0 && rd->buf[len - 1] == '\n';
                size_t n = (size_t)len - r.whole;
                r.valid = parse_line(rd->buf, n, &r.seq, r.prev);
                audit_line_hash(rd->buf, n, r.hash);
                *ret = r;
                return 1;
        }
}

#define SAY(rec, ...)                                                                                 \
        do {                                                                                          \
                int o_ = snprintf(v->message, sizeof v->message, "%s:%llu: ", (rec)->file,            \
                                  (unsigned long long)(rec)->lineno);                                  \
                snprintf(v->message + o_, sizeof v->message - (size_t)o_, __VA_ARGS__);               \
        } while (0)

/* Why c does not follow p1 (p2 before it, nx after it; either may be absent). */
static void diagnose(AuditVerify *v, const Rec *p2, const Rec *p1, const Rec *c, const Rec *nx) {
        bool prev_ok = strcmp(c->prev, p1->hash) == 0;
        if (prev_ok) /* p1 is intact and c's own prev too: c's seq was changed */
                SAY(c, "changed (its seq %llu does not follow %llu)", (unsigned long long)c->seq,
                    (unsigned long long)p1->seq);
        else if (p2 && strcmp(c->prev, p2->hash) == 0)
                SAY(p1, "inserted (the line after it follows the line before it)");
        else if (c->seq > p1->seq + 1 && nx && nx->valid && nx->seq <= p1->seq + 1)
                SAY(c, "out of order (seq %llu comes before seq %llu)", (unsigned long long)c->seq,
                    (unsigned long long)nx->seq);
        else if (c->seq > p1->seq + 1)
                SAY(c, "%llu line(s) removed before it (seq jumps from %llu to %llu)",
                    (unsigned long long)(c->seq - p1->seq - 1), (unsigned long long)p1->seq, (unsigned long long)c->seq);
        else if (c->seq <= p1->seq)
                SAY(c, "inserted or out of order (seq %llu after seq %llu)", (unsigned long long)c->seq,
                    (unsigned long long)p1->seq);
        else if (nx && strcmp(nx->prev, c->hash) != 0)
                SAY(c, "changed (its prev is not the hash of the line before it)");
        else
                SAY(p1, "changed (the next line's prev is not its hash)");
}

/* Whether c follows p1; says why not in v otherwise. */
static bool check(AuditVerify *v, const Rec *p2, const Rec *p1, const Rec *c, const Rec *nx) {
        if (!c->whole) {
                SAY(c, "incomplete (no newline at its end: cut off, or a write in progress)");
                return false;
        }
        if (!c->valid) {
                SAY(c, "changed or inserted (not an audit line)");
                return false;
        }
        if (!p1) {
                v->first_seq = c->seq;
                v->genesis = strcmp(c->prev, AUDIT_GENESIS) == 0;
        } else if (c->seq != p1->seq + 1 || strcmp(c->prev, p1->hash) != 0) {
                diagnose(v, p2, p1, c, nx && nx->valid ? nx : NULL);
                return false;
        }
        v->last_seq = c->seq;
        v->lines++;
        return true;
}

int audit_verify(char *const *files, size_t n, AuditVerify *v) {
        Reader rd = { .files = files, .n = n };
        Rec p2, p1, c, nx;
        bool has_p2 = false, has_p1 = false;
        memset(v, 0, sizeof *v);
        /* A line is checked once the line after it is read: telling a changed line from a
         * changed prev takes the next line's prev. */
        int r = reader_next(&rd, &c, v->message, sizeof v->message);
        bool has_c = r > 0;
        while (has_c) {
                r = reader_next(&rd, &nx, v->message, sizeof v->message);
                if (r < 0)
                        break;
                if (!check(v, has_p2 ? &p2 : NULL, has_p1 ? &p1 : NULL, &c, r > 0 ? &nx : NULL)) {
                        r = 1;
                        break;
                }
                p2 = p1;
                has_p2 = has_p1;
                p1 = c;
                has_p1 = true;
                c = nx;
                has_c = r > 0;
        }
        if (rd.f)
                fclose(rd.f);
        free(rd.buf);
        return r < 0 ? r : r > 0 ? 1 : 0;
}
