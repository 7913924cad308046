/* SPDX-License-Identifier: MIT */
/* fd, file and string helpers with no OS side effects beyond the fds they are given. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/macro.h"

uint64_t now_ns(void);
static inline uint64_t now_ms(void) { return now_ns() / 1000000ULL; }
/* Wall-clock time (CLOCK_REALTIME), ms since the epoch: for timestamps shown to people, never
 * for measuring durations (now_ns is monotonic). */
uint64_t wall_ms(void);

/* Returns 0 or -errno. */
int fd_set_nonblock(int fd, bool on);
/* Sends SIGKILL through a pidfd; nothing when pidfd < 0. A process already gone is no error
 * worth reporting, so none is. */
void pidfd_sigkill(int pidfd);
/* SIGKILL to the child behind pidfd, then waits for it and reaps it (the fd stays open). Blocks:
 * only where waiting is allowed (on the way out). */
void pidfd_kill_reap(int pidfd);
/* True once the process behind the pidfd has exited (the pidfd polls readable); never waits. */
bool pidfd_is_dead(int pidfd);
/* Closes every fd above 2 but those listed (at most 16; -1 entries are ignored): for a child
 * about to become something else, holding only what it names. No allocation. */
void close_all_but(const int *keep, size_t n);
/* Puts n fds (none: no control message) into mh as SCM_RIGHTS, in buf (at least
 * CMSG_SPACE(sizeof(int) * n) bytes, aligned for a cmsghdr). */
struct msghdr;
void msg_attach_fds(struct msghdr *mh, char *buf, const int *fds, size_t n);
/* The fds that came with a message received into mh, from every SCM_RIGHTS part, in order:
 * the first max go to fds (the caller's), the rest are closed. Returns how many went to fds. */
size_t msg_take_fds(struct msghdr *mh, int *fds, size_t max);
/* Writes all of buf to a blocking fd, retrying on EINTR. Returns 0 or -errno. */
int write_all(int fd, const void *buf, size_t len);
/* Writes the string to dirfd/path (O_WRONLY, no create): for cgroup and proc files.
 * Returns 0 or -errno. */
int write_file_at(int dirfd, const char *path, const char *s);
/* Reads up to size-1 bytes of dirfd/path into buf and NUL-terminates it.
 * Returns the length or -errno. */
/* One read() of a non-blocking fd, retried on EINTR: the bytes read, 0 at EOF, -EAGAIN when
 * it has nothing now, or -errno (a terminal master's -EIO: every slave is closed). */
ssize_t read_ready(int fd, void *buf, size_t len);
ssize_t read_file_at(int dirfd, const char *path, char *buf, size_t size);
/* The pid the pidfd fd refers to, as this process sees it (its fdinfo); 0 if unknown. */
pid_t pidfd_pid(int fd);
/* The parent of host pid and its pid in its own pid namespace (NSpid's last), from one read of
 * its /proc status (the kernel formats the whole file for each read); 0s when it is gone. */
void proc_status_ids(pid_t pid, pid_t *ret_ppid, pid_t *ret_nspid);
/* Fills out with 2*nbytes random hex digits and a NUL. Returns 0 or -errno. */
int random_hex(char *out, size_t nbytes);
/* True when s matches ^[A-Za-z_][A-Za-z0-9_]*$. */
bool env_name_valid(const char *s, size_t len);
/* True when s is 1 to max bytes of [A-Za-z0-9_.-]: a name (a session's) that may appear in
 * logs, errors and file names as it is. */
bool name_valid(const char *s, size_t max);
/* Reads a regular file whole into a malloc'd buffer (the caller's). Returns 0, -EFBIG when it
 * is not a regular file or holds more than max bytes, or -errno (-EIO: it shrank meanwhile). */
int read_file_whole(const char *path, uint64_t max, uint8_t **ret, size_t *ret_len);
/* Writes a file whole, or leaves what was there: the data goes to a file next to it, which
 * is synced and renamed over it. Returns 0 or -errno. */
int write_file_replace(const char *path, const void *data, size_t len);
/* Parses a whole decimal string into *ret; -EINVAL if not a number, -ERANGE if above max. */
int parse_u64(const char *s, uint64_t max, uint64_t *ret);
/* Parses "10", "10k", "64M", "1G" (powers of 1024). Returns 0 or -EINVAL/-ERANGE. */
int parse_size(const char *s, uint64_t *ret);

/* Makes room for element n of *array, which has room for *cap elements of `size` bytes:
 * when n has reached *cap, doubles it (from `first`). Returns 0, or -ENOMEM with the array
 * as it was. */
int array_grow(void **array, size_t n, size_t *cap, size_t size, size_t first);
#define ARRAY_GROW(a, n, cap, first) array_grow((void **)&(a), (n), &(cap), sizeof *(a), (first))
/* A byte count as parse_size() reads it back: the largest K/M/G/T suffix that divides it
 * ("16M", "1536K"), else "N bytes". */
void format_size(uint64_t v, char *out, size_t size);
