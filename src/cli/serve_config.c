/* SPDX-License-Identifier: MIT */
/* `sbx serve --config FILE`: the daemon's configuration file, read with inih (Debian's
 * libinih). Its [serve] keys are the long options of `sbx serve`, handed to the same option
 * parser as the command line (before it, so a flag given there wins); [sandbox],
 * [sandbox.enforced] and [secrets] hold what every sandbox a client creates gets. */
#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "base/limits.h"
#include "base/util.h"
#include "cli/serve_config.h"
#include "methods/methods.h"
#include "server/server.h"

typedef struct Parse {
        ServeConfig *cfg;
        const struct option *opts;
        char err[512]; /* the first bad key or value, said once */
        unsigned entries;
        unsigned long_line; /* the line past SBX_MAX_CONFIG_LINE_BYTES, if reading stopped there */
} Parse;

static int fail(Parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Parse *p, const char *fmt, ...) {
        if (!p->err[0]) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(p->err, sizeof p->err, fmt, ap);
                va_end(ap);
        }
        return 0; /* inih: an error on this line */
}

/* Keys of [serve] that make no sense in a file: they say what to do with the file itself, or
 * are not configuration. */
static bool key_refused(const char *name) {
        return strcmp(name, "config") == 0 || strcmp(name, "check-config") == 0 || strcmp(name, "help") == 0 ||
               strcmp(name, "protocol") == 0;
}

static int parse_bool(const char *v, bool *ret) {
        if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1") || !strcasecmp(v, "on"))
                *ret = true;
        else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0") || !strcasecmp(v, "off"))
                *ret = false;
        else
                return -EINVAL;
        return 0;
}

static int add_arg(ServeConfig *c, char *arg, unsigned line) {
        if (c->n_args >= SBX_MAX_CONFIG_ENTRIES)
                return -E2BIG;
        c->args[c->n_args] = arg;
        c->lines[c->n_args] = line;
        c->n_args++;
        return 0;
}

/* The options that may be given more than once; the others once per file. */
static bool key_repeatable(const char *name) {
        return strcmp(name, "redact") == 0 || strcmp(name, "api-key") == 0 || strcmp(name, "egress-allow-private") == 0 ||
               strcmp(name, "env-passthrough") == 0;
}

static int serve_key(Parse *p, const char *name, const char *value, unsigned line) {
        const struct option *o = p->opts;
        while (o->name && strcmp(o->name, name) != 0)
                o++;
        if (!o->name || key_refused(name))
                return fail(p, "[serve] has no key '%s' (its keys are the long options of `sbx serve`)", name);
        if (!key_repeatable(name)) {
                char flag[128];
                snprintf(flag, sizeof flag, "--%s", name);
                size_t n = strlen(flag);
                for (size_t i = 0; i < p->cfg->n_args; i++)
                        if (!strncmp(p->cfg->args[i], flag, n) && (p->cfg->args[i][n] == '=' || !p->cfg->args[i][n]))
                                return fail(p, "[serve] %s is given twice (line %u first)", name, p->cfg->lines[i]);
        }
        /* "quoted" values, an INI habit: the quotes are not part of the path or number. */
        char unquoted[SBX_MAX_CONFIG_LINE_BYTES];
        size_t vl = strlen(value);
        if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"' && vl - 2 < sizeof unquoted) {
                memcpy(unquoted, value + 1, vl - 2);
                unquoted[vl - 2] = 0;
                value = unquoted;
        }
        char *arg = NULL;
        if (o->has_arg == no_argument) {
                bool on;
                if (parse_bool(value, &on) < 0)
                        return fail(p, "%s takes true or false, not '%s'", name, value);
                if (!on)
                        return 1;
                if (asprintf(&arg, "--%s", name) < 0)
                        arg = NULL;
        } else {
                if (!*value)
                        return fail(p, "%s needs a value", name);
                if (asprintf(&arg, "--%s=%s", name, value) < 0)
                        arg = NULL;
        }
        if (!arg || add_arg(p->cfg, arg, line) < 0) {
                free(arg);
                return fail(p, "too many entries (at most %u)", SBX_MAX_CONFIG_ENTRIES);
        }
        return 1;
}

/* A [sandbox] value: JSON when it parses as JSON (numbers, true, objects, lists, quoted
 * strings), else the text as a string (`network = allowlist`). */
