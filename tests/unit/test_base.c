/* SPDX-License-Identifier: MIT */
/* Unit tests of the base layer: capped buffers, rings, parsers, the loop's deferred calls. */
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "base/buf.h"
#include "base/loop.h"
#include "base/queue.h"
#include "base/slots.h"
#include "base/text.h"
#include "base/util.h"
#include "tap.h"

static void test_buf(void) {
        Buf b;
        buf_init(&b, 10);
        CHECK(buf_append(&b, "hello", 5) == 0 && b.len == 5 && !b.truncated, "buf keeps bytes under the cap");
        CHECK(buf_append(&b, "world!!", 7) == 0 && b.len == 10 && b.truncated && b.dropped == 2,
              "buf stops at the cap, sets truncated, counts dropped");
        CHECK(memcmp(b.data, "helloworld", 10) == 0, "buf content exact");
        CHECK(buf_append(&b, "x", 1) == 0 && b.len == 10 && b.dropped == 3, "buf past the cap stores nothing");
        size_t n;
        uint8_t *d = buf_steal(&b, &n);
        CHECK(n == 10 && d && b.len == 0 && !b.data, "buf_steal hands over and resets");
        free(d);
        buf_done(&b);
        Buf z;
        buf_init(&z, 0);
        CHECK(buf_append(&z, "abc", 3) == 0 && z.len == 0 && z.truncated, "zero cap keeps nothing");
        buf_done(&z);
}

static void test_buf_reserve(void) {
        Buf b;
        buf_init(&b, 10);
        long room = buf_reserve(&b, 4);
        CHECK(room == 4 && b.cap >= 4, "reserve under the cap");
        memcpy(b.data + b.len, "abcd", 4);
        buf_commit(&b, 4);
        room = buf_reserve(&b, 100);
        CHECK(room == 6 && b.len == 4, "reserve never passes the cap");
        memcpy(b.data + b.len, "efghij", 6);
        buf_commit(&b, 6);
        CHECK(buf_reserve(&b, 1) == 0, "no room at the cap");
        buf_drop(&b, 5);
        CHECK(b.truncated && b.dropped == 5 && b.len == 10 && memcmp(b.data, "abcdefghij", 10) == 0,
              "drop past the cap sets truncated, keeps the bytes");
        buf_done(&b);
}

static void test_queue(void) {
        ByteQueue q = { 0 };
        CHECK(bq_push(&q, "hello", 5) == 0 && bq_pending(&q) == 5, "queue push");
        bq_consume(&q, 2);
        CHECK(bq_pending(&q) == 3 && memcmp(bq_head(&q), "llo", 3) == 0, "queue consume from the head");
        size_t cap = q.cap;
        char big[70000];
        memset(big, 'x', sizeof big);
        CHECK(bq_push(&q, big, cap - 4) == 0 && q.off == 0 && q.cap == cap, "queue compacts before growing");
        CHECK(memcmp(bq_head(&q), "llo", 3) == 0 && bq_pending(&q) == cap - 1, "queue keeps order across compaction");
        CHECK(bq_push(&q, big, sizeof big) == 0 && bq_pending(&q) == cap - 1 + sizeof big, "queue grows");
        bq_consume(&q, bq_pending(&q));
        CHECK(bq_pending(&q) == 0 && q.off == 0, "queue resets when drained");
        bq_push(&q, "ab", 2);
        bq_clear(&q);
        CHECK(bq_pending(&q) == 0, "queue clear");
        bq_done(&q);
}

static void test_ring(void) {
        Ring r;
        uint8_t out[16];
        CHECK(ring_init(&r, 8) == 0, "ring init");
        ring_append(&r, "abc", 3);
        CHECK(ring_copy(&r, out) == 3 && memcmp(out, "abc", 3) == 0, "ring under capacity");
        ring_append(&r, "defgh", 5);
        CHECK(ring_copy(&r, out) == 8 && memcmp(out, "abcdefgh", 8) == 0, "ring exactly full");
        ring_append(&r, "XY", 2);
        CHECK(ring_copy(&r, out) == 8 && memcmp(out, "cdefghXY", 8) == 0, "ring keeps the newest bytes");
        ring_append(&r, "0123456789", 10);
        CHECK(ring_copy(&r, out) == 8 && memcmp(out, "23456789", 8) == 0, "ring with a write larger than itself");
        CHECK(r.total == 20, "ring counts every byte offered");
        ring_done(&r);
}

