/* SPDX-License-Identifier: MIT */
/* The session loop, running inside bash as the loadable builtin `sbx_session`.
 *
 * Why inside bash: a session's state (variables, arrays, functions, aliases, options, traps,
 * cwd, umask, open fds) lives in a bash process's memory, and a fork copies all of it for
 * free. So the process that holds the state (the holder) never runs a command itself. It
 * forks a worker ahead of time and hands the daemon a pidfd of it (SPAWNED: the daemon
 * moves it into the next command's cgroup while it is idle); the worker blocks for a command. When the
 * command ends normally, the worker reports the exit code and *becomes the holder*: its
 * memory is exactly the new state, so there is nothing to serialise or replay. The daemon
 * then kills the old holder. When the worker is killed (timeout, cancel) or dies, the old
 * holder, untouched, reports that and forks a fresh worker from the state as it was before
 * the command.
 *
 * `exit`, a `set -e` failure and fatal errors unwind through bash's top_level jump buffer;
 * the worker catches that jump around parse_and_execute(), so the command ends there with
 * its status and every change made before it is kept, like the rest of the session.
 *
 * This file is compiled against bash's own headers and uses bash internals, so it must be
 * built for the bash it runs in (the sandbox uses the host's /bin/bash). */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "builtins.h"
#include "shell.h"
#include "bashjmp.h"
#include "common.h"
#include "execute_cmd.h"
#include "variables.h"
#include "builtext.h"

#include "base/limits.h"
#include "base/util.h"
#include "base/wire.h"

/* High fd numbers keep them out of the way of scripts that use small ones. Both are
 * close-on-exec, so programs a command runs never inherit them. */
#define SOCK_FD 1001
#define NULL_FD 1002
/* The idle worker's end of a pipe to its holder (the first free fd from here, so that no fd
 * of the session's is taken): the worker writes 'R' on it when it exits on WIRE_RETIRE, and
 * closes it before it takes a command. -1 when there is none. */
#define RETIRE_FD_MIN 1003
static int retire_fd = -1;

static sigset_t command_mask;
static uint8_t *msg;

static int send_hdr(uint32_t type, uint32_t seq, int32_t status, uint64_t nonce) {
        WireHdr h = { .type = type, .seq = seq, .status = status, .nonce = nonce };
        for (;;) {
                ssize_t n = send(SOCK_FD, &h, sizeof h, MSG_NOSIGNAL);
                if (n == (ssize_t)sizeof h)
                        return 0;
                if (n < 0 && errno == EINTR)
                        continue;
                return -1;
        }
}

/* Receives one RUN message into msg; fds[] gets its three descriptors. Returns the message
 * length, 0 on WIRE_RETIRE, or -1 when the daemon is gone. Malformed messages are dropped. */
static ssize_t recv_run(int fds[WIRE_RUN_FDS]) {
        for (;;) {
                union {
                        struct cmsghdr align;
                        char buf[CMSG_SPACE(sizeof(int) * WIRE_RUN_FDS)];
                } cm;
                struct iovec iov = { msg, WIRE_MAX_MSG };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                                     .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
                ssize_t n = recvmsg(SOCK_FD, &mh, MSG_CMSG_CLOEXEC);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return -1;
                int nfds = 0;
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                                continue;
                        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                        int *p = (int *)CMSG_DATA(c);
                        for (int i = 0; i < k; i++) {
                                if (nfds < WIRE_RUN_FDS)
                                        fds[nfds++] = p[i];
                                else
                                        close(p[i]);
                        }
                }
                WireHdr *h = (WireHdr *)msg;
                /* A RETIRE for an earlier worker (it died before it read it) is not this one's. */
                if (nfds == 0 && (size_t)n == sizeof *h && h->type == WIRE_RETIRE) {
                        if (h->status == 0 || h->status == (int32_t)getpid())
                                return 0;
                        continue;
                }
                /* A RUN for an earlier worker (it died before it read it; its run was told so)
                 * is not this one's to run either. */
                if (nfds == WIRE_RUN_FDS && (size_t)n >= sizeof *h && h->type == WIRE_RUN &&
                    (uint64_t)h->cwd_len + h->env_len + h->cmd_len == (uint64_t)n - sizeof *h &&
                    !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && (h->status == 0 || h->status == (int32_t)getpid()))
                        return n;
                for (int i = 0; i < nfds; i++)
                        close(fds[i]);
        }
}

/* Runs a command string in this shell, catching the top-level jumps of `exit`, `set -e`
 * and fatal errors so that they end the command, not the process. */
