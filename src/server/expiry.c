/* SPDX-License-Identifier: MIT */
/* onExpiry "export": an expired sandbox's export archive is written to the server's
 * --expiry-export-dir before the sandbox is destroyed. The export is the library's operation
 * (as persistence.export); the file is written by a job (a forked process: a write of up to
 * SBX_MAX_ARCHIVE_BYTES may wait for the disk, which the loop never does); once the job has
 * ended the sandbox is destroyed and its owner told where the archive is, or why there is
 * none. The sandbox is found again by id at each step: a client may destroy it meanwhile. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/job.h"
#include "base/log.h"
#include "base/util.h"
#include "server/audit.h"
#include "server/core.h"
#include "server/expiry.h"
#include "session/internal.h"

typedef struct Expiring {
        Core *core;
        char id[64];
        char why[16];
        char path[PATH_MAX];
        const uint8_t *data; /* the archive, valid in the job (its copy of the daemon's memory) */
        size_t len;
        Job job;
        Watch w;
} Expiring;

static void finish(Expiring *x, const char *error) {
        SrvSandbox *sb = registry_find_id(&x->core->registry, x->id);
        if (error)
                log_warn("sandbox %s expired (%s); its export could not be written: %s", x->id, x->why, error);
        else
                log_info("sandbox %s expired (%s); exported to %s", x->id, x->why, x->path);
        if (sb) {
                if (sb->owner) {
                        json_t *n = json_pack("{s:s, s:s}", "sandboxId", x->id, "reason", x->why);
                        if (n)
                                json_object_set_new(n, error ? "exportError" : "export", json_string(error ? error : x->path));
                        conn_notify(sb->owner, "sandbox.expired", n);
                }
                json_t *f = json_pack("{s:s}", "reason", x->why);
                if (f)
                        json_object_set_new(f, error ? "exportError" : "export", json_string(error ? error : x->path));
                audit_flush_suppressed(x->core->audit, sb);
                AUDIT(x->core->audit, "sandbox.destroy", sb, NULL, f);
                registry_destroy(sb);
        }
        free(x);
}

static void job_event(Watch *w, uint32_t events) {
        Expiring *x = w->data;
        char err[JOB_ERR_MAX] = "";
        loop_del(sbx_context_loop(x->core->ctx), &x->w);
        int r = job_finish(&x->job, err, sizeof err);
        finish(x, r < 0 ? (err[0] ? err : strerror(-r)) : NULL);
}

/* In the job: the archive into a file of its own (never over another's), whole or not at all. */
static int write_archive(void *arg, char *err, size_t errlen) {
        Expiring *x = arg;
        char tmp[PATH_MAX + 8];
        snprintf(tmp, sizeof tmp, "%s.part", x->path);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                int r = negerrno();
                snprintf(err, errlen, "%s: %s", tmp, strerror(-r));
                return r;
        }
        for (size_t off = 0; off < x->len;) {
                ssize_t n = write(fd, x->data + off, x->len - off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        int r = n < 0 ? negerrno() : -EIO;
                        snprintf(err, errlen, "%s: %s", tmp, strerror(-r));
                        close(fd);
                        (void)unlink(tmp);
                        return r;
                }
                off += (size_t)n;
        }
        if (fsync(fd) < 0 || close(fd) < 0 || link(tmp, x->path) < 0) {
                int r = negerrno();
                snprintf(err, errlen, "%s: %s", x->path, strerror(-r));
                (void)unlink(tmp);
                return r;
        }
        (void)unlink(tmp);
        return 0;
}

static void exported(void *ud, const SbxOpResult *res) {
        Expiring *x = ud;
        if (res->error < 0) {
                char why[300];
                snprintf(why, sizeof why, "export: %s", res->message ? res->message : strerror(-res->error));
                finish(x, why);
                return;
        }
        x->data = res->data;
        x->len = res->len;
        int r = job_start(&x->job, write_archive, x, NULL, 0);
        if (r >= 0 && (r = loop_add(sbx_context_loop(x->core->ctx), &x->w, x->job.pidfd, EPOLLIN, job_event, x)) < 0)
                job_kill(&x->job);
        if (r < 0) {
                char why[128];
                snprintf(why, sizeof why, "cannot start writing the archive: %s", strerror(-r));
                finish(x, why);
        }
        /* res->data goes when this returns; the job has its own copy. */
        x->data = NULL;
}

static bool expire_export(void *data, SrvSandbox *sb, const char *why) {
        Core *core = data;
        if (!core->expiry_dir)
                return false;
        Expiring *x = calloc(1, sizeof *x);
        if (!x)
                return false;
        x->core = core;
        snprintf(x->id, sizeof x->id, "%s", sbx_sandbox_id(sb->sb));
        snprintf(x->why, sizeof x->why, "%s", why);
        snprintf(x->path, sizeof x->path, "%s/%s-%llu.tar.zst", core->expiry_dir, x->id, (unsigned long long)wall_ms());
        if (sbx_sandbox_export(sb->sb, exported, x) < 0) {
                free(x);
                return false;
        }
        return true;
}

int expiry_set_dir(Core *core, const char *dir, char *err, size_t errlen) {
        struct stat st;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                snprintf(err, errlen, "%s: %s", dir, strerror(errno));
                return -errno;
        }
        if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) < 0) {
                snprintf(err, errlen, "%s: not a directory this server may write", dir);
                return -ENOTDIR;
        }
        char *abs = realpath(dir, NULL);
        if (!abs || strlen(abs) > PATH_MAX - 80) {
                free(abs);
                snprintf(err, errlen, "%s: path too long", dir);
                return -ENAMETOOLONG;
        }
        free(core->expiry_dir);
        core->expiry_dir = abs;
        core->registry.expire_export = expire_export;
        core->registry.expire_data = core;
        return 0;
}
