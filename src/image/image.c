/* SPDX-License-Identifier: MIT */
/* Fork, snapshots, export and import: operations that take or apply a point-in-time image of
 * a sandbox (its writable tree and every session's state).
 *
 * An operation goes through these steps, each driven from the loop:
 *   1. sessions: an internal run in every session (a state dump where the image is taken,
 *      a barrier where it is applied), placed behind the runs requested before the
 *      operation and in front of those requested after it, which wait (sandbox_hold_runs())
 *      until the operation lets them go;
 *   2. freeze: the sandbox's cgroup is frozen (background processes included), so the tree
 *      is one point in time;
 *   3. job: the tree is copied, cleared, archived or extracted by a forked process
 *      (base/job.h), never by the loop;
 *   4. thaw, then states applied to the target's sessions (fork, restore, import) with
 *      internal runs at the head of their queues, and the sessions released.
 * Operations on one sandbox run one at a time, in order (ImageState.ops).
 *
 * This room reaches sandboxes through session/sandbox.h and the public API only: it holds
 * and lets go of runs (sandbox_hold_runs), marks the tree busy for the files API, and hears
 * of readiness and freeing as an observer of each sandbox it has state for. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include "base/job.h"
#include "base/limits.h"
#include "base/list.h"
#include "base/log.h"
#include "base/buf.h"
#include "base/redact.h"
#include "base/util.h"
#include "fs/archive.h"
#include "fs/changes.h"
#include "fs/layer.h"
#include "fs/tree.h"
#include "sandbox/plain.h"
#include "session/context.h"
#include "session/freeze.h"
#include "session/internal.h"
#include "image/image_job.h"
#include "session/run.h"
#include "session/sandbox.h"
#include "base/wire.h"

typedef enum OpKind { OP_FORK, OP_SNAPSHOT, OP_RESTORE, OP_EXPORT, OP_IMPORT } OpKind;

typedef struct Snapshot {
        struct Snapshot *next;
        char id[24];
        uint64_t created_ms, bytes;
        State *states;
        size_t n_states;
} Snapshot;

typedef struct Op Op;

/* A read-only layer of forks (fs/layer.h): its tmpfs, held by every sandbox whose chain has
 * it; the kernel keeps it for the overlays that use it after the last reference goes. */
typedef struct Layer {
        int fd;
        unsigned refs;
} Layer;

static Layer *layer_ref(Layer *l) {
        l->refs++;
        return l;
}

static void layer_unref(Layer *l) {
        if (l && --l->refs == 0) {
                safe_close(l->fd);
                free(l);
        }
}

/* What an internal run reports back to: cut loose (op = NULL) if the op ends first. */
typedef struct RunCtx {
        struct RunCtx *next;
        Op *op;
        size_t idx;
} RunCtx;

/* What this room keeps per sandbox: created with its first operation or snapshot, freed
 * with the sandbox (it observes it). */
typedef struct ImageState {
        SandboxObserver o; /* first */
        SbxSandbox *sb;
        Op *ops;           /* queued operations; the first is running */
        Snapshot *snapshots;
        unsigned n_snapshots;
        uint64_t next_snapshot;
        bool freeing;
        /* Forks in layers: the layers its trees were last taken into (oldest first), the
         * index of its trees then (a memfd, -1 before the first; threshold mode when
         * threshold is not 0), and whether its own trees are an overlay of them. */
        Layer *chain[SBX_MAX_FORK_LAYERS];
        size_t n_chain;
        int index_fd; /* valid when has_index */
        bool has_index;
        int64_t threshold;
        bool layered;
        /* What changed in its trees since its last fork in layers (fs/changes.h): a fanotify
         * group (valid when watching) marked for every change at each such fork (full) until
         * the first one comes, then for the closes of files open for writing only; what it
         * reported since (seen); whether it has watched without a gap since the index was
         * taken (tracked); tree_fd, for the handles its events carry. birth: a fork's
         * threshold, kept after its first fork (LayerDiff.touched_since). */
        int changes_fd, tree_fd;
        Watch changes_w;
        bool watching, full, tracked;
        ChangesSeen seen;
        int64_t birth;
} ImageState;

struct Op {
        Op *next;
        SbxSandbox *sb;
        ImageState *st;
        OpKind kind;
        SbxOpDoneFn done;
        void *ud;
        int step;
        unsigned pending; /* internal runs not yet ended */
        RunCtx *runs;
        State *states;
        size_t n_states;
        const State *applying; /* step 4: the states being applied (op's own or a snapshot's) */
        size_t n_applying;
        bool started, released;
        bool stopped;   /* nothing of it runs any more: it waits for its answer */
        bool answering; /* op_answer() is deferred */
        uint64_t mark; /* the sandbox's run_order when the op was requested */
        Freeze freeze;
        Job job;
        ImageJob args;
        Watch job_w;
        SbxSandbox *child;
        SandboxObserver child_obs; /* hears when the fork's sandbox is ready or freed */
        Snapshot *snap;  /* restore: the source */
        char snap_id[24];
        uint64_t snap_bytes;
        uint8_t *archive; /* import: the input */
        size_t archive_len;
        int memfd;        /* export: the output; import: the sessions read from the manifest */
        /* A fork in layers under way (layer_fd, upper_fd, new_index: see ImageJob), or done
         * (layered). */
        int layer_fd, upper_fd, new_index;
        int layer_fds[SBX_MAX_FORK_LAYERS];
        size_t n_layer_fds;
        bool squash, layered;
        /* Forks in layers: the trees did not change since the last one (no walk), and the
         * sandbox's change baseline moved to this op's moment, which only a kept result
         * confirms (else the watch is dropped: the next fork walks). */
        bool unchanged, baselined;
        ChangesSeen seen; /* what the watch reported since the last fork (LayerDiff.closed) */
        bool closed_all;
        int error;
        char msg[JOB_ERR_MAX + 64];
};

enum { STEP_SESSIONS, STEP_FREEZE, STEP_JOB, STEP_APPLY, STEP_DONE };

