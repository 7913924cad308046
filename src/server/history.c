/* SPDX-License-Identifier: MIT */
/* The per-session command rings behind shell.history.list and shell.history.clear. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "base/limits.h"
#include "base/util.h"
#include "server/history.h"

struct History {
        History *next;
        char *session;
        HistoryEntry *entries; /* SBX_HISTORY_ENTRIES slots */
        size_t n, start;       /* held entries, the oldest one's slot */
        uint64_t total;        /* commands added since creation or the last clear */
};

static History *history_lookup(History *list, const char *session) {
        for (History *h = list; h; h = h->next)
                if (strcmp(h->session, session) == 0)
                        return h;
        return NULL;
}

static History *history_new(History **list, const char *session) {
        History *h = calloc(1, sizeof *h);
        if (!h || !(h->session = strdup(session)) ||
            !(h->entries = calloc(SBX_HISTORY_ENTRIES, sizeof *h->entries))) {
                if (h)
                        free(h->session);
                free(h);
                return NULL;
        }
        h->next = *list;
        *list = h;
        return h;
}

static void history_drop(History *h) {
        for (size_t i = 0; i < h->n; i++)
                free(h->entries[(h->start + i) % SBX_HISTORY_ENTRIES].command);
        h->n = h->start = 0;
        h->total = 0;
}

int history_add(History **list, const char *session, const char *cmd, size_t len) {
        History *h = history_lookup(*list, session);
        if (!h && !(h = history_new(list, session)))
                return -ENOMEM;
        char *copy = strndup(cmd, len);
        if (!copy)
                return -ENOMEM;
        if (h->n == SBX_HISTORY_ENTRIES) {
                free(h->entries[h->start].command);
                h->start = (h->start + 1) % SBX_HISTORY_ENTRIES;
                h->n--;
        }
        h->entries[(h->start + h->n) % SBX_HISTORY_ENTRIES] = (HistoryEntry){ copy, wall_ms() };
        h->n++;
        h->total++;
        return 0;
}

const History *history_find(const History *list, const char *session) {
        return history_lookup((History *)list, session);
}

size_t history_size(const History *h) { return h ? h->n : 0; }

const HistoryEntry *history_get(const History *h, size_t i, uint64_t *ret_index) {
        *ret_index = h->total - h->n + i + 1;
        return &h->entries[(h->start + i) % SBX_HISTORY_ENTRIES];
}

void history_clear(History *list, const char *session) {
        History *h = history_lookup(list, session);
        if (h)
                history_drop(h);
}

History *history_free(History *list) {
        while (list) {
                History *h = list;
                list = h->next;
                history_drop(h);
                free(h->entries);
                free(h->session);
                free(h);
        }
        return NULL;
}