static void test_parse(void) {
        uint64_t v;
        CHECK(parse_u64("12345", 100000, &v) == 0 && v == 12345, "parse_u64 decimal");
        CHECK(parse_u64("12a", 1000, &v) == -EINVAL, "parse_u64 rejects junk");
        CHECK(parse_u64("", 1000, &v) == -EINVAL, "parse_u64 rejects empty");
        CHECK(parse_u64("1001", 1000, &v) == -ERANGE, "parse_u64 enforces max");
        CHECK(parse_u64("99999999999999999999999", UINT64_MAX, &v) == -ERANGE, "parse_u64 overflow");
        CHECK(parse_size("64M", &v) == 0 && v == 64ULL << 20, "parse_size M");
        CHECK(parse_size("1k", &v) == 0 && v == 1024, "parse_size k");
        CHECK(parse_size("3G", &v) == 0 && v == 3ULL << 30, "parse_size G");
        CHECK(parse_size("12", &v) == 0 && v == 12, "parse_size plain");
        CHECK(parse_size("M", &v) == -EINVAL && parse_size("1x", &v) == -EINVAL, "parse_size rejects junk");
        CHECK(env_name_valid("PATH", 4) && env_name_valid("_x1", 3), "env names valid");
        CHECK(!env_name_valid("1X", 2) && !env_name_valid("A-B", 3) && !env_name_valid("", 0), "env names invalid");
        CHECK(name_valid("main", 64) && name_valid("a.B-c_9", 64) && name_valid("abcd", 4), "plain names valid");
        CHECK(!name_valid("", 64) && !name_valid("abcde", 4) && !name_valid("a/b", 64) && !name_valid("a b", 64) &&
              !name_valid("\xc3\xa9", 64), "names with other bytes, empty or too long invalid");
        char hex[33];
        CHECK(random_hex(hex, 16) == 0 && strlen(hex) == 32 && strspn(hex, "0123456789abcdef") == 32, "random_hex");
}

/* Whole files in a directory of our own: replaced atomically, read back, refused when not
 * regular or too large. */
static void test_array_grow(void) {
        int *a = NULL;
        size_t n = 0, cap = 0;
        bool ok = true;
        for (int i = 0; i < 100 && ok; i++) {
                ok = ARRAY_GROW(a, n, cap, 4) == 0 && cap > n;
                if (ok)
                        a[n++] = i;
        }
        CHECK(ok && cap == 128 && a[99] == 99, "array_grow: 100 elements, room doubled from 4 (%zu)", cap);
        size_t before = cap;
        CHECK(ARRAY_GROW(a, 5, cap, 4) == 0 && cap == before, "array_grow: no growth while there is room");
        free(a);
}

static void test_whole_files(void) {
        char dir[] = "/tmp/sbx-test-base-XXXXXX", path[64], sub[64];
        CHECK(mkdtemp(dir) != NULL, "temporary directory");
        snprintf(path, sizeof path, "%s/f", dir);
        snprintf(sub, sizeof sub, "%s/d", dir);
        uint8_t *d = NULL;
        size_t n = 0;
        CHECK(write_file_replace(path, "abc", 3) == 0 && write_file_replace(path, "hello", 5) == 0, "write_file_replace");
        CHECK(read_file_whole(path, 5, &d, &n) == 0 && n == 5 && memcmp(d, "hello", 5) == 0,
              "read_file_whole reads back what replaced the first");
        free(d);
        d = NULL;
        CHECK(read_file_whole(path, 4, &d, &n) == -EFBIG && !d, "read_file_whole refuses more than max");
        CHECK(mkdir(sub, 0700) == 0 && read_file_whole(sub, 100, &d, &n) == -EFBIG, "... and a directory");
        CHECK(read_file_whole("/nonexistent/x", 100, &d, &n) == -ENOENT, "... and says why it cannot open");
        snprintf(path, sizeof path, "%s/d/f", dir);
        CHECK(rmdir(sub) == 0 && write_file_replace(path, "x", 1) == -ENOENT, "write_file_replace into nothing fails");
        DIR *dd = opendir(dir);
        int left = 0;
        for (struct dirent *de; dd && (de = readdir(dd));)
                left += de->d_name[0] != '.';
        if (dd)
                closedir(dd);
        CHECK(left == 1, "no temporary file is left behind");
        snprintf(path, sizeof path, "%s/f", dir);
        (void)unlink(path);
        (void)rmdir(dir);
}