static void op_next_step(Op *op);
static ImageState *image_state(SbxSandbox *sb, bool create);
static void changes_forget(ImageState *st);
static void op_fail(Op *op, int error, const char *fmt, ...) _printf_(3, 4);

static void snapshot_free(Snapshot *s) {
        states_free(s->states, s->n_states);
        free(s);
}

static Snapshot *snapshot_find(ImageState *st, const char *id) {
        for (Snapshot *s = st ? st->snapshots : NULL; s; s = s->next)
                if (strcmp(s->id, id) == 0)
                        return s;
        return NULL;
}

/* ---------------------------------------------------------------- op lifecycle */

/* Caller runs requested after the first operation not yet released wait for it. */
static void image_hold(ImageState *st) {
        uint64_t after = UINT64_MAX;
        for (const Op *op = st->ops; op; op = op->next)
                if (!op->released) {
                        after = op->mark;
                        break;
                }
        sandbox_hold_runs(st->sb, after);
}

/* Lets the runs requested after the op start (unless a later op holds them). */
static void op_release_sessions(Op *op) {
        if (op->released)
                return;
        op->released = true;
        image_hold(op->st);
}

/* While the running op copies or replaces the tree, the files API must not change it. */
static void op_set_step(Op *op, int step) {
        op->step = step;
        sandbox_set_tree_busy(op->sb, step == STEP_FREEZE || step == STEP_JOB);
}

static void op_start_next(void *data);

/* Stops everything the op has under way (its internal runs are cut loose, its job killed,
 * the sandbox thawed, held runs let go); what it made stays for its answer. */
static void op_stop(Op *op) {
        if (op->stopped)
                return;
        op->stopped = true;
        for (RunCtx *c = op->runs; c; c = c->next)
                c->op = NULL; /* each is freed by its run's callback */
        op->runs = NULL;
        loop_del(sandbox_loop(op->sb), &op->job_w);
        job_kill(&op->job);
        freeze_thaw(&op->freeze);
        op_release_sessions(op);
        sandbox_set_tree_busy(op->sb, false);
}

static void op_free(Op *op) {
        loop_cancel_defer(sandbox_loop(op->sb), op);
        op_stop(op);
        if (op->child) {
                sandbox_unobserve(op->child, &op->child_obs);
                sbx_sandbox_free(op->child);
        }
        states_free(op->states, op->n_states);
        free(op->archive);
        safe_close(op->memfd);
        safe_close(op->layer_fd);
        safe_close(op->upper_fd);
        safe_close(op->new_index);
        changes_seen_done(&op->seen);
        if (op->baselined)
                changes_forget(op->st);
        free(op);
}

/* Answers the op and starts the next one of its sandbox. The op is gone before the callback
 * runs, which may then do anything, free the sandbox included. */
static void op_end(Op *op, const SbxOpResult *in) {
        ImageState *st = op->st;
        SbxOpResult res = *in;
        char msg[sizeof op->msg], id[sizeof op->snap_id];
        snprintf(msg, sizeof msg, "%s", res.message ? res.message : "");
        snprintf(id, sizeof id, "%s", op->snap_id);
        res.message = in->message ? msg : NULL;
        res.snapshot_id = in->snapshot_id ? id : NULL;
        SbxOpDoneFn done = op->done;
        void *ud = op->ud;
        st->ops = op->next;
        op_set_step(op, STEP_DONE);
        op_free(op);
        image_hold(st);
        if (st->ops && !st->freeing)
                (void)loop_defer(sandbox_loop(st->sb), op_start_next, st);
        if (done)
                done(ud, &res);
}

/* The op's answer when it failed (op->error, op->msg): given from the loop, or at once when
 * the sandbox is being freed. */
static void op_answer_failure(Op *op) {
        SbxOpResult res = { .error = op->error < 0 ? op->error : -EIO, .message = op->msg };
        op_end(op, &res);
}

/* Records the first error and says why (op->msg); nothing more. */
static void op_note(Op *op, int error, const char *fmt, va_list ap) _printf_(3, 0);
static void op_note(Op *op, int error, const char *fmt, va_list ap) {
        if (op->error)
                return;
        /* Formatted aside first: an argument may be op->msg itself. */
        char msg[sizeof op->msg];
        vsnprintf(msg, sizeof msg, fmt, ap);
        memcpy(op->msg, msg, sizeof msg);
        op->error = error < 0 ? error : -EIO;
        log_debug("sandbox %s: %s", sbx_sandbox_id(op->sb), op->msg);
}

static void op_answer(void *data);

static void op_failure_note(Op *op, int error, const char *fmt, ...) _printf_(3, 4);
static void op_failure_note(Op *op, int error, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        op_note(op, error, fmt, ap);
        va_end(ap);
}

/* Stops the op and answers it from the loop: a done callback never runs with a session's
 * or an observer's frame on the stack (it may free what they are working on). */
static void op_finish(Op *op) {
        op_stop(op);
        if (!op->answering && loop_defer(sandbox_loop(op->sb), op_answer, op) == 0)
                op->answering = true;
        else if (!op->answering)
                op_answer(op); /* out of memory: now is better than never */
}

static void op_fail(Op *op, int error, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        op_note(op, error, fmt, ap);
        va_end(ap);
        op_finish(op);
}

/* What the op made, as its answer; an export's archive is mapped for the callback. */
static void op_answer(void *data) {
        Op *op = data;
        SbxOpResult res = { 0 };
        void *map = MAP_FAILED;
        size_t map_len = 0;
        struct stat st;
        if (!op->error && op->kind == OP_FORK && !op->child)
                op_failure_note(op, -ESRCH, "the fork's sandbox exited");
        if (!op->error && op->kind == OP_EXPORT) {
                if (fstat(op->memfd, &st) < 0 || st.st_size <= 0)
                        op_failure_note(op, -EIO, "export: no archive written");
                else if ((uint64_t)st.st_size > SBX_MAX_ARCHIVE_BYTES)
                        op_failure_note(op, -EFBIG, "export: the archive is %lld bytes, the limit is %llu",
                                        (long long)st.st_size, (unsigned long long)SBX_MAX_ARCHIVE_BYTES);
                else if ((map = mmap(NULL, (map_len = (size_t)st.st_size), PROT_READ, MAP_PRIVATE, op->memfd, 0)) ==
                         MAP_FAILED)
                        op_failure_note(op, negerrno(), "export: cannot map the archive");
        }
        if (op->error) {
                op_answer_failure(op);
                return;
        }
        if (op->kind == OP_FORK) {
                res.sandbox = op->child;
                sandbox_unobserve(op->child, &op->child_obs);
                op->child = NULL; /* the caller's now */
        } else if (op->kind == OP_SNAPSHOT) {
                res.snapshot_id = op->snap_id;
        } else if (map != MAP_FAILED) {
                res.data = map;
                res.len = map_len;
        }
        op_end(op, &res);
        if (map != MAP_FAILED)
                munmap(map, map_len);
}

