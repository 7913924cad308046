/* SPDX-License-Identifier: MIT */
/* What port.c (exposed ports, sbx/port.h) shares with its unit test: the reader of the kernel's
 * TCP tables. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads a /proc/<pid>/net/tcp or tcp6 table from fd to its end and says whether a socket of it
 * listens (state 0A) on port. Returns 1, 0, or -errno when reading fails. fd stays the
 * caller's. */
int port_scan_tcp(int fd, uint16_t port);
/* The uid that owns the other end of an accepted TCP connection on this host (NETLINK_SOCK_DIAG,
 * looked up by the connection's addresses and ports). Returns 0, or -errno (-ENOENT: no such
 * socket here, it closed or lives in another network namespace). */
int port_socket_uid(int fd, uid_t *ret);