static int run_string(const char *cmd, size_t len) {
        procenv_t saved;
        volatile int status;
        char *s = xmalloc(len + 1);
        memcpy(s, cmd, len);
        s[len] = 0;

        memcpy(saved, top_level, sizeof saved);
        if (sigsetjmp(top_level, 0) == 0) {
                status = parse_and_execute(s, "bash", SEVAL_NOHIST | SEVAL_NOOPTIMIZE);
        } else {
                status = last_command_exit_value;
                /* What reader_loop() would do before reading the next command. */
                if (variable_context)
                        reset_local_contexts();
        }
        memcpy(top_level, saved, sizeof saved);
        loop_level = breaking = continuing = 0;
        funcnest = evalnest = sourcenest = 0;
        return_catch_flag = 0;
        parse_and_execute_level = 0;
        return status;
}

typedef struct Override {
        char *name, *value; /* value this run set */
        char *old;          /* value before, NULL when unset */
        int old_exported;
} Override;

/* Applies NAME=VALUE\0 entries as exported variables for this run; records what to undo. */
static int apply_env(char *env, size_t len, Override **ret) {
        int n = 0;
        for (size_t i = 0; i < len; i++)
                if (env[i] == 0)
                        n++;
        Override *ov = xmalloc(sizeof *ov * (size_t)(n + 1));
        int k = 0;
        for (char *p = env; p < env + len && k < n; p += strlen(p) + 1) {
                char *eq = strchr(p, '=');
                if (!eq)
                        continue;
                *eq = 0;
                SHELL_VAR *v = find_variable(p);
                ov[k].name = p;
                ov[k].value = eq + 1;
                ov[k].old = v && !array_p(v) && !assoc_p(v) && value_cell(v) ? savestring(value_cell(v)) : NULL;
                ov[k].old_exported = v ? exported_p(v) != 0 : 0;
                SHELL_VAR *nv = bind_variable(p, eq + 1, 0);
                if (nv) {
                        VSETATTR(nv, att_exported);
                        array_needs_making = 1;
                        k++;
                } else {
                        free(ov[k].old);
                }
        }
        *ret = ov;
        return k;
}

/* Undoes an override unless the command itself changed the variable since. */
static void restore_env(Override *ov, int n) {
        for (int i = 0; i < n; i++) {
                SHELL_VAR *v = find_variable(ov[i].name);
                if (v && value_cell(v) && strcmp(value_cell(v), ov[i].value) == 0) {
                        if (ov[i].old) {
                                SHELL_VAR *nv = bind_variable(ov[i].name, ov[i].old, 0);
                                if (nv && !ov[i].old_exported)
                                        VUNSETATTR(nv, att_exported);
                        } else {
                                unbind_variable(ov[i].name);
                        }
                        array_needs_making = 1;
                }
                free(ov[i].old);
        }
        free(ov);
}

static void session_set_pwd(const char *path) {
        set_working_directory((char *)path);
        bind_variable("PWD", (char *)path, 0);
}

static void set_oom_score_adj(const char *v) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
                (void)!write(fd, v, strlen(v));
                close(fd);
        }
}

/* ---------------------------------------------------------------- state transfer
 *
 * Fork, snapshots and export move a session's state to another shell. The dump is taken by
 * calling bash's own builtins from C (declare -p, declare -f, alias -p, set +o, shopt -p), so
 * it quotes exactly as bash does and no code of the session runs: a function named `declare`
 * or a DEBUG trap is never invoked. Format: "SBXSTATE 1\n", then sections "T:LEN\n" + LEN
 * bytes + "\n", T one of
 *   U umask (octal)       C cwd                N names of the variables kept, NUL-separated
 *   V `declare -p` text   F `declare -f` text  X names of exported functions, NUL-separated
 *   A `alias -p` text     O `set +o` text      S `shopt -p` text
 * The restore side applies them in an order that keeps the replay itself out of reach of what
 * it restores: variables, then aliases and functions with alias expansion off (a function
 * body must not be expanded twice), options last and from C (`set -o noexec` would otherwise
 * stop the replay, and `set` may by then be a function). */
#define STATE_MAGIC "SBXSTATE 1\n"

extern int expand_aliases;

/* bash's own variables: read-only, dynamic or describing the running shell. Never dumped,
 * never unset by a restore. */
