/* SPDX-License-Identifier: MIT */
/* Intrusive doubly linked lists: an item has `next` and `prev` members, a list is its head
 * pointer. Linking puts the item first. */
#pragma once
#include <stddef.h>

/* A list with a tail pointer as well, through the members named next and prev (an item may
 * be in several lists): items pushed at either end, the list walked from either. */
#define TLIST_PUSH_FRONT(head, tail, item, next, prev)         \
        do {                                                    \
                (item)->prev = NULL;                            \
                (item)->next = (head);                          \
                if (head)                                       \
                        (head)->prev = (item);                  \
                else                                            \
                        (tail) = (item);                        \
                (head) = (item);                                \
        } while (0)

#define TLIST_PUSH_BACK(head, tail, item, next, prev)          \
        do {                                                    \
                (item)->next = NULL;                            \
                (item)->prev = (tail);                          \
                if (tail)                                       \
                        (tail)->next = (item);                  \
                else                                            \
                        (head) = (item);                        \
                (tail) = (item);                                \
        } while (0)

#define TLIST_UNLINK(head, tail, item, next, prev)             \
        do {                                                    \
                if ((item)->prev)                               \
                        (item)->prev->next = (item)->next;      \
                else                                            \
                        (head) = (item)->next;                  \
                if ((item)->next)                               \
                        (item)->next->prev = (item)->prev;      \
                else                                            \
                        (tail) = (item)->prev;                  \
                (item)->next = (item)->prev = NULL;             \
        } while (0)

/* Without a tail: the same, through members next and prev, the tail kept in a throwaway. */
#define LIST_LINK(head, item)                                   \
        do {                                                    \
                __typeof__(item) tail_unused_ = NULL;           \
                TLIST_PUSH_FRONT(head, tail_unused_, item, next, prev); \
                (void)tail_unused_;                             \
        } while (0)

#define LIST_UNLINK(head, item)                                 \
        do {                                                    \
                __typeof__(item) tail_unused_ = NULL;           \
                TLIST_UNLINK(head, tail_unused_, item, next, prev); \
                (void)tail_unused_;                             \
        } while (0)

/* The object that embeds `ptr` as its member `member`. */
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