/* ---------------------------------------------------------------- step 1: sessions */

static RunCtx *runctx_new(Op *op, size_t idx) {
        RunCtx *c = calloc(1, sizeof *c);
        if (!c)
                return NULL;
        c->op = op;
        c->idx = idx;
        c->next = op->runs;
        op->runs = c;
        return c;
}

/* Detaches a finished run's context from its op; returns the op (NULL if it is gone). */
static Op *runctx_take(RunCtx *c) {
        Op *op = c->op;
        if (op) {
                RunCtx **pp = &op->runs;
                while (*pp && *pp != c)
                        pp = &(*pp)->next;
                if (*pp)
                        *pp = c->next;
        }
        free(c);
        return op;
}

/* The op's first error, from an internal run that failed in session `name`. */
static void op_run_failed(Op *op, const char *name, const char *what, const SbxResult *r) {
        if (op->error)
                return;
        op->error = -EIO;
        snprintf(op->msg, sizeof op->msg, "session %s: could not %s its state (exit %d%s%.*s)", name, what,
                 r->exit_code, r->stderr_len ? ": " : "", (int)MIN(r->stderr_len, 200u), (const char *)r->stderr_data);
}

/* An export leaves the daemon: the sandbox's secret values are replaced in a session's state
 * (the shell holds them as exported variables, and whatever a command copied them into), as
 * in output. The state is records `K:<len>\n<bytes>\n` after a magic line (the session
 * builtin's dump, checked again at import): each record's bytes are redacted on their own and
 * the record written again with its new length. An import then starts without the values;
 * the importing sandbox's own secrets stay in its shells' environment. Fork and snapshots stay
 * in the daemon and keep the values. Returns the state to keep (malloc'd), NULL when out of
 * memory or when the state is not in that form. */
typedef struct ExportState {
        const Redactor *red;
        Buf out;
} ExportState;

static int export_record(void *ud, char tag, const uint8_t *data, size_t len) {
        ExportState *x = ud;
        char *r = NULL, head[32];
        size_t rl = 0;
        if (redact_text(x->red, data, len, &r, &rl) < 0)
                return -ENOMEM;
        int hl = snprintf(head, sizeof head, "%c:%zu\n", tag, rl);
        int e = buf_append(&x->out, head, (size_t)hl) < 0 || buf_append(&x->out, r, rl) < 0 ||
                                buf_append(&x->out, "\n", 1) < 0
                        ? -ENOMEM
                        : 0;
        free(r);
        return e;
}

static uint8_t *export_state(SbxSandbox *sb, const uint8_t *d, size_t n, size_t *ret_len) {
        static const char magic[] = "SBXSTATE 1\n";
        SbxSandboxOptions o;
        sandbox_options(sb, &o);
        Redactor *red = NULL;
        char err[256];
        RedactConfig rc = { .secrets = o.secrets, .no_defaults = true };
        if (o.secrets && redactor_new(&rc, &red, err, sizeof err) < 0)
                return NULL;
        ExportState x = { .red = red };
        buf_init(&x.out, SIZE_MAX);
        int r = buf_append(&x.out, magic, sizeof magic - 1) < 0 ? -ENOMEM : archive_state_walk(d, n, export_record, &x);
        redactor_unref(red);
        if (r < 0) {
                buf_done(&x.out);
                return NULL;
        }
        return buf_steal(&x.out, ret_len);
}

static void session_step_done(void *ud, const SbxResult *r) {
        RunCtx *c = ud;
        size_t idx = c->idx;
        Op *op = runctx_take(c);
        if (!op)
                return;
        if (r->exit_code != 0) {
                op_run_failed(op, idx < op->n_states ? op->states[idx].name : "?", "take", r);
        } else if (idx < op->n_states && (op->kind == OP_FORK || op->kind == OP_SNAPSHOT || op->kind == OP_EXPORT)) {
                if (r->stdout_truncated && !op->error) {
                        op->error = -EFBIG;
                        snprintf(op->msg, sizeof op->msg, "session %s: its state is larger than %u bytes",
                                 op->states[idx].name, SBX_MAX_STATE_BYTES);
                }
                size_t len = r->stdout_len;
                uint8_t *d = op->kind == OP_EXPORT ? export_state(op->sb, r->stdout_data, len, &len)
                                                   : malloc(r->stdout_len + 1);
                if (d) {
                        if (op->kind != OP_EXPORT)
                                memcpy(d, r->stdout_data, len);
                        op->states[idx].data = d;
                        op->states[idx].len = len;
                } else if (!op->error) {
                        op->error = -ENOMEM;
                        snprintf(op->msg, sizeof op->msg, "out of memory");
                }
        }
        if (--op->pending == 0)
                op_next_step(op);
}

/* Step 1: a dump (or barrier) in every session, between the runs requested before the op and
 * those requested after it. */