static const char *const special_vars[] = {
        "BASH", "BASHOPTS", "BASHPID", "BASH_ALIASES", "BASH_ARGC", "BASH_ARGV", "BASH_ARGV0",
        "BASH_CMDS", "BASH_COMMAND", "BASH_EXECUTION_STRING", "BASH_LINENO", "BASH_REMATCH",
        "BASH_SOURCE", "BASH_SUBSHELL", "BASH_VERSINFO", "BASH_VERSION", "COMP_WORDBREAKS",
        "DIRSTACK", "EPOCHREALTIME", "EPOCHSECONDS", "EUID", "FUNCNAME", "GROUPS", "HISTCMD",
        "HOSTTYPE", "LINENO", "MACHTYPE", "OSTYPE", "PIPESTATUS", "PPID", "PWD", "RANDOM",
        "SECONDS", "SHELLOPTS", "SHLVL", "SRANDOM", "UID", "_",
};

static int special_var(const char *name) {
        for (size_t i = 0; i < sizeof special_vars / sizeof *special_vars; i++)
                if (strcmp(name, special_vars[i]) == 0)
                        return 1;
        return 0;
}

static int keep_var(SHELL_VAR *v) {
        return !special_var(v->name) && !noassign_p(v) && !local_p(v);
}

static int put_section(char tag, const char *data, size_t len) {
        char head[32];
        int n = snprintf(head, sizeof head, "%c:%zu\n", tag, len);
        return write_all(1, head, (size_t)n) < 0 || write_all(1, data, len) < 0 || write_all(1, "\n", 1) < 0 ? -1 : 0;
}

/* Calls a builtin with its stdout going to a memfd; returns what it printed (xmalloc'd). */
static char *capture(sh_builtin_func_t *fn, WORD_LIST *args, size_t *len) {
        *len = 0;
        int mfd = memfd_create("sbx-state", MFD_CLOEXEC);
        if (mfd < 0)
                return NULL;
        fflush(stdout);
        int saved = fcntl(1, F_DUPFD_CLOEXEC, 10);
        if (saved < 0 || dup2(mfd, 1) < 0) {
                close(mfd);
                if (saved >= 0)
                        close(saved);
                return NULL;
        }
        fn(args);
        fflush(stdout);
        dup2(saved, 1);
        close(saved);
        clearerr(stdout);
        off_t size = lseek(mfd, 0, SEEK_END);
        char *out = xmalloc((size_t)(size > 0 ? size : 0) + 1);
        ssize_t got = size > 0 ? pread(mfd, out, (size_t)size, 0) : 0;
        close(mfd);
        *len = got > 0 ? (size_t)got : 0;
        out[*len] = 0;
        return out;
}

static WORD_LIST *words(const char *const *argv, int n) {
        WORD_LIST *list = NULL;
        for (int i = n - 1; i >= 0; i--)
                list = make_word_list(make_word(argv[i]), list);
        return list;
}

static int section_builtin(char tag, sh_builtin_func_t *fn, WORD_LIST *args) {
        size_t len;
        char *text = capture(fn, args, &len);
        dispose_words(args);
        if (!text)
                return -1;
        int r = put_section(tag, text, len);
        free(text);
        return r;
}

static int exported_var(SHELL_VAR *v) { return exported_p(v) != 0; }

/* A section of the names of the entries of list that `want` keeps, each NUL-terminated. */
static int put_names(char tag, SHELL_VAR **list, int (*want)(SHELL_VAR *)) {
        size_t len = 0;
        for (SHELL_VAR **v = list; v && *v; v++)
                if (want(*v))
                        len += strlen((*v)->name) + 1;
        char *names = xmalloc(len + 1);
        size_t off = 0;
        for (SHELL_VAR **v = list; v && *v; v++)
                if (want(*v)) {
                        size_t l = strlen((*v)->name) + 1;
                        memcpy(names + off, (*v)->name, l);
                        off += l;
                }
        int r = put_section(tag, names, len);
        free(names);
        return r;
}

static int dump_umask_cwd(void) {
        char buf[64];
        mode_t m = umask(0);
        umask(m);
        int n = snprintf(buf, sizeof buf, "%04o", (unsigned)m);
        if (put_section('U', buf, (size_t)n) < 0)
                return -1;
        SHELL_VAR *pwd = find_variable("PWD");
        char *cwd = pwd && value_cell(pwd) && value_cell(pwd)[0] == '/' ? savestring(value_cell(pwd)) : getcwd(NULL, 0);
        if (cwd && put_section('C', cwd, strlen(cwd)) < 0)
                return -1;
        free(cwd);
        return 0;
}