static void test_pidfd(void) {
        pid_t pid = fork();
        if (pid == 0) {
                pause();
                _exit(0);
        }
        int fd = pid > 0 ? pidfd_open(pid, 0) : -1;
        CHECK(fd >= 0 && !pidfd_is_dead(fd), "a running child's pidfd is not dead");
        pidfd_sigkill(fd);
        struct pollfd p = { .fd = fd, .events = POLLIN };
        CHECK(poll(&p, 1, 5000) == 1 && pidfd_is_dead(fd), "pidfd_sigkill kills it, pidfd_is_dead sees it");
        siginfo_t si = { 0 };
        CHECK(waitid(P_PIDFD, (id_t)fd, &si, WEXITED) == 0 && si.si_status == SIGKILL, "it died of SIGKILL");
        pidfd_sigkill(-1);
        safe_close(fd);
}

static int deferred_count;
static Loop *handler_loop;
static void bump(void *data) { deferred_count += *(int *)data; }

static void defer_from_handler(Watch *w, uint32_t events) {
        char c;
        (void)!read(w->fd, &c, 1);
        (void)loop_defer(handler_loop, bump, w->data);
}

static void test_loop(void) {
        Loop *l = NULL;
        int one = 1, ten = 10;
        CHECK(loop_new(&l) == 0, "loop_new");
        handler_loop = l;
        CHECK(loop_defer(l, bump, &one) == 0 && loop_defer(l, bump, &ten) == 0, "defer two calls");
        loop_cancel_defer(l, &ten);
        CHECK(loop_run_once(l, 100) >= 0 && deferred_count == 1, "deferred call ran, cancelled one did not");
        uint64_t t0 = now_ms();
        CHECK(loop_run_once(l, 50) >= 0, "idle loop returns");
        CHECK(loop_run_once(l, 50) == 0 && now_ms() - t0 >= 40, "idle loop times out");

        /* An embedder polls the loop's fd: a call deferred from outside makes it readable; one
         * deferred by a handler runs before loop_run_once() returns and leaves nothing to see. */
        struct pollfd pl = { .fd = loop_fd(l), .events = POLLIN };
        CHECK(poll(&pl, 1, 0) == 0, "nothing to do: the loop's fd is not readable");
        CHECK(loop_defer(l, bump, &ten) == 0 && poll(&pl, 1, 0) == 1, "a call deferred from outside makes it readable");
        deferred_count = 0;
        (void)loop_run_once(l, 0);
        (void)loop_run_once(l, 0); /* the wake itself, read */
        CHECK(deferred_count == 10 && poll(&pl, 1, 0) == 0, "run, and not readable after");
        int p[2];
        Watch w;
        CHECK(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0 && loop_add(l, &w, p[0], EPOLLIN, defer_from_handler, &one) == 0 &&
                      write(p[1], "x", 1) == 1,
              "a pipe watched, made readable");
        deferred_count = 0;
        CHECK(loop_run_once(l, 1000) == 1 && deferred_count == 1, "its handler's deferred call ran within the same turn");
        CHECK(poll(&pl, 1, 0) == 0, "and left the loop's fd not readable (no wake for it)");
        loop_del(l, &w);
        close(p[0]);
        close(p[1]);
        loop_free(l);
}

static uint64_t items[3000];
static uint64_t item_hash(const void *ud, uint32_t i) { return ((const uint64_t *)ud)[i] % 7; /* many alike */ }
static bool item_is(const void *ud, uint32_t i) { return items[i] == *(const uint64_t *)ud; }

/* The hash index: every item found, absent keys not, colliding hashes (seven values for 3,000
 * items) probed through, item 0 left out of the index when asked (`from`). */
static void test_slots(void) {
        Slots s = { 0 };
        uint64_t key = 5;
        CHECK(slots_find(&s, 5, item_is, &key) == -1, "an empty index finds nothing");
        bool ok = true;
        for (uint32_t i = 0; i < 3000 && ok; i++) {
                items[i] = 1000 + 3ULL * i;
                ok = slots_reserve(&s, i, 1, item_hash, items) == 0;
                if (ok && i >= 1)
                        s.v[slots_probe(&s, item_hash(items, i), item_is, &items[i])] = i + 1;
        }
        CHECK(ok && s.n >= 6000 && s.n <= 8192, "3,000 items indexed (%zu slots)", s.n);
        for (uint32_t i = 1; i < 3000 && ok; i++)
                ok = slots_find(&s, items[i] % 7, item_is, &items[i]) == i;
        CHECK(ok, "each found at its index");
        key = items[0];
        CHECK(slots_find(&s, key % 7, item_is, &key) == -1, "item 0, left out, is not found");
        key = 1001;
        CHECK(slots_find(&s, key % 7, item_is, &key) == -1, "a key no item has is not found");
        slots_free(&s);
        CHECK(s.n == 0 && !s.v, "freed");
}