static int op_sessions(Op *op) {
        SbxSandbox *sb = op->sb;
        bool dump = op->kind == OP_FORK || op->kind == OP_SNAPSHOT || op->kind == OP_EXPORT;
        size_t n = 0;
        for (SbxSession *s = sbx_session_next(sb, NULL); s; s = sbx_session_next(sb, s))
                n++;
        if (dump) {
                op->states = calloc(n ? n : 1, sizeof *op->states);
                if (!op->states)
                        return -ENOMEM;
        }
        size_t i = 0;
        for (SbxSession *s = sbx_session_next(sb, NULL); s; s = sbx_session_next(sb, s), i++) {
                if (dump) {
                        op->states[i].name = strdup(sbx_session_name(s));
                        if (!op->states[i].name)
                                return -ENOMEM;
                        op->n_states = i + 1;
                }
                RunCtx *c = runctx_new(op, i);
                if (!c)
                        return -ENOMEM;
                int r = run_internal(s, dump ? WIRE_F_DUMP : RUN_BARRIER, NULL, 0, op->mark, session_step_done, c);
                if (r < 0) {
                        runctx_take(c);
                        return r;
                }
                op->pending++;
        }
        return 0;
}

/* ---------------------------------------------------------------- step 2: freeze */

static void frozen(Freeze *f) { op_next_step(container_of(f, Op, freeze)); }

/* ---------------------------------------------------------------- step 3: jobs */

/* The sandbox's trees are (again) those of the filesystem its /tmp is on now. */
static void refresh_writable_dev(SbxSandbox *sb) {
        struct stat st;
        if (fstatat(sandbox_box(sb)->root_fd, "tmp", &st, 0) == 0)
                sandbox_set_writable_dev(sb, st.st_dev);
}

static void job_event(Watch *w, uint32_t events) {
        Op *op = w->data;
        char err[JOB_ERR_MAX];
        loop_del(sandbox_loop(op->sb), &op->job_w);
        int r = job_finish(&op->job, err, sizeof err);
        if (op->args.unlayer) {
                /* Its overlays are off (or the job failed on the way): its own tmpfs again.
                 * The chain and index stay: the index still says what the chain holds. */
                op->st->layered = false;
                refresh_writable_dev(op->sb);
                /* Its marks were on the overlays' filesystem, gone now; its own tmpfs again
                 * is no fork's upper. */
                changes_forget(op->st);
                op->st->birth = 0;
        }
        if (r < 0) {
                op_fail(op, r, "%s", err[0] ? err : strerror(-r));
                return;
        }
        if (op->kind == OP_SNAPSHOT)
                op->snap_bytes = strtoull(err, NULL, 10);
        op_next_step(op);
}

#define OP_MAX_FDS (8 + SBX_MAX_FORK_LAYERS)

/* The fds a job of this op may use. */
static size_t op_fds(const Op *op, int keep[OP_MAX_FDS]) {
        int all[OP_MAX_FDS] = {
                sandbox_box(op->sb)->root_fd, sandbox_box(op->sb)->snap_fd,
                op->child ? sandbox_box(op->child)->root_fd : -1, op->memfd, op->layer_fd, op->upper_fd,
                op->new_index, op->squash || !op->st->has_index ? -1 : op->st->index_fd,
        };
        for (size_t i = 0; i < op->n_layer_fds; i++)
                all[8 + i] = op->layer_fds[i];
        /* Only real fds: a job keeps at most 16 (base/job.c). */
        size_t n = 0;
        for (size_t i = 0; i < 8 + op->n_layer_fds; i++)
                if (all[i] >= 0)
                        keep[n++] = all[i];
        return n;
}

/* Starts fn as the op's job; `ended` is called from the loop when it has exited. The job is
 * a fork: it sees the ImageJob as it is now. */
static int op_job(Op *op, JobFn fn, WatchFn ended) {
        int keep[OP_MAX_FDS];
        op->args = (ImageJob){
                .from = sandbox_box(op->sb), .to = op->child ? sandbox_box(op->child) : NULL, .still = op->freeze.still,
                .snap_id = op->kind == OP_RESTORE ? op->snap->id : op->snap_id,
                .limits = sbx_sandbox_limits(op->sb), .timeout_ms = sandbox_timeout_ms(op->sb),
                .states = op->states, .n_states = op->n_states,
                .archive = op->archive, .archive_len = op->archive_len, .memfd = op->memfd,
                .layer = op->layer_fd, .upper = op->upper_fd, .layers = op->layer_fds, .n_layers = op->n_layer_fds,
                .old_index = op->squash || !op->st->has_index ? -1 : op->st->index_fd, .new_index = op->new_index,
                .threshold = op->squash ? 0 : op->st->threshold,
                .unlayer = op->st->layered && (op->kind == OP_RESTORE || op->kind == OP_IMPORT),
                .unchanged = op->unchanged,
                .closed = op->seen.closed, .n_closed = op->seen.n_closed, .closed_all = op->closed_all,
                .touched_since = op->st->birth,
        };
        int r = job_start(&op->job, fn, &op->args, keep, op_fds(op, keep));
        if (r < 0)
                return r;
        r = loop_add(sandbox_loop(op->sb), &op->job_w, op->job.pidfd, EPOLLIN, ended, op);
        if (r < 0)
                job_kill(&op->job);
        return r;
}

/* ---------------------------------------------------------------- step 4: apply states */

static void apply_done(void *ud, const SbxResult *r) {
        RunCtx *c = ud;
        size_t idx = c->idx;
        Op *op = runctx_take(c);
        if (!op)
                return;
        if (r->exit_code != 0)
                op_run_failed(op, idx < op->n_applying ? op->applying[idx].name : "?", "restore", r);
        if (--op->pending == 0)
                op_next_step(op);
}

static const State *state_find(const State *v, size_t n, const char *name) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(v[i].name, name) == 0)
                        return &v[i];
        return NULL;
}

/* Gives `target` the op's session states: sessions named in them are made or restarted and
 * restored; the others (restore and import only) restart with a fresh state. */