/* Variables: the names (so the restore knows what was unset) and declare -p of each. */
static int dump_variables(void) {
        SHELL_VAR **vars = all_shell_variables();
        WORD_LIST *args = NULL;
        for (SHELL_VAR **v = vars; v && *v; v++)
                if (keep_var(*v))
                        args = make_word_list(make_word((*v)->name), args);
        int r = put_names('N', vars, keep_var);
        free(vars);
        if (r < 0) {
                dispose_words(args);
                return -1;
        }
        if (!args)
                return put_section('V', "", 0);
        args = make_word_list(make_word("-p"), REVERSE_LIST(args, WORD_LIST *));
        return section_builtin('V', declare_builtin, args);
}

/* Functions: each on its own ("LEN:" + its `declare -f NAME`), so that one bash cannot read
 * back (a name like `a=b`) does not take the others with it; then the exported ones' names. */
static int dump_functions(void) {
        SHELL_VAR **fns = all_shell_functions();
        size_t flen = 0, fcap = 4096;
        char *ftext = xmalloc(fcap);
        for (SHELL_VAR **v = fns; v && *v; v++) {
                const char *args[] = { "-f", (*v)->name };
                size_t l;
                WORD_LIST *w = words(args, 2);
                char *def = capture(declare_builtin, w, &l);
                dispose_words(w);
                if (!def)
                        continue;
                char head[32];
                int hl = snprintf(head, sizeof head, "%zu:", l);
                while (flen + (size_t)hl + l > fcap) {
                        fcap *= 2;
                        ftext = xrealloc(ftext, fcap);
                }
                memcpy(ftext + flen, head, (size_t)hl);
                memcpy(ftext + flen + hl, def, l);
                flen += (size_t)hl + l;
                free(def);
        }
        int r = put_section('F', ftext, flen);
        free(ftext);
        if (r >= 0)
                r = put_names('X', fns, exported_var);
        free(fns);
        return r;
}

static int dump_state(void) {
        static const char *const a[] = { "-p" }, *const o[] = { "+o" }, *const s[] = { "-p" };
        if (write_all(1, STATE_MAGIC, sizeof STATE_MAGIC - 1) < 0 || dump_umask_cwd() < 0 || dump_variables() < 0 ||
            dump_functions() < 0 || section_builtin('A', alias_builtin, words(a, 1)) < 0 ||
            section_builtin('O', set_builtin, words(o, 1)) < 0 ||
            section_builtin('S', shopt_builtin, words(s, 1)) < 0)
                return 1;
        return 0;
}

typedef struct Section {
        const char *data;
        size_t len;
} Section;

/* Splits a dump into its sections (indexed by tag letter); 0 on success. */
static int parse_state(const char *p, size_t len, Section sec[26]) {
        const char *end = p + len;
        memset(sec, 0, sizeof(Section) * 26);
        if (len < sizeof STATE_MAGIC - 1 || memcmp(p, STATE_MAGIC, sizeof STATE_MAGIC - 1) != 0)
                return -1;
        p += sizeof STATE_MAGIC - 1;
        while (p < end) {
                char tag = *p;
                if (tag < 'A' || tag > 'Z' || end - p < 3 || p[1] != ':')
                        return -1;
                char *nl;
                unsigned long long l = strtoull(p + 2, &nl, 10);
                if (nl >= end || *nl != '\n' || l > (unsigned long long)(end - nl - 1) || (size_t)(end - nl - 1) - l < 1 ||
                    nl[1 + l] != '\n')
                        return -1;
                sec[tag - 'A'] = (Section){ nl + 1, (size_t)l };
                p = nl + 2 + l;
        }
        return 0;
}

static int name_listed(const Section *s, const char *name) {
        size_t want = strlen(name) + 1;
        for (const char *p = s->data, *end = s->data ? s->data + s->len : NULL; p && p < end;) {
                size_t l = strnlen(p, (size_t)(end - p));
                if (l + 1 == want && memcmp(p, name, want - 1) == 0)
                        return 1;
                p += l + 1;
        }
        return 0;
}

static void run_section(const Section *s) {
        if (s->data && s->len > 0)
                (void)run_string(s->data, s->len);
}

/* Applies each "set -o NAME" / "set +o NAME" / "shopt -s NAME" / "shopt -u NAME" line. */
static void apply_options(const Section *s, int shopt) {
        char line[256];
        const char *p = s->data, *end = s->data ? s->data + s->len : NULL;
        while (p && p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
                if (l < sizeof line) {
                        memcpy(line, p, l);
                        line[l] = 0;
                        char verb[16], flag[4], name[128];
                        if (sscanf(line, "%15s %3s %127s", verb, flag, name) == 3) {
                                if (shopt && strcmp(verb, "shopt") == 0 && strcmp(name, "login_shell") != 0 &&
                                    strcmp(name, "restricted_shell") != 0)
                                        (void)shopt_setopt(name, strcmp(flag, "-s") == 0);
                                else if (!shopt && strcmp(verb, "set") == 0)
                                        (void)set_minus_o_option(flag[0] == '-' ? '-' : '+', name);
                        }
                }
                p += l + 1;
        }
}

