/* SPDX-License-Identifier: MIT */
/* The audit log's files: the writer (numbering, chaining, rotation, a bad event) and the
 * verifier's diagnosis of changed, removed, inserted and reordered lines. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "server/audit_log.h"
#include "tap.h"

static char dir[] = "/tmp/sbx-test-audit.XXXXXX";

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static bool exists(const char *name) {
        char p[256];
        path_of(p, sizeof p, name);
        return access(p, F_OK) == 0;
}

/* Runs the writer in a child on the lines given; returns its last report. */
static AuditStatus run_writer(const char *log, uint64_t max, unsigned keep, const char *const *lines, size_t n) {
        int in[2], st[2];
        AuditStatus last = { 0 };
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0)
                return last;
        pid_t pid = fork();
        if (pid == 0) {
                close(in[1]);
                close(st[0]);
                _exit(audit_writer_main(in[0], st[1], log, max, keep));
        }
        close(in[0]);
        close(st[1]);
        for (size_t i = 0; i < n; i++)
                if (write(in[1], lines[i], strlen(lines[i])) < 0)
                        break;
        close(in[1]);
        int status;
        waitpid(pid, &status, 0);
        AuditStatus rec;
        while (read(st[0], &rec, sizeof rec) == (ssize_t)sizeof rec)
                last = rec;
        close(st[0]);
        return last;
}

static void test_writer(void) {
        char log[256], p1[256], p2[256];
        path_of(log, sizeof log, "w.log");
        path_of(p1, sizeof p1, "w.log.1");
        path_of(p2, sizeof p2, "w.log.2");
        const char *lines[160];
        char bufs[150][96];
        size_t n = 0;
        lines[n++] = "not an event\n";
        for (int i = 0; i < 150; i++) {
                snprintf(bufs[i], sizeof bufs[i], "{\"ts\":\"2024-01-01T00:00:00.000Z\",\"type\":\"t\",\"n\":%d}\n", i);
                lines[n++] = bufs[i];
        }
        AuditStatus st = run_writer(log, 4096, 3, lines, n);
        /* Each rotation adds its audit.rotated line (nothing to carry: no begins here). */
        uint64_t rotations = st.written - 151, last = st.seq;
        CHECK(st.started && st.failed == 1 && st.written > 151 && rotations < 10 && st.seq == st.written &&
              !st.failing,
              "the writer wrote 150 events, an audit.lost line and a line per rotation, counted the bad one "
              "(written %llu, failed %llu)", (unsigned long long)st.written, (unsigned long long)st.failed);
        char first[128] = "";
        FILE *lf = fopen(log, "r");
        CHECK(lf && fgets(first, sizeof first, lf) && strstr(first, "\"type\":\"audit.rotated\",\"carried\":0,"),
              "the newest file begins with its rotation's line: %s", first);
        if (lf)
                fclose(lf);
        CHECK(exists("w.log") && exists("w.log.1") && exists("w.log.2") && !exists("w.log.3"),
              "rotation keeps 3 files in all");
        struct stat s;
        CHECK(stat(log, &s) == 0 && s.st_size > 0 && s.st_size <= 4096, "a file stays within --audit-max-bytes");
        AuditVerify v;
        char *all[] = { p2, p1, log };
        CHECK(audit_verify(all, 3, &v) == 0 && v.last_seq == last && !v.genesis, "the chain runs across the files: %s",
              v.message);
        CHECK(audit_verify(all + 2, 1, &v) == 0 && v.last_seq == last, "the newest file verifies alone");
        /* A second writer goes on with the same chain. */
        const char *more[] = { "{\"type\":\"again\"}\n" };
        st = run_writer(log, 4096, 3, more, 1);
        CHECK(st.seq == last + 1 && audit_verify(all, 3, &v) == 0 && v.last_seq == last + 1,
              "a restarted writer continues the chain");
        /* A file that does not end with an audit line is refused, untouched. */
        char other[256];
        path_of(other, sizeof other, "other.txt");
        FILE *f = fopen(other, "w");
        fputs("hello\n", f);
        fclose(f);
        st = run_writer(other, 4096, 3, more, 1);
        CHECK(!st.started && st.error == EBADMSG && stat(other, &s) == 0 && s.st_size == 6,
              "a foreign file is refused and left as it was: %s", st.detail);
}

/* A chain of n lines written by hand. */
static size_t make_chain(char lines[][160], size_t n) {
        char prev[SHA256_HEX_SIZE] = AUDIT_GENESIS;
        for (size_t i = 0; i < n; i++) {
                snprintf(lines[i], 160, "{\"seq\":%zu,\"type\":\"t\",\"n\":%zu,\"prev\":\"%s\"}", i + 1, i, prev);
                audit_line_hash(lines[i], strlen(lines[i]), prev);
        }
        return n;
}

static int check_lines(char lines[][160], const size_t *order, size_t n, AuditVerify *v) {
        char p[256];
        path_of(p, sizeof p, "v.log");
        FILE *f = fopen(p, "w");
        for (size_t i = 0; i < n; i++)
                fprintf(f, "%s\n", lines[order[i]]);
        fclose(f);
        char *files[] = { p };
        return audit_verify(files, 1, v);
}

static bool says(const AuditVerify *v, const char *line_and_word) {
        const char *colon = strchr(v->message, ':');
        return colon && strncmp(colon + 1, line_and_word, strlen(line_and_word)) == 0;
}

static void test_verify(void) {
        char lines[8][160];
        size_t n = make_chain(lines, 8), order[9];
        AuditVerify v;
        for (size_t i = 0; i < n; i++)
                order[i] = i;
        CHECK(check_lines(lines, order, n, &v) == 0 && v.lines == 8 && v.genesis, "an intact chain verifies");
        /* Deleted: line 4 (index 3) gone. */
        size_t del[] = { 0, 1, 2, 4, 5, 6, 7 };
        CHECK(check_lines(lines, del, 7, &v) == 1 && says(&v, "4: 1 line(s) removed"), "a deleted line: %s", v.message);
        /* Swapped: 4 and 5. */
        size_t swap[] = { 0, 1, 2, 4, 3, 5, 6, 7 };
        CHECK(check_lines(lines, swap, 8, &v) == 1 && says(&v, "4: out of order"), "reordered lines: %s", v.message);
        /* Inserted: a copy of line 2 after line 5. */
        size_t ins[] = { 0, 1, 2, 3, 4, 1, 5, 6, 7 };
        CHECK(check_lines(lines, ins, 9, &v) == 1 && says(&v, "6: inserted"), "an inserted copy: %s", v.message);
        /* Changed: a field of line 3. */
        char *t = strstr(lines[2], "\"type\":\"t\"");
        t[8] = 'u'; /* "type":"u": still an audit line, but not the one whose hash line 4 holds */
        CHECK(check_lines(lines, order, 8, &v) == 1 && says(&v, "3: changed (the next"), "a changed line: %s", v.message);
}

int main(void) {
        if (!mkdtemp(dir)) {
                printf("Bail out! mkdtemp: %s\n", strerror(errno));
                return 1;
        }
        test_writer();
        test_verify();
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
                printf("# could not remove %s\n", dir);
        return tap_done();
}