static int op_apply(Op *op, SbxSandbox *target, const State *states, size_t n, bool restart) {
        op->applying = states;
        op->n_applying = n;
        if (restart)
                for (SbxSession *s = sbx_session_next(target, NULL); s; s = sbx_session_next(target, s))
                        if (!state_find(states, n, sbx_session_name(s)))
                                (void)run_restart_session(s);
        for (size_t i = 0; i < n; i++) {
                SbxSession *s = sbx_session_find(target, states[i].name);
                bool existed = s != NULL;
                int r = existed ? 0 : sbx_session_get(target, states[i].name, &s);
                if (r < 0)
                        return r;
                if (existed && restart)
                        (void)run_restart_session(s);
                RunCtx *c = runctx_new(op, i);
                if (!c)
                        return -ENOMEM;
                r = run_internal(s, WIRE_F_RESTORE, states[i].data, states[i].len, 0, apply_done, c);
                if (r < 0) {
                        runctx_take(c);
                        return r;
                }
                op->pending++;
                /* An exported state carries the secrets' markers, not their values: the
                 * importing sandbox's own secrets are set again over them. */
                SbxSandboxOptions so;
                sandbox_options(target, &so);
                if (op->kind == OP_IMPORT && so.secrets && so.secrets[0]) {
                        RunCtx *c2 = runctx_new(op, i);
                        if (!c2)
                                return -ENOMEM;
                        r = run_internal_env(s, so.secrets, apply_done, c2);
                        if (r < 0) {
                                runctx_take(c2);
                                return r;
                        }
                        op->pending++;
                }
        }
        return 0;
}

/* Keeps what the job made: a snapshot is stored, states go to the sessions of the target
 * (restores then sit at the heads of their queues). Returns 0 or -errno. */
static int op_keep(Op *op) {
        SbxSandbox *sb = op->sb;
        switch (op->kind) {
        case OP_FORK:
                op_release_sessions(op);
                /* Process mode: the states name the parent's directory (cwd, HOME, TMPDIR...),
                 * which the child's replaces. */
                if (sandbox_box(sb)->process)
                        for (size_t i = 0; i < op->n_states; i++)
                                (void)plain_rewrite_paths(op->states[i].data, op->states[i].len, sandbox_box(sb)->dir,
                                                          sandbox_box(op->child)->dir);
                /* A shell the fork had before its overlay went on (the pool's) has its cwd
                 * beneath it: the ones no state is applied to start again. */
                if (op->layered)
                        for (SbxSession *s = sbx_session_next(op->child, NULL); s; s = sbx_session_next(op->child, s))
                                if (!state_find(op->states, op->n_states, sbx_session_name(s)))
                                        (void)run_restart_session(s);
                return op_apply(op, op->child, op->states, op->n_states, false);
        case OP_RESTORE:
                return op_apply(op, sb, op->snap->states, op->snap->n_states, true);
        case OP_IMPORT:
                return op_apply(op, sb, op->states, op->n_states, true);
        case OP_SNAPSHOT: {
                Snapshot *s = calloc(1, sizeof *s);
                if (!s)
                        return -ENOMEM;
                memcpy(s->id, op->snap_id, sizeof s->id);
                s->created_ms = wall_ms();
                s->bytes = op->snap_bytes;
                s->states = TAKE_PTR(op->states);
                s->n_states = op->n_states;
                op->n_states = 0;
                Snapshot **pp = &op->st->snapshots;
                while (*pp)
                        pp = &(*pp)->next;
                *pp = s;
                op->st->n_snapshots++;
                return 0;
        }
        case OP_EXPORT:
        default:
                return 0;
        }
}

/* ---------------------------------------------------------------- forks in layers */

/* A root daemon forks in layers; rootless, the kernel's overlay in a user namespace has no
 * redirect_dir and no index (fs/layer.h), so a fork is a copy. SBX_FORK_LAYERS=0 in the
 * daemon's environment makes every fork a copy (to compare the two). */
static bool layers_wanted(const Op *op) {
        const char *e = getenv("SBX_FORK_LAYERS");
        /* Process mode has no mount namespace to put an overlay in: its forks copy. */
        return sandbox_box(op->sb)->host_ids > 0 && !sandbox_box(op->sb)->process && !(e && strcmp(e, "0") == 0);
}

static void changes_forget(ImageState *st) {
        changes_seen_done(&st->seen);
        st->tracked = false;
        if (!st->watching)
                return;
        loop_del(sandbox_loop(st->sb), &st->changes_w);
        SandboxHost *host = sandbox_host(st->sb);
        ChangesSeen scratch = { 0 };
        /* Kept for another sandbox, unmarked and emptied (closing it would wait). */
        if (host->n_changes_pool < ELEMENTSOF(host->changes_pool) &&
            changes_mark(st->changes_fd, -1, NULL, 0, true) == 0 && changes_read(st->changes_fd, -1, &scratch) == 0)
                host->changes_pool[host->n_changes_pool++] = TAKE_FD(st->changes_fd);
        changes_seen_done(&scratch);
        st->changes_fd = safe_close(st->changes_fd);
        st->tree_fd = safe_close(st->tree_fd);
        st->watching = st->full = false;
}

static const char *const tree_dirs[] = { "tmp", "home/user", "dev/shm" };

/* Takes what the watch reported; after the first change only closes are asked for. */
static void changes_take(ImageState *st) {
        if (changes_read(st->changes_fd, st->tree_fd, &st->seen) < 0 ||
            (st->seen.any && st->full &&
             changes_mark(st->changes_fd, sandbox_box(st->sb)->root_fd, tree_dirs, ELEMENTSOF(tree_dirs), false) < 0)) {
                changes_forget(st);
                return;
        }
        if (st->seen.any)
                st->full = false;
}

static void changes_event(Watch *w, uint32_t events) {
        changes_take(w->data);
        (void)events;
}

/* At a fork in layers, with the sandbox frozen: 1 if its trees may have changed since its
 * last one, 0 if no change was reported (the job still asks whether a file of them is open
 * for writing: fs/changes.h). The op takes what to copy whatever the index says; this
 * moment is the next fork's baseline. */