/* Reads stdin to the end (bounded by what the daemon sends), NUL-terminated so that number
 * parsing can never run past it. */
static char *read_stdin(size_t *len) {
        size_t cap = 65536, n = 0;
        char *buf = xmalloc(cap + 1);
        for (;;) {
                if (n == cap) {
                        cap *= 2;
                        buf = xrealloc(buf, cap + 1);
                }
                ssize_t k = read(0, buf + n, cap - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                n += (size_t)k;
        }
        buf[n] = 0;
        *len = n;
        return buf;
}

static int restore_state(void) {
        size_t len;
        char *text = read_stdin(&len);
        Section sec[26];
        if (parse_state(text, len, sec) < 0 || !sec['N' - 'A'].data) {
                fprintf(stderr, "sbx: restore: not a session state\n");
                free(text);
                return 1;
        }
        expand_aliases = 0;
        /* What the dumped shell had unset stays unset. */
        SHELL_VAR **vars = all_shell_variables();
        for (SHELL_VAR **v = vars; v && *v; v++)
                if (keep_var(*v) && !readonly_p(*v) && !name_listed(&sec['N' - 'A'], (*v)->name))
                        (void)unbind_variable((*v)->name);
        free(vars);
        array_needs_making = 1;
        run_section(&sec['V' - 'A']);

        const Section *u = &sec['U' - 'A'], *c = &sec['C' - 'A'];
        if (u->data) {
                char m[16];
                snprintf(m, sizeof m, "%.*s", (int)MIN(u->len, 15u), u->data);
                umask((mode_t)(strtoul(m, NULL, 8) & 0777));
        }
        if (c->data && c->len > 0 && c->len < 4096) {
                char *dir = xmalloc(c->len + 1);
                memcpy(dir, c->data, c->len);
                dir[c->len] = 0;
                if (chdir(dir) == 0)
                        session_set_pwd(dir);
                else
                        fprintf(stderr, "sbx: restore: cwd %s: %s\n", dir, strerror(errno));
                free(dir);
        }
        run_section(&sec['A' - 'A']);
        const Section *fs = &sec['F' - 'A'];
        for (const char *p = fs->data, *end = fs->data ? fs->data + fs->len : NULL; p && p < end;) {
                char *colon;
                unsigned long long l = strtoull(p, &colon, 10);
                if (colon >= end || *colon != ':' || l > (unsigned long long)(end - colon - 1))
                        break;
                (void)run_string(colon + 1, (size_t)l);
                p = colon + 1 + l;
        }
        const Section *x = &sec['X' - 'A'];
        char *names = xmalloc(x->len + 1);
        if (x->data)
                memcpy(names, x->data, x->len);
        names[x->len] = 0;
        for (const char *p = names; p < names + x->len; p += strlen(p) + 1) {
                SHELL_VAR *f = find_function(p);
                if (f)
                        VSETATTR(f, att_exported);
        }
        free(names);
        array_needs_making = 1;
        expand_aliases = 1; /* the dumped value, if any, comes with the shopt section */
        apply_options(&sec['O' - 'A'], 0);
        apply_options(&sec['S' - 'A'], 1);
        free(text);
        return 0;
}

/* Makes the run's three descriptors stdin, stdout and stderr, inheritable by what the
 * command runs. */
static void take_fds(const int fds[WIRE_RUN_FDS]) {
        for (int i = 0; i < WIRE_RUN_FDS; i++) {
                if (fds[i] != i) {
                        dup2(fds[i], i);
                        close(fds[i]);
                } else {
                        fcntl(i, F_SETFD, 0);
                }
        }
        clearerr(stdout);
        clearerr(stderr);
}

/* Moves to the run's working directory (cwd, len bytes); *ret_old and *ret_run get the
 * directories to go back from and to (xmalloc'd, the caller frees them either way). */
static int enter_cwd(const char *cwd, size_t len, char **ret_old, char **ret_run) {
        char *run_cwd = xmalloc(len + 1);
        memcpy(run_cwd, cwd, len);
        run_cwd[len] = 0;
        *ret_run = run_cwd;
        *ret_old = getcwd(NULL, 0);
        if (chdir(run_cwd) < 0) {
                fprintf(stderr, "sbx: cwd: %s: %s\n", run_cwd, strerror(errno));
                return -1;
        }
        char *now = getcwd(NULL, 0);
        if (now) {
                session_set_pwd(now);
                free(run_cwd);
                *ret_run = now;
        }
        return 0;
}

/* Prints the value of the exported scalar variable named by the first len bytes of cmd (at
 * most 255); status 1 if there is none. */
static int print_exported(const char *cmd, size_t len) {
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)MIN(len, 255u), cmd);
        SHELL_VAR *v = find_variable(name);
        if (v && exported_p(v) && !array_p(v) && !assoc_p(v) && value_cell(v)) {
                const char *val = value_cell(v);
                size_t l = strlen(val);
                return write(1, val, l) == (ssize_t)l ? 0 : 1;
        }
        return 1;
}

