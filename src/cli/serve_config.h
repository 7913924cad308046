/* SPDX-License-Identifier: MIT */
/* The configuration file of `sbx serve` (serve_config.c). Ownership: a ServeConfig owns the
 * option strings made from [serve], the argv that puts them before the command line's, and the
 * JSON objects of the sandbox sections (handed to the server by reference). */
#pragma once
#include <getopt.h>
#include <jansson.h>
#include <stddef.h>
#include "base/limits.h"

typedef struct ServeConfig {
        const char *path;  /* NULL: no --config */
        char *args[SBX_MAX_CONFIG_ENTRIES]; /* "--key=value" of [serve], in file order */
        unsigned lines[SBX_MAX_CONFIG_ENTRIES];
        size_t n_args;
        unsigned line_now; /* while reading: the line inih is on */
        int argc;
        char **argv;       /* argv[0], the config's options, then the command line's */
        json_t *defaults;  /* [sandbox]: params of create and sandbox.create a client may change */
        json_t *enforced;  /* [sandbox.enforced]: params a client may not change */
        json_t *secrets;   /* [secrets]: NAME -> value, added to every sandbox's secrets */
} ServeConfig;

/* Reads path. Returns 0, or -errno with err set to "PATH, line N: what is wrong" (or why the
 * file could not be read). */
int serve_config_load(ServeConfig *c, const char *path, const struct option *opts, char *err, size_t errlen);
/* Builds c->argc/c->argv: argv[0], the [serve] options, then argv[1..]. Returns 0 or -ENOMEM. */
int serve_config_argv(ServeConfig *c, int argc, char **argv);
/* "PATH, line N" when c->argv[argv_index] came from the file, else NULL. */
const char *serve_config_where(const ServeConfig *c, int argv_index, char *buf, size_t size);
/* Checks the sandbox sections against sandbox.create's params. Returns 0 or -EINVAL with err. */
int serve_config_check_sandbox(const ServeConfig *c, char *err, size_t errlen);
void serve_config_done(ServeConfig *c);
