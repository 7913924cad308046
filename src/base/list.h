/* SPDX-License-Identifier: MIT */
/* Intrusive doubly linked lists: an item has `next` and `prev` members, a list is its head
 * pointer. Linking puts the item first. */
#pragma once
#include <stddef.h>

#define LIST_LINK(head, item)                                   \
        do {                                                    \
                (item)->prev = NULL;                            \
                (item)->next = (head);                          \
                if (head)                                       \
                        (head)->prev = (item);                  \
                (head) = (item);                                \
        } while (0)

#define LIST_UNLINK(head, item)                                 \
        do {                                                    \
                if ((item)->prev)                               \
                        (item)->prev->next = (item)->next;      \
                else                                            \
                        (head) = (item)->next;                  \
                if ((item)->next)                               \
                        (item)->next->prev = (item)->prev;      \
                (item)->next = (item)->prev = NULL;             \
        } while (0)

/* The object that embeds `ptr` as its member `member`. */
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