/* Runs the command with the run's environment; undoes that environment unless the run keeps
 * it, and the working directory if the command did not move away from run_cwd. */
static int run_command(const WireHdr *h, char *env, const char *cmd, const char *run_cwd, const char *old_cwd) {
        Override *ov = NULL;
        int n_ov = apply_env(env, h->env_len, &ov);
        int status = run_string(cmd, h->cmd_len);
        if (h->flags & WIRE_F_PERSIST_ENV) {
                for (int i = 0; i < n_ov; i++)
                        free(ov[i].old);
                free(ov);
        } else {
                restore_env(ov, n_ov);
        }
        if (run_cwd && old_cwd) {
                char *now = getcwd(NULL, 0);
                if (now && strcmp(now, run_cwd) == 0 && chdir(old_cwd) == 0)
                        session_set_pwd(old_cwd);
                free(now);
        }
        return status;
}

/* RLIMIT_NPROC as the first holder found it (the sandbox's limit, where no pids cgroup
 * holds one), and the commands' share of it; share 0: nothing to do. Read once, so the
 * per-command path makes no call when a cgroup does the job. */
static struct rlimit nproc_whole;
static rlim_t nproc_share;

static void nproc_init(void) {
        if (getrlimit(RLIMIT_NPROC, &nproc_whole) == 0 && nproc_whole.rlim_max != RLIM_INFINITY &&
            nproc_whole.rlim_max <= UINT32_MAX)
                nproc_share = SBX_PIDS_FOR_COMMANDS((uint32_t)nproc_whole.rlim_max);
}

/* A command's share of the process limit (true), or the holder's whole (false); see worker(). */
static void nproc_limit(bool command) {
        if (!nproc_share)
                return;
        struct rlimit rl = { command ? nproc_share : nproc_whole.rlim_max, nproc_whole.rlim_max };
        (void)setrlimit(RLIMIT_NPROC, &rl);
}

/* A WIRE_F_DETACH run: the command goes to a process of its own, forked from this worker,
 * which exits at once. The process is orphaned to the sandbox's pid 1, which reaps it and
 * reports its status; the holder, whose state nothing touched, forks the next worker. SIGCHLD
 * stays blocked here until the exit: bash's handler would otherwise reap the process before
 * pid 1 could. Never returns. */
static void detach(const WireHdr *h, uint32_t seq, uint64_t nonce, const char *cwd, char *env, const char *cmd) {
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, NULL);
        pid_t p = fork();
        if (p == 0) {
                /* The session socket is the holder's and the worker's, never the process's. */
                close(SOCK_FD);
                sigprocmask(SIG_SETMASK, &command_mask, NULL);
                dollar_dollar_pid = getpid();
                if (h->flags & WIRE_F_PTY) {
                        (void)setsid();
                        (void)ioctl(0, TIOCSCTTY, 0);
                }
                char *old_cwd = NULL, *run_cwd = NULL;
                int status = 1;
                if (h->cwd_len == 0 || enter_cwd(cwd, h->cwd_len, &old_cwd, &run_cwd) == 0)
                        status = run_command(h, env, cmd, run_cwd, old_cwd);
                fflush(stdout);
                fflush(stderr);
                _exit(status & 0xff);
        }
        if (send_hdr(WIRE_DETACHED, seq, p > 0 ? (int32_t)p : -errno, nonce) < 0 && p > 0)
                kill(p, SIGKILL); /* the daemon is gone: nobody would ever hear of it */
        _exit(0);
}

/* The worker's life: take one command, run it, report. Returns when this process
 * is to become the holder; exits when the daemon is gone. */
