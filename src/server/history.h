/* SPDX-License-Identifier: MIT */
/* The command history of a sandbox's sessions, for shell.history.list and .clear.
 *
 * A sandbox holds a list of History, one per session name that has run a command; each is a
 * ring of the newest SBX_HISTORY_ENTRIES commands. Entries are numbered from 1 over the whole
 * life of the session, so a client can tell which ones the ring has dropped. */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct History History;

typedef struct HistoryEntry {
        char *command;
        uint64_t timestamp_ms; /* wall clock */
} HistoryEntry;

/* Remembers cmd (len bytes, copied) as run in session, creating the session's ring on first
 * use. Returns 0 or -ENOMEM (the command is then not remembered). */
int history_add(History **list, const char *session, const char *cmd, size_t len);
/* The session's ring, NULL if it never ran a command. */
const History *history_find(const History *list, const char *session);
/* Commands held, at most SBX_HISTORY_ENTRIES. */
size_t history_size(const History *h);
/* The i-th oldest held command (i < history_size); *ret_index gets its number. */
const HistoryEntry *history_get(const History *h, size_t i, uint64_t *ret_index);
/* Forgets the session's commands and restarts its numbering. */
void history_clear(History *list, const char *session);
/* Frees every ring of the list; returns NULL. */
History *history_free(History *list);