static json_t *param_value(const char *value) {
        json_t *v = json_loads(value, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
        return v ? v : json_string(value);
}

static int entry(void *user, const char *section, const char *name, const char *value) {
        Parse *p = user;
        ServeConfig *c = p->cfg;
        /* inih does not say the line to its handler: the caller counts the lines it has seen. */
        unsigned line = c->line_now;
        if (++p->entries > SBX_MAX_CONFIG_ENTRIES)
                return fail(p, "too many entries (at most %u)", SBX_MAX_CONFIG_ENTRIES);
        if (!*section)
                return fail(p, "'%s' is outside any section ([serve], [sandbox], [sandbox.enforced], [secrets])", name);
        if (strcmp(section, "serve") == 0)
                return serve_key(p, name, value, line);
        json_t *obj = strcmp(section, "sandbox") == 0            ? c->defaults
                      : strcmp(section, "sandbox.enforced") == 0 ? c->enforced
                      : strcmp(section, "secrets") == 0          ? c->secrets
                                                                 : NULL;
        if (!obj)
                return fail(p, "unknown section [%s] (there are [serve], [sandbox], [sandbox.enforced], [secrets])",
                            section);
        if (json_object_get(obj, name))
                return fail(p, "[%s] %s is given twice", section, name);
        json_t *v;
        if (obj == c->secrets) {
                if (!env_name_valid(name, strlen(name)))
                        return fail(p, "[secrets] '%s' is not a variable name", name);
                v = json_string(value);
        } else {
                if (strcmp(name, "sandboxId") == 0 || strcmp(name, "persist") == 0 || strcmp(name, "lane") == 0)
                        return fail(p, "[%s] %s is not a sandbox option", section, name);
                /* What looks like JSON must be JSON: a broken object is said here, not taken
                 * for a string and refused later as "must be an object". */
                json_error_t je;
                v = NULL;
                if ((value[0] == '{' || value[0] == '[') &&
                    !(v = json_loads(value, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je)))
                        return fail(p, "[%s] %s is not valid JSON: %s (at character %d)", section, name, je.text,
                                    je.position);
                if (!v)
                        v = param_value(value);
                /* Each key against sandbox.create's params on its own, so its line is named. */
                json_t *one = json_pack("{s:O}", name, v);
                RpcError e;
                bool bad = one && method_check("sandbox.create", one, &e) < 0;
                json_decref(one);
                if (bad) {
                        json_decref(v);
                        return fail(p, "[%s] %s", section, e.message);
                }
        }
        if (!v || json_object_set_new(obj, name, v) < 0)
                return fail(p, "out of memory");
        return 1;
}

/* inih reads lines through this, so the handler knows which one it is on. */
static char *read_line(char *str, int num, void *stream) {
        Parse *p = ((void **)stream)[1];
        char *r = fgets(str, num, ((void **)stream)[0]);
        if (!r)
                return NULL;
        p->cfg->line_now++;
        /* A line longer than the buffer would reach inih in pieces, the first taken as the
         * whole line: stop reading there and say so. */
        size_t n = strlen(str);
        if (n + 1 >= (size_t)num && str[n - 1] != '\n') {
                p->long_line = p->cfg->line_now;
                return NULL;
        }
        return r;
}

int serve_config_load(ServeConfig *c, const char *path, const struct option *opts, char *err, size_t errlen) {
        c->path = path;
        c->defaults = json_object();
        c->enforced = json_object();
        c->secrets = json_object();
        if (!c->defaults || !c->enforced || !c->secrets) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        FILE *f = fopen(path, "re");
        if (!f) {
                int r = negerrno();
                snprintf(err, errlen, "%s: %s", path, strerror(-r));
                return r;
        }
        /* Long lines (a policy's list, a JSON value) on the heap; comments only at the start of
         * a line, since a value (a regex, a path) may hold ';' or '#'; one entry per key line. */
        ini_use_stack = false;
        ini_allow_realloc = true;
        ini_max_line = (int)SBX_MAX_CONFIG_LINE_BYTES;
        /* The whole line in one read (so one read is one line, for the line numbers). */
        ini_initial_alloc = (int)SBX_MAX_CONFIG_LINE_BYTES;
        ini_allow_inline_comments = false;
        ini_allow_multiline = false;
        ini_stop_on_first_error = true;
        Parse p = { .cfg = c, .opts = opts };
        void *stream[2] = { f, &p };
        int r = ini_parse_stream(read_line, stream, entry, &p);
        fclose(f);
        if (r == 0 && p.long_line) {
                snprintf(err, errlen, "%s, line %u: longer than %u bytes", path, p.long_line, SBX_MAX_CONFIG_LINE_BYTES);
                return -EINVAL;
        }
        if (r == 0)
                return 0;
        if (r < 0) {
                snprintf(err, errlen, "%s: out of memory", path);
                return -ENOMEM;
        }
        snprintf(err, errlen, "%s, line %d: %s", path, r, p.err[0] ? p.err : "not a [section], key = value or comment");
        return -EINVAL;
}

const char *serve_config_where(const ServeConfig *c, int argv_index, char *buf, size_t size) {
        /* Config entries come right after argv[0]. */
        if (!c->path || argv_index < 1 || (size_t)argv_index > c->n_args)
                return NULL;
        snprintf(buf, size, "%s, line %u", c->path, c->lines[argv_index - 1]);
        return buf;
}

int serve_config_argv(ServeConfig *c, int argc, char **argv) {
        c->argc = argc + (int)c->n_args;
        c->argv = calloc((size_t)c->argc + 1, sizeof *c->argv);
        if (!c->argv)
                return -ENOMEM;
        c->argv[0] = argv[0];
        for (size_t i = 0; i < c->n_args; i++)
                c->argv[1 + i] = c->args[i];
        for (int i = 1; i < argc; i++)
                c->argv[c->n_args + (size_t)i] = argv[i];
        return 0;
}

int serve_config_check_sandbox(const ServeConfig *c, char *err, size_t errlen) {
        /* What a create gets: the defaults, then what is enforced, then the secrets. Each key
         * must be a param of sandbox.create, of its type. */
        json_t *all = json_deep_copy(c->defaults);
        if (!all) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        json_object_update(all, c->enforced);
        if (json_object_size(c->secrets))
                json_object_set(all, "secrets", c->secrets);
        RpcError e;
        int r = method_check("sandbox.create", all, &e);
        if (r >= 0)
                r = sandbox_params_check(all, &e);
        json_decref(all);
        if (r < 0) {
                snprintf(err, errlen, "%s: [sandbox]: %s", c->path, e.message);
                return -EINVAL;
        }
        return 0;
}

void serve_config_done(ServeConfig *c) {
        for (size_t i = 0; i < c->n_args; i++)
                free(c->args[i]);
        free(c->argv);
        json_decref(c->defaults);
        json_decref(c->enforced);
        json_decref(c->secrets);
}