static void worker(void) {
        int fds[WIRE_RUN_FDS];

        sigprocmask(SIG_SETMASK, &command_mask, NULL);
        dollar_dollar_pid = getpid();
        /* No other process may read this one's memory (the nonce), ptrace it or take its fds. */
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        /* When the sandbox runs out of memory the OOM killer must take a command, not the
         * shell that holds the session's state. Raising one's own score needs no privilege
         * (lowering the holder's would need CAP_SYS_RESOURCE, which hosts may not have). */
        set_oom_score_adj("500");
        /* Without a pids cgroup, RLIMIT_NPROC (the sandbox's limit, counted over all of its
         * processes) is all there is: a command and what it starts get its share only, so what
         * commands leave running can never keep a holder from forking the next worker. Only
         * the soft limit: this process becomes the next holder, which takes the whole again
         * (a command could too, with `ulimit -Su`; the reserve is for what it forgets). */
        nproc_limit(true);
        ssize_t n = recv_run(fds);
        if (n < 0)
                _exit(0);
        if (n == 0) {
                /* Retired before it ran anything: the holder hears why it exits. */
                if (retire_fd < 0 || write(retire_fd, "R", 1) != 1)
                        _exit(1);
                _exit(0);
        }
        if (retire_fd >= 0)
                close(retire_fd);
        retire_fd = -1;
        WireHdr *h = (WireHdr *)msg;
        /* Kept off the message buffer, which the command could overwrite no more easily but
         * which a later RUN would reuse. */
        uint64_t nonce = h->nonce;
        uint32_t seq = h->seq;
        char *cwd = (char *)msg + sizeof *h;
        char *env = cwd + h->cwd_len;
        char *cmd = env + h->env_len;
        take_fds(fds);
        if (h->flags & WIRE_F_DETACH)
                detach(h, seq, nonce, cwd, env, cmd);

        int status;
        char *old_cwd = NULL, *run_cwd = NULL;
        if (h->cwd_len > 0 && enter_cwd(cwd, h->cwd_len, &old_cwd, &run_cwd) < 0)
                status = 1;
        else if (h->flags & WIRE_F_DUMP)
                status = dump_state();
        else if (h->flags & WIRE_F_RESTORE)
                status = restore_state();
        else if (h->flags & WIRE_F_GETENV)
                status = print_exported(cmd, h->cmd_len);
        else
                status = run_command(h, env, cmd, run_cwd, old_cwd);
        free(old_cwd);
        free(run_cwd);
        fflush(stdout);
        fflush(stderr);
        for (int i = 0; i < WIRE_RUN_FDS; i++)
                dup2(NULL_FD, i);
        if (send_hdr(WIRE_DONE, seq, status & 0xff, nonce) < 0)
                _exit(status & 0xff);
        set_oom_score_adj("0"); /* holder again: back to the default */
}

/* Waits for the daemon's word `type` on the socket, dropping anything else; exits when the
 * daemon is gone. A holder waits so with no worker, so nothing else reads the socket: for
 * WIRE_MOVED, a worker that became the holder, which forks the next worker only once the daemon
 * has moved it out of the command's cgroup (so that cgroup ends up holding only what the
 * command left running); for WIRE_FORK, a holder whose worker retired. */
static void await_word(uint32_t type) {
        WireHdr h;
        for (;;) {
                ssize_t n = recv(SOCK_FD, &h, sizeof h, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        _exit(0);
                if ((size_t)n == sizeof h && h.type == type)
                        return;
        }
}

/* Tells the daemon which process is the new worker, by a pidfd (the daemon cannot tell it
 * from a sibling by the sender's credentials alone). */
static void announce_worker(pid_t w) {
        int pfd = pidfd_open(w, 0);
        if (pfd < 0)
                return; /* the daemon then never takes a worker: the run times out cleanly */
        WireHdr h = { .type = WIRE_SPAWNED };
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int))];
        } cm;
        struct iovec iov = { &h, sizeof h };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pfd, sizeof pfd);
        while (sendmsg(SOCK_FD, &mh, MSG_NOSIGNAL) < 0 && errno == EINTR)
                ;
        close(pfd);
}

/* A shell started while pid 1 was still building the root (`sbx_session FD GO DIR`): it
 * says nothing and reads no command until pid 1 writes one byte on GO, the sign that its root
 * is the sandbox's; then it moves to DIR, where other shells start. The end of GO without a
 * byte means the sandbox never came up. */