static void test_base64(void) {
        uint8_t data[300];
        for (size_t i = 0; i < sizeof data; i++)
                data[i] = (uint8_t)(i * 7 + 3);
        bool all = true;
        for (size_t n = 0; n <= 64 && all; n++) {
                size_t el, dl;
                char *e = b64_encode(data, n, &el);
                uint8_t *d = e ? b64_decode(e, el, &dl) : NULL;
                all = e && d && el == (n + 2) / 3 * 4 && dl == n && memcmp(d, data, n) == 0;
                /* Without the padding too. */
                while (all && el > 0 && e[el - 1] == '=')
                        el--;
                free(d);
                d = all ? b64_decode(e, el, &dl) : NULL;
                all = all && d && dl == n && memcmp(d, data, n) == 0;
                free(d);
                free(e);
        }
        CHECK(all, "base64 round trip of 0..64 bytes, with and without padding");
        size_t dl;
        uint8_t *man = b64_decode("TWFu", 4, &dl);
        CHECK(man && dl == 3, "base64 'TWFu' decodes to 3 bytes");
        free(man);
        errno = 0;
        CHECK(!b64_decode("TW!u", 4, &dl) && errno == EINVAL, "a bad digit in a full group is refused");
        errno = 0;
        CHECK(!b64_decode("TWFuT!", 6, &dl) && errno == EINVAL, "a bad digit in the tail is refused");
        CHECK(!b64_decode("TWFuT", 5, &dl), "a dangling single digit is refused");
        CHECK(!b64_decode("TW\nu", 4, &dl) && !b64_decode("TW\x80u", 4, &dl), "newlines and high bytes are refused");
        errno = 0;
        CHECK(!b64_decode("TW Fu Zg", 8, &dl) && errno == EINVAL, "spaces inside are refused");
        CHECK(!b64_decode("TQ==TWFu", 8, &dl) && !b64_decode("TQ=A", 4, &dl), "padding inside is refused");
}

/* RFC 4648's vectors, and the leniencies text.h promises. */
static void test_base64_vectors(void) {
        static const char *const vec[][2] = {
                { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" },
                { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" },
        };
        bool all = true;
        for (size_t i = 0; i < ELEMENTSOF(vec); i++) {
                size_t el, dl, n = strlen(vec[i][0]);
                char *e = b64_encode((const uint8_t *)vec[i][0], n, &el);
                uint8_t *d = b64_decode(vec[i][1], strlen(vec[i][1]), &dl);
                all = all && e && d && strcmp(e, vec[i][1]) == 0 && el == strlen(e) && dl == n && memcmp(d, vec[i][0], n) == 0;
                free(e);
                free(d);
        }
        CHECK(all, "base64 of RFC 4648's vectors, both ways");
        size_t dl;
        uint8_t *d = b64_decode("TWG", 3, &dl);
        CHECK(d && dl == 2 && memcmp(d, "Ma", 2) == 0, "the unused bits of a last partial group are ignored");
        free(d);
        d = b64_decode("TWG=", 4, &dl);
        CHECK(d && dl == 2 && memcmp(d, "Ma", 2) == 0, "... with padding too");
        free(d);
        d = b64_decode("TWFu====", 8, &dl);
        CHECK(d && dl == 3 && memcmp(d, "Man", 3) == 0, "padding after a full group is ignored");
        free(d);
        d = b64_decode("====", 4, &dl);
        CHECK(d && dl == 0, "padding alone is nothing");
        free(d);
}

static void test_json_marks(void) {
        const char *t = "{\"a\":[1,2,{\"b\":\"{[,:\\\"]\"}]}";
        CHECK(json_marks(t, strlen(t), "{[") == 3, "json_marks counts objects and arrays, not inside strings");
        CHECK(json_marks(t, strlen(t), "{[,:") == 7, "json_marks counts every value's mark, an escaped quote kept in its string");
        CHECK(json_marks("\"{{{", 4, "{[") == 0, "json_marks: an unterminated string hides the rest");
}

int main(void) {
        test_json_marks();
        test_buf();
        test_buf_reserve();
        test_queue();
        test_array_grow();
        test_ring();
        test_parse();
        test_whole_files();
        test_pidfd();
        test_loop();
        test_slots();
        test_base64();
        test_base64_vectors();
        return tap_done();
}
