/* SPDX-License-Identifier: MIT */
/* Minimal TAP output for the C unit tests: meson reads it with protocol 'tap'. */
#pragma once
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

#define CHECK(cond, ...)                                                     \
        do {                                                                 \
                bool tap_ok_ = (cond);                                       \
                tap_n++;                                                     \
                printf("%sok %d - ", tap_ok_ ? "" : "not ", tap_n);         \
                printf(__VA_ARGS__);                                         \
                printf("%s\n", tap_ok_ ? "" : "  [" #cond "]");             \
                if (!tap_ok_)                                                \
                        tap_failed++;                                        \
                fflush(stdout);                                              \
        } while (0)

static inline int tap_done(void) {
        printf("1..%d\n", tap_n);
        return tap_failed ? 1 : 0;
}