static int trees_changed(Op *op) {
        ImageState *st = op->st;
        const Box *b = sandbox_box(op->sb);
        if (st->watching)
                changes_take(st);
        bool tracked = st->watching && st->tracked && !st->seen.closed_lost;
        int changed = !tracked || st->seen.any;
        changes_seen_sort(&st->seen);
        changes_seen_done(&op->seen);
        op->seen = st->seen;
        st->seen = (ChangesSeen){ 0 };
        /* Not known which files were closed after writing: each regular one may have been
         * written through a mapping. A fork's overlay needs none of it (touched_since). */
        op->closed_all = !tracked && !st->birth;
        /* The new baseline: every change marked again, the queue emptied. */
        if (!st->watching) {
                /* Not O_PATH: open_by_handle_at() refuses one. */
                st->tree_fd = openat(b->root_fd, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                SandboxHost *host = sandbox_host(op->sb);
                if (st->tree_fd >= 0 && host->n_changes_pool > 0)
                        st->changes_fd = host->changes_pool[--host->n_changes_pool];
                if (st->tree_fd >= 0 && (st->changes_fd > 0 || changes_new(&st->changes_fd) == 0))
                        st->watching = true;
                else
                        st->tree_fd = safe_close(st->tree_fd);
        }
        if (st->watching) {
                ChangesSeen scratch = { 0 };
                if (changes_mark(st->changes_fd, b->root_fd, tree_dirs, ELEMENTSOF(tree_dirs), true) < 0 ||
                    changes_read(st->changes_fd, st->tree_fd, &scratch) < 0 ||
                    (!st->changes_w.active &&
                     loop_add(sandbox_loop(op->sb), &st->changes_w, st->changes_fd, EPOLLIN, changes_event, st) < 0))
                        changes_forget(st);
                else
                        st->full = st->tracked = true;
                changes_seen_done(&scratch);
        }
        op->baselined = true;
        return changed || !op->freeze.still;
}

static void op_layered_drop(Op *op) {
        op->layer_fd = safe_close(op->layer_fd);
        op->upper_fd = safe_close(op->upper_fd);
        op->new_index = safe_close(op->new_index);
        op->n_layer_fds = 0;
}

static void layered_event(Watch *w, uint32_t events);

/* Starts the job of a fork in layers: a new layer (sized as the sandbox's tree may be:
 * every entry, and a whiteout for as many), the fork's upper with the sandbox's own limits
 * (what the fork writes itself), an empty index. Past SBX_MAX_FORK_LAYERS layers the tree
 * goes whole into one new layer (squash). */
static int op_layered_start(Op *op) {
        ImageState *st = op->st;
        const SbxLimits *l = sbx_sandbox_limits(op->sb);
        /* Nothing to walk: the last index and layers are the trees as they are, and no layer
         * is added (so none squashed either). */
        op->unchanged = trees_changed(op) == 0 && st->has_index && st->threshold == 0 && st->n_chain > 0;
        /* (the job may still walk: unchanged asks it to check for files open for writing) */
        op->squash = !op->unchanged && st->n_chain >= SBX_MAX_FORK_LAYERS;
        int r = layer_tmpfs_new(l->fs_bytes, 2 * l->file_count + 16, &op->layer_fd);
        if (r >= 0)
                r = layer_tmpfs_new(l->fs_bytes, l->file_count + 4, &op->upper_fd);
        if (r >= 0 && (op->new_index = memfd_create("sbx-layer-index", MFD_CLOEXEC)) < 0)
                r = negerrno();
        op->n_layer_fds = 0;
        for (size_t i = st->n_chain; r >= 0 && !op->squash && i-- > 0;)
                op->layer_fds[op->n_layer_fds++] = st->chain[i]->fd;
        if (r >= 0)
                r = op_job(op, image_job_fork_layered, layered_event);
        if (r < 0)
                op_layered_drop(op);
        return r;
}

/* The fork in layers is done: the parent's chain gets the new layer (if it was needed) and
 * the new index; the fork gets the same chain and index, in threshold mode, and its trees
 * are the overlay now. */
static int op_layered_keep(Op *op, const char *result) {
        int used;
        long long threshold;
        if (sscanf(result, "%d %lld", &used, &threshold) != 2 || threshold == 0)
                return -EIO;
        ImageState *st = op->st, *cs = image_state(op->child, true);
        Layer *nl = used ? calloc(1, sizeof *nl) : NULL;
        int cidx = fcntl(op->new_index, F_DUPFD_CLOEXEC, 3);
        if (!cs || (used && !nl) || cidx < 0) {
                free(nl);
                safe_close(cidx);
                return -ENOMEM;
        }
        if (op->squash) {
                for (size_t i = 0; i < st->n_chain; i++)
                        layer_unref(st->chain[i]);
                st->n_chain = 0;
        }
        if (nl) {
                *nl = (Layer){ TAKE_FD(op->layer_fd), 1 };
                st->chain[st->n_chain++] = nl;
        }
        if (st->has_index)
                safe_close(st->index_fd);
        st->index_fd = TAKE_FD(op->new_index);
        st->has_index = true;
        st->threshold = 0;
        for (size_t i = 0; i < cs->n_chain; i++)
                layer_unref(cs->chain[i]);
        for (size_t i = 0; i < st->n_chain; i++)
                cs->chain[i] = layer_ref(st->chain[i]);
        cs->n_chain = st->n_chain;
        if (cs->has_index)
                safe_close(cs->index_fd);
        cs->index_fd = cidx;
        cs->has_index = true;
        cs->threshold = threshold;
        cs->birth = threshold;
        cs->layered = true;
        op_layered_drop(op);
        refresh_writable_dev(op->child);
        op->layered = true;
        op->baselined = false; /* confirmed: the index is this moment's */
        return 0;
}

static void layered_event(Watch *w, uint32_t events) {
        Op *op = w->data;
        char err[JOB_ERR_MAX];
        loop_del(sandbox_loop(op->sb), &op->job_w);
        int r = job_finish(&op->job, err, sizeof err);
        if (r >= 0 && (r = op_layered_keep(op, err)) >= 0) {
                log_debug("sandbox %s: forked in layers (%s)", sbx_sandbox_id(op->sb), err);
                op_next_step(op);
                return;
        }
        /* Nothing of the overlay stays in the fork (layer_mount() undoes a half-made one):
         * the plain copy does it. */
        log_debug("sandbox %s: a fork in layers failed (%s): copying", sbx_sandbox_id(op->sb), err[0] ? err : strerror(-r));
        op_layered_drop(op);
        if ((r = op_job(op, image_job_fork, job_event)) < 0)
                op_fail(op, r, "cannot start the copy: %s", strerror(-r));
}

/* ---------------------------------------------------------------- the steps */

static void op_next_step(Op *op) {
        SbxSandbox *sb = op->sb;
        int r;
        if (op->error) {
                op_fail(op, op->error, "%s", op->msg);
                return;
        }
        switch (op->step) {
        case STEP_SESSIONS:
                if (op->pending > 0)
                        return;
                if (op->kind == OP_FORK && sandbox_setup_state(op->child) < 0) {
                        op_fail(op, -ESRCH, "the fork's sandbox could not start");
                        return;
                }
                if (op->kind == OP_FORK && sandbox_setup_state(op->child) == 0)
                        return; /* child_ready() comes back here */
                op_set_step(op, STEP_FREEZE);
                if (op->kind == OP_RESTORE || op->kind == OP_IMPORT)
                        (void)sbx_sandbox_kill_background(sb);
                if (freeze_start(&op->freeze, sandbox_loop(sb), sandbox_box(sb)->cg.dir, sandbox_freeze_holds(sb),
                                 sbx_sandbox_id(sb), frozen) == 0)
                        return; /* frozen() comes back */
                /* fall through */
        case STEP_FREEZE: {
                op_set_step(op, STEP_JOB);
                if (op->kind == OP_FORK && layers_wanted(op) && op_layered_start(op) >= 0)
                        return; /* layered_event() comes back */
                JobFn fn = op->kind == OP_FORK ? image_job_fork : op->kind == OP_SNAPSHOT ? image_job_snapshot
                         : op->kind == OP_RESTORE ? image_job_restore : op->kind == OP_EXPORT ? image_job_export
                         : image_job_import_extract;
                if ((r = op_job(op, fn, job_event)) < 0)
                        op_fail(op, r, "cannot start the copy: %s", strerror(-r));
                return;
        }
        case STEP_JOB:
                op_set_step(op, STEP_APPLY);
                freeze_thaw(&op->freeze);
                r = op_keep(op);
                if (r < 0) {
                        op_fail(op, r, "cannot apply the session states: %s", strerror(-r));
                        return;
                }
                op_release_sessions(op); /* restores sit at the heads of their queues */
                if (op->pending > 0)
                        return;
                /* fall through */
        case STEP_APPLY:
                if (op->pending > 0)
                        return;
                op_finish(op);
                return;
        default:
                return;
        }
}

/* Import's first step: the archive is checked by a job before anything else happens. */
static void import_checked(Watch *w, uint32_t events) {
        Op *op = w->data;
        char err[JOB_ERR_MAX];
        loop_del(sandbox_loop(op->sb), &op->job_w);
        int r = job_finish(&op->job, err, sizeof err);
        if (r < 0) {
                op_fail(op, r, "%s", err[0] ? err : strerror(-r));
                return;
        }
        if ((r = image_read_sessions(op->memfd, &op->states, &op->n_states)) < 0) {
                op_fail(op, r, "cannot read the archive's sessions: %s", strerror(-r));
                return;
        }
        if ((r = op_sessions(op)) < 0) {
                op_fail(op, r, "cannot reach the sessions: %s", strerror(-r));
                return;
        }
        op_next_step(op);
}

/* The fork's sandbox is ready (or never will be): the op goes on (or fails). */
static void child_ready(SandboxObserver *o, SbxSandbox *child, int error) {
        Op *op = container_of(o, Op, child_obs);
        if (op->stopped)
                return;
        if (error < 0) {
                op_fail(op, -ESRCH, "the fork's sandbox could not start");
                return;
        }
        if (op->step == STEP_SESSIONS && op->pending == 0)
                op_next_step(op);
}

/* The fork's sandbox is freed under the op: it fails, and must not free the child again. */
static void child_freeing(SandboxObserver *o, SbxSandbox *child) {
        Op *op = container_of(o, Op, child_obs);
        op->child = NULL;
        op_fail(op, -ESRCH, "the fork's sandbox exited");
}

static const SandboxObserverOps child_ops = { child_ready, child_freeing };

static void op_start(Op *op) {
        SbxSandbox *sb = op->sb;
        char err[512];
        int r;
        switch (op->kind) {
        case OP_FORK:
                r = sandbox_new_like(sb, &op->child, err, sizeof err);
                if (r < 0) {
                        op_fail(op, r, "cannot create the fork: %s", err);
                        return;
                }
                sandbox_observe(op->child, &op->child_obs, &child_ops);
                break;
        case OP_SNAPSHOT:
                if ((r = sandbox_snap_store(sb)) < 0) {
                        op_fail(op, r, "cannot make the snapshot store: %s", strerror(-r));
                        return;
                }
                snprintf(op->snap_id, sizeof op->snap_id, "s%llu", (unsigned long long)++op->st->next_snapshot);
                break;
        case OP_EXPORT:
                op->memfd = memfd_create("sbx-export", MFD_CLOEXEC);
                if (op->memfd < 0) {
                        op_fail(op, negerrno(), "cannot make room for the archive");
                        return;
                }
                break;
        case OP_IMPORT:
                op->memfd = memfd_create("sbx-import", MFD_CLOEXEC);
                if (op->memfd < 0 || op_job(op, image_job_import_check, import_checked) < 0)
                        op_fail(op, -ENOMEM, "cannot start checking the archive");
                return;
        case OP_RESTORE:
        default:
                break;
        }
        if ((r = op_sessions(op)) < 0) {
                op_fail(op, r, "cannot reach the sessions: %s", strerror(-r));
                return;
        }
        op_next_step(op);
}

/* Starts the first queued op once the sandbox's root is built (the state's observer comes
 * back here when it is). */
static void op_start_next(void *data) {
        ImageState *st = data;
        Op *op = st->ops;
        if (!op || op->started)
                return;
        int setup = sandbox_setup_state(st->sb);
        if (setup == 0)
                return;
        op->started = true;
        if (setup < 0)
                op_fail(op, -ESRCH, "the sandbox could not start");
        else
                op_start(op);
}

static void state_ready(SandboxObserver *o, SbxSandbox *sb, int error) {
        op_start_next(container_of(o, ImageState, o));
}

/* The sandbox is being freed: its operations fail, its snapshots go. */
static void state_freeing(SandboxObserver *o, SbxSandbox *sb) {
        ImageState *st = container_of(o, ImageState, o);
        st->freeing = true;
        /* Answered now, not from the loop: the sandbox's caller is told before free returns. */
        while (st->ops) {
                Op *op = st->ops;
                if (!op->stopped)
                        op_failure_note(op, -ECANCELED, "the sandbox was destroyed");
                loop_cancel_defer(sandbox_loop(sb), op);
                op_answer(op);
        }
        loop_cancel_defer(sandbox_loop(sb), st);
        while (st->snapshots) {
                Snapshot *s = st->snapshots;
                st->snapshots = s->next;
                snapshot_free(s);
        }
        for (size_t i = 0; i < st->n_chain; i++)
                layer_unref(st->chain[i]);
        if (st->has_index)
                safe_close(st->index_fd);
        changes_forget(st);
        free(st);
}

static const SandboxObserverOps state_ops = { state_ready, state_freeing };

/* sb's state in this room; made on first use when `create`. */
static ImageState *image_state(SbxSandbox *sb, bool create) {
        SandboxObserver *o = sandbox_observer_state(sb, &state_ops, sizeof(ImageState), offsetof(ImageState, o), create);
        ImageState *st = o ? container_of(o, ImageState, o) : NULL;
        if (st)
                st->sb = sb;
        return st;
}

static int op_queue(SbxSandbox *sb, OpKind kind, SbxOpDoneFn done, void *ud, Op **ret) {
        if (sandbox_dying(sb))
                return -ESRCH;
        int rw = sbx_sandbox_unpark(sb); /* an expiry's export comes without a request */
        if (rw < 0)
                return rw;
        ImageState *st = image_state(sb, true);
        Op *op = st ? calloc(1, sizeof *op) : NULL;
        if (!op)
                return -ENOMEM;
        op->sb = sb;
        op->st = st;
        op->kind = kind;
        op->done = done;
        op->ud = ud;
        op->memfd = -1;
        op->layer_fd = op->upper_fd = op->new_index = -1;
        freeze_init(&op->freeze);
        op->job = (Job){ .pid = -1, .pidfd = -1, .result = -1 };
        op->mark = sandbox_run_order(sb);
        Op **pp = &st->ops;
        while (*pp)
                pp = &(*pp)->next;
        *pp = op;
        image_hold(st);
        if (ret)
                *ret = op;
        /* Started from the loop: done never fires before this returns. */
        if (st->ops == op)
                (void)loop_defer(sandbox_loop(sb), op_start_next, st);
        return 0;
}

/* ---------------------------------------------------------------- public */

int sbx_sandbox_fork(SbxSandbox *sb, SbxOpDoneFn done, void *ud) {
        return op_queue(sb, OP_FORK, done, ud, NULL);
}

int sbx_snapshot_create(SbxSandbox *sb, SbxOpDoneFn done, void *ud) {
        ImageState *st = image_state(sb, false);
        unsigned queued = 0;
        for (Op *op = st ? st->ops : NULL; op; op = op->next)
                queued += op->kind == OP_SNAPSHOT;
        if ((st ? st->n_snapshots : 0) + queued >= SBX_MAX_SNAPSHOTS)
                return -ENOSPC;
        return op_queue(sb, OP_SNAPSHOT, done, ud, NULL);
}

int sbx_snapshot_restore(SbxSandbox *sb, const char *id, SbxOpDoneFn done, void *ud) {
        Snapshot *s = id ? snapshot_find(image_state(sb, false), id) : NULL;
        if (!s)
                return -ENOENT;
        Op *op;
        int r = op_queue(sb, OP_RESTORE, done, ud, &op);
        if (r >= 0)
                op->snap = s;
        return r;
}

int sbx_snapshot_delete(SbxSandbox *sb, const char *id) {
        ImageState *st = image_state(sb, false);
        if (!st || !id)
                return -ENOENT;
        Snapshot **pp = &st->snapshots;
        while (*pp && strcmp((*pp)->id, id) != 0)
                pp = &(*pp)->next;
        if (!*pp)
                return -ENOENT;
        for (Op *op = st->ops; op; op = op->next)
                if (op->snap == *pp)
                        return -EBUSY;
        Snapshot *s = *pp;
        if (sandbox_box(sb)->snap_fd >= 0)
                image_sweep_start(sandbox_loop(sb), sandbox_box(sb)->snap_fd, s->id);
        *pp = s->next;
        st->n_snapshots--;
        snapshot_free(s);
        return 0;
}

size_t sbx_snapshot_list(SbxSandbox *sb, SbxSnapshotInfo *out, size_t max) {
        ImageState *st = image_state(sb, false);
        size_t n = 0;
        for (Snapshot *s = st ? st->snapshots : NULL; s; s = s->next, n++)
                if (n < max)
                        out[n] = (SbxSnapshotInfo){ s->id, s->created_ms, s->bytes };
        return n;
}

int sbx_sandbox_export(SbxSandbox *sb, SbxOpDoneFn done, void *ud) {
        return op_queue(sb, OP_EXPORT, done, ud, NULL);
}

int sbx_sandbox_import(SbxSandbox *sb, const uint8_t *data, size_t len, SbxOpDoneFn done, void *ud) {
        if (!data || len == 0)
                return -EINVAL;
        /* Process mode: the archive's session states name another sandbox's directories. */
        if (sandbox_box(sb)->process)
                return -ENOTSUP;
        if (len > SBX_MAX_ARCHIVE_BYTES)
                return -EFBIG;
        uint8_t *copy = malloc(len);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, data, len);
        Op *op;
        int r = op_queue(sb, OP_IMPORT, done, ud, &op);
        if (r < 0) {
                free(copy);
                return r;
        }
        op->archive = copy;
        op->archive_len = len;
        return 0;
}