static void await_root(WORD_LIST *go) {
        int fd = atoi(go->word->word);
        char b;
        ssize_t n;
        while ((n = read(fd, &b, 1)) < 0 && errno == EINTR)
                ;
        if (n != 1)
                _exit(0);
        close(fd);
        const char *dir = go->next && go->next->word ? go->next->word->word : NULL;
        /* Absolute, resolved in the sandbox's root now: whatever cwd the shell had while it
         * started (on the host's tree, which pivot_root moved away) is left behind here. */
        if (!dir || chdir(dir) < 0)
                _exit(1);
        /* Its stdin, stdout and stderr were the host's /dev/null: the sandbox's from now on, so
         * that nothing of the shell refers to the host's tree. */
        int nul = open("/dev/null", O_RDWR);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(nul, 2) < 0)
                _exit(1);
        if (nul > 2)
                close(nul);
        session_set_pwd(dir);
}

/* The holder's life: fork a worker, wait for it. Returns only on a fatal setup error. */
static int sbx_session_builtin(WORD_LIST *list) {
        sigset_t chld;

        if (!list || !list->word) {
                builtin_error("usage: sbx_session FD [GO DIR]");
                return EX_USAGE;
        }
        if (list->next && list->next->word)
                await_root(list->next);
        int fd = atoi(list->word->word);
        if (dup3(fd, SOCK_FD, O_CLOEXEC) < 0)
                return EXECUTION_FAILURE;
        close(fd);
        int nfd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (nfd < 0 || dup3(nfd, NULL_FD, O_CLOEXEC) < 0)
                return EXECUTION_FAILURE;
        close(nfd);
        msg = xmalloc(WIRE_MAX_MSG);
        unbind_variable("BASH_EXECUTION_STRING");
        /* Not `bash -c` any more: otherwise bash execs the last simple command of a string in
         * place of the worker instead of forking it. */
        startup_state = 1;
        nproc_init();

        /* The holder reaps its worker itself; bash's SIGCHLD handler must not get there
         * first, so SIGCHLD stays blocked in the holder and is unblocked in each worker. */
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &command_mask);
        sigdelset(&command_mask, SIGCHLD);

        if (send_hdr(WIRE_HELLO, 0, 0, 0) < 0)
                _exit(0);
        for (;;) {
                /* Without the pipe the worker cannot retire: it ignores no RETIRE, but its
                 * holder then takes its exit for a death (DIED) and forks the next at once. */
                int rp[2];
                if (pipe2(rp, O_CLOEXEC | O_NONBLOCK) < 0)
                        rp[0] = rp[1] = -1;
                pid_t w = fork();
                if (w < 0) {
                        if (rp[0] >= 0) {
                                close(rp[0]);
                                close(rp[1]);
                        }
                        /* Most likely the pids limit, with a fork bomb still dying. */
                        usleep(20000);
                        continue;
                }
                if (w == 0) {
                        if (rp[0] >= 0) {
                                close(rp[0]);
                                retire_fd = fcntl(rp[1], F_DUPFD_CLOEXEC, RETIRE_FD_MIN);
                                close(rp[1]);
                        }
                        worker();
                        sigprocmask(SIG_BLOCK, &chld, NULL);
                        nproc_limit(false);
                        await_word(WIRE_MOVED);
                        continue; /* this process is now the holder */
                }
                if (rp[1] >= 0)
                        close(rp[1]);
                announce_worker(w);
                /* This process ran the last command: what it left running in the background are
                 * its children. Reaped here as they end, or their zombies would keep pids of the
                 * sandbox's limit (and show in ps) until the session ends. */
                int ws;
                for (pid_t p; (p = waitpid(-1, &ws, 0)) != w;)
                        if (p < 0 && errno != EINTR)
                                _exit(1);
                char b = 0;
                int retired = rp[0] >= 0 && read(rp[0], &b, 1) == 1 && b == 'R';
                if (rp[0] >= 0)
                        close(rp[0]);
                if (retired) {
                        /* With the wait status: a command that wrote the 'R' itself (through
                         * /proc) and ended is heard as what it is, its end. */
                        if (send_hdr(WIRE_RETIRED, 0, ws, 0) < 0)
                                _exit(0);
                        await_word(WIRE_FORK);
                        continue;
                }
                if (send_hdr(WIRE_DIED, 0, ws, 0) < 0)
                        _exit(0);
        }
}

static char *sbx_session_doc[] = {
        "Run the sbx session loop on the given socket fd (internal to sbx).",
        NULL,
};

__attribute__((visibility("default"))) struct builtin sbx_session_struct = {
        "sbx_session", sbx_session_builtin, BUILTIN_ENABLED, sbx_session_doc,
        "sbx_session FD [GO DIR]", 0,
};
