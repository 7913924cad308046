# SPDX-License-Identifier: MIT
"""The Python kernel of a code context: sbx's session protocol (base/wire.h), spoken by python3.

Started by the sandbox's pid 1 as `python3 -I /proc/self/fd/4 3`, this script is a session
shell like bash with the sbx_session builtin, and for the same reason: a context's state
(variables, imports, open data frames, cwd, env) lives in one process's memory, and a fork
copies all of it for nothing. The holder never runs a cell. It forks a worker ahead of time and
hands the daemon a pidfd of it (SPAWNED; the daemon moves it into the next cell's cgroup while
it is idle). The worker takes one cell, runs it, and when the cell ends *becomes the holder*:
its memory is the new state. When the cell is killed (timeout, cancel) or its process dies
(os._exit, the OOM killer), the old holder, untouched, forks a fresh worker: the context is
exactly as it was before the cell. After a cell that ended clean (nothing of it left running,
no other thread in the worker) the roles turn (fork_keeper()): the worker stays the worker and
its fork, the keeper, becomes the holder, so the next cell runs in a warm process and the
after-fork steps are the keeper's; the keeper watches its worker on a pidfd (hold(adopted)).

What that cannot keep, said plainly: threads. A fork has only the thread that called it, so
threads an earlier cell started do not run in the next cell's process, and are gone once it
ends; every cell run in such a context is told so (a `warning` event). Files and sockets
opened earlier stay open (a fork shares them).

The cell sees /dev/null on stdin; what it prints through sys.stdout and sys.stderr, its
results, `display()` calls and its error come to the daemon as events, one JSON object per
line, on the pipe the RUN message carries in place of stdin (WIRE_F_EVENTS), in the order
they happened; what its child processes write to fds 1 and 2 goes to the run's stdout and
stderr pipes. Events:
  {"type": "stdout"|"stderr", "text": str}
  {"type": "result", "data": {mime: value}, "metadata": {...}}     the cell's value (Out[n])
  {"type": "display", "data": {mime: value}, "metadata": {...}}    display(), a figure
  {"type": "error", "name": str, "value": str, "traceback": str}
  {"type": "warning", "text": str}
  {"type": "end", "executionCount": int}                           last, once the cell ended
Binary values (image/png, image/jpeg, application/pdf) are base64 text, as in Jupyter.

A cell runs in this interpreter, so it can reach this script's memory, the run's nonce
included: it could announce its own end early and become the holder while it still runs.
That only takes the cell out of its own cgroup's reach, into the sandbox's, whose limits and
end still hold; it is the cell's own context it disturbs.

Started with "javascript", it drives one node process instead (NODE_KERNEL below, run with
`node -e`), which holds the context: cells go to it on a pipe, its events and output come
back on three, and the worker relays them. Node cannot fork, so what makes a Python context
kill-safe does not hold: when a cell does not end (killed, or its worker dead) the holder
kills node and starts a fresh one, and the daemon says the context was reset.

With IPython (Debian's python3-ipython) a cell has IPython's semantics: the last expression's
value, display(), %magics, !shell, tracebacks as IPython formats them, rich results through
its formatters (matplotlib figures as PNG through matplotlib-inline, DataFrames as HTML).
Without it, plain Python: the last expression's repr, tracebacks as Python prints them.
"""
import array
import ast
import base64
import builtins
import ctypes
import errno
import json
import linecache
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback

# base/wire.h, WireHdr: type, seq, status, cwd_len, env_len, cmd_len, flags, nonce (native
# alignment: 4 bytes of padding before the nonce, 40 in all).
HDR = struct.Struct("@IIiIIIIQ")
WIRE_HELLO, WIRE_RUN, WIRE_DONE, WIRE_DIED, WIRE_SPAWNED, WIRE_MOVED = 1, 3, 4, 5, 6, 8
WIRE_KEEP, WIRE_KEPT = 12, 13
F_PERSIST_ENV, F_GETENV, F_DUMP, F_RESTORE, F_DETACH, F_EVENTS, F_KEEPS = 1, 2, 4, 8, 16, 64, 128
# <linux/pidfd.h>: PIDFD_GET_INFO with struct pidfd_info's first version (64 bytes, exit_code
# at 60), and its mask bit for the exit status of a process already reaped (Linux 6.15).
PIDFD_GET_INFO = (3 << 30) | (64 << 16) | (0xFF << 8) | 11
PIDFD_INFO_EXIT = 8
# Out of the way of fds a cell opens; close-on-exec, so no program a cell runs inherits them.
SOCK_FD, NULL_FD, EVENTS_FD = 1001, 1002, 1003
MAX_MSG = 1 << 24
MSG_CMSG_CLOEXEC = 0x40000000
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1

NODE_KERNEL = r'''
"use strict";
const fs = require("fs"), util = require("util"), vm = require("vm");
const EVENTS = 3, CELLS = 4;
let count = 0, pending = "";
// import() in a cell: what this process's own import() finds (from its cwd).
const opts = { filename: "cell", importModuleDynamically: (spec) => import(spec) };
const emit = (e) => fs.writeSync(EVENTS, JSON.stringify(e) + "\n");
// Top-level await, import and declarations that outlive the cell: an async body runs as a
// function, so its declarations become assignments to globals (sloppy mode) and imports
// become dynamic ones.
function asyncBody(code) {
  const lines = code.split("\n").map((l) => {
    let m = l.match(/^import\s+\*\s+as\s+([\w$]+)\s+from\s+(['"][^'"]+['"]);?\s*$/);
    if (m) return `${m[1]} = await import(${m[2]});`;
    m = l.match(/^import\s+(\{[^}]*\})\s+from\s+(['"][^'"]+['"]);?\s*$/);
    if (m) return `(${m[1].replace(/\s+as\s+/g, ": ")} = await import(${m[2]}));`;
    m = l.match(/^import\s+([\w$]+)\s+from\s+(['"][^'"]+['"]);?\s*$/);
    if (m) return `${m[1]} = ((m) => m.default ?? m)(await import(${m[2]}));`;
    m = l.match(/^(?:const|let|var)\s+([{[].*?[}\]])\s*=\s*(.*?);?\s*$/);
    if (m) return `(${m[1]} = ${m[2]});`;
    return l.replace(/^(?:const|let|var)\s+([\w$]+)\s*=/, "$1 =");
  });
  let i = lines.length - 1;
  while (i >= 0 && !lines[i].trim()) i--;
  if (i >= 0) {
    // The last statement of the last line is the cell's value, as in the REPL.
    const last = lines[i].replace(/;\s*$/, ""), cut = last.lastIndexOf(";");
    const head = cut >= 0 ? last.slice(0, cut + 1) + " " : "", expr = last.slice(cut + 1);
    if (expr.trim() && !/^\s*(const|let|var|if|for|while|do|switch|try|function|class|return|throw|import|export|\}|\/\/)/.test(expr) &&
        !/[{,]\s*$/.test(expr))
      lines[i] = head + "return (" + expr + ");";
  }
  return "(async () => {\n" + lines.join("\n") + "\n})()";
}
async function run(cell) {
  if (!cell.code.trim() && cell.persist) {
    if (cell.cwd) process.chdir(cell.cwd);
    Object.assign(process.env, cell.env || {});
    emit({ type: "end", executionCount: null });
    return;
  }
  count++;
  const oldEnv = {}, oldCwd = process.cwd();
  for (const [k, v] of Object.entries(cell.env || {})) {
    oldEnv[k] = process.env[k];
    process.env[k] = v;
  }
  let value, ok = true;
  try {
    if (cell.cwd) process.chdir(cell.cwd);
    let script;
    const needsAsync = /^\s*import\s/m.test(cell.code) || /\bawait\b/.test(cell.code);
    if (needsAsync) {
      try { script = new vm.Script(cell.code, opts); } catch (e) { script = null; }
      if (!script) script = new vm.Script(asyncBody(cell.code), opts);
    } else {
      script = new vm.Script(cell.code, opts);
    }
    value = script.runInThisContext();
    if (value && typeof value.then === "function" && needsAsync) value = await value;
  } catch (e) {
    ok = false;
    const err = e instanceof Error ? e : new Error(String(e));
    emit({ type: "error", name: err.name || "Error", value: err.message || String(e), traceback: err.stack || String(e) });
  }
  if (ok && value !== undefined)
    emit({ type: "result", data: { "text/plain": util.inspect(value, { colors: false, depth: 4 }) } });
  if (!cell.persist) {
    for (const [k, v] of Object.entries(oldEnv)) {
      if (process.env[k] !== cell.env[k]) continue;
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    if (cell.cwd && process.cwd() === cell.cwd) process.chdir(oldCwd);
  }
  emit({ type: "end", executionCount: count });
}
let queue = Promise.resolve();
// The cells' pipe ends when no holder or worker of the context is left: so does this process.
new (require("net").Socket)({ fd: CELLS, readable: true, writable: false }).on("end", () => process.exit(0)).on("data", (chunk) => {
  pending += chunk.toString("utf8");
  let nl;
  while ((nl = pending.indexOf("\n")) >= 0) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    let cell;
    try { cell = JSON.parse(line); } catch { continue; }
    queue = queue.then(() => run(cell));
  }
});
process.on("uncaughtException", (e) => process.stderr.write(String(e && e.stack || e) + "\n"));
process.on("unhandledRejection", (e) => process.stderr.write("unhandled rejection: " + String(e && e.stack || e) + "\n"));
'''

libc = ctypes.CDLL(None, use_errno=True)
# fork(2) with the GIL held and none of Python's own steps around it (os.fork() runs the
# at-fork hooks, the import lock, threading's and logging's locks made anew in the child):
# only where no other thread runs, for the forks that keep a context or run its next cell.
# What those steps write in either process (about 300 pages in the child) is a copy-on-write
# fault each, on a guest where two processes' faults wait for each other. A cell's own
# os.register_at_fork() hooks are not run for them either: the cells of a context run as in
# one process, and no fork of sbx's is the cell's. C libraries' pthread_atfork() handlers
# still run (glibc's fork() runs them).
_raw_fork = ctypes.PyDLL(None, use_errno=True).fork
_raw_fork.restype = ctypes.c_int
_raw_fork.argtypes = []


# Looked up here, once: a ctypes function's first use in a process is a dlsym() and objects made,
# pages a keeper would write (nap()).
c_signalfd = libc.signalfd
c_poll = libc.poll


def raw_fork():
    pid = _raw_fork()
    if pid < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return pid


sock = None
events_fd = -1
shell = None  # the IPython shell, or None for plain Python
js_mode = False
node = None   # JavaScript: {"pidfd", "cells", "events", "out", "err"} of the node holding the context
plain_ns = {"__name__": "__main__", "__builtins__": builtins}
plain_count = 1


def send_hdr(kind, seq=0, status=0, nonce=0, flags=0):
    sock.send(HDR.pack(kind, seq, status, 0, 0, 0, flags, nonce))


def send_fd(kind, fd):
    sock.sendmsg([HDR.pack(kind, 0, 0, 0, 0, 0, 0, 0)],
                 [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])


def pidfd_exit_status(fd, timeout):
    """The wait status of the process of pidfd fd, which need not be a child: once its parent
    has reaped it (the pidfd then hangs up), the kernel keeps it for the pidfd
    (PIDFD_INFO_EXIT). None if that does not come within timeout seconds or this kernel
    does not say."""
    import fcntl
    import select
    poller = select.poll()
    poller.register(fd, select.POLLHUP)
    deadline = time.monotonic() + timeout
    while True:
        left = max(0.0, deadline - time.monotonic())
        try:
            if poller.poll(left * 1000):
                break
        except InterruptedError:
            continue
        if not left:
            return None
    info = bytearray(64)
    struct.pack_into("Q", info, 0, PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(fd, PIDFD_GET_INFO, info)
    except OSError:
        return None
    if not struct.unpack_from("Q", info, 0)[0] & PIDFD_INFO_EXIT:
        return None
    return struct.unpack_from("i", info, 60)[0]


def exit_status_told():
    """Whether this kernel tells a reaped process's wait status through a pidfd, which a
    keeper needs (hold()): it is not its worker's parent."""
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:
        os._exit(7)
    fd = -1
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        pass
    os.waitpid(pid, 0)
    if fd < 0:
        return False
    try:
        return pidfd_exit_status(fd, 1.0) == 7 << 8
    finally:
        os.close(fd)


# ---------------------------------------------------------------- events

def write_event(event):
    """Writes one event line; a cell that closed or broke the pipe loses its events, not its run."""
    global events_fd
    if events_fd < 0:
        return
    data = (json.dumps(event, ensure_ascii=False, default=str) + "\n").encode("utf-8", "backslashreplace")
    view = memoryview(data)
    try:
        while view:
            n = os.write(events_fd, view)
            view = view[n:]
    except OSError:
        events_fd = -1


def emit(event):
    """An event, after the text printed before it: events keep their order."""
    for s in streams:
        if s.name != event.get("type") and s.parts:
            text = "".join(s.parts)
            s.parts, s.size = [], 0
            write_event({"type": s.name, "text": text})
    write_event(event)


class EventStream:
    """sys.stdout / sys.stderr of a cell: text goes out as events, a line (or 8 KiB) at a time."""

    def __init__(self, name):
        self.name = name
        self.parts = []
        self.size = 0
        self.encoding = "utf-8"
        self.errors = "backslashreplace"
        self.is_closed = False

    def write(self, text):
        if self.is_closed:
            raise ValueError("I/O operation on closed file.")
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        if text:
            self.parts.append(text)
            self.size += len(text)
            if "\n" in text or self.size >= 8192:
                self.flush()
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if self.parts:
            text = "".join(self.parts)
            self.parts, self.size = [], 0
            emit({"type": self.name, "text": text})

    def isatty(self):
        return False

    def fileno(self):
        return 1 if self.name == "stdout" else 2

    def writable(self):
        return True

    def readable(self):
        return False

    def close(self):
        self.flush()
        self.is_closed = True

    @property
    def closed(self):
        return self.is_closed


streams = []


def mime_bundle(data):
    """A format dict as JSON can carry it: bytes as base64 text."""
    out = {}
    for key, value in (data or {}).items():
        if isinstance(value, (bytes, bytearray)):
            value = base64.b64encode(bytes(value)).decode("ascii")
        out[str(key)] = value
    return out


# ---------------------------------------------------------------- the interpreter

def make_shell():
    """An IPython shell whose results, displays and errors become events; None without IPython."""
    # What importing IPython brings that a context never uses: prompt_toolkit (IPython's
    # __init__ imports IPython.terminal.embed for IPython.embed(), a terminal's) and jedi (the
    # completer's). 11 of the holder's 35 MiB, which every cell's fork copies the page tables
    # of. Kept out while the shell is made only: a cell that imports either gets it.
    import types
    embed = types.ModuleType("IPython.terminal.embed")

    def no_embed(*args, **kwargs):
        raise RuntimeError("IPython.embed() needs a terminal; an sbx code context has none")
    embed.embed = no_embed
    kept_out = {"jedi": None, "IPython.terminal.embed": embed}
    for name, module in kept_out.items():
        sys.modules.setdefault(name, module)
    try:
        return make_ipython_shell()
    finally:
        for name, module in kept_out.items():
            if sys.modules.get(name, False) is module:
                del sys.modules[name]


def make_ipython_shell():
    # Figures shown inline, as PNG: matplotlib reads this when a cell first imports it (found,
    # not imported: importing it would import matplotlib into every context).
    try:
        import importlib.util
        if importlib.util.find_spec("matplotlib_inline") is not None:
            os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    except Exception:
        pass
    try:
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets import Type
        from traitlets.config import Config
    except Exception:
        return None

    class Hook(DisplayHook):
        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            emit({"type": "result", "data": mime_bundle(format_dict), "metadata": md_dict or {}})

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            emit({"type": "display", "data": mime_bundle(data), "metadata": metadata or {}})

        def clear_output(self, wait=False):
            pass

    class Shell(InteractiveShell):
        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)

        def _showtraceback(self, etype, evalue, stb):
            emit({"type": "error", "name": getattr(etype, "__name__", str(etype)), "value": str(evalue),
                  "traceback": "\n".join(stb)})

        def enable_gui(self, gui=None):
            pass

    cfg = Config()
    cfg.HistoryManager.enabled = False  # its thread would not survive a fork
    cfg.InteractiveShell.colors = "NoColor"
    cfg.InteractiveShell.autoindent = False
    cfg.InteractiveShell.xmode = "Context"
    os.environ.setdefault("IPYTHONDIR", os.path.join(os.environ.get("HOME") or "/tmp", ".ipython"))
    try:
        sh = Shell.instance(config=cfg)
    except Exception:
        return None
    # What run_cell installs around each cell (get_ipython in builtins, the displayhook),
    # installed for good: this process runs nothing but cells (run_plain relies on it).
    sh.builtin_trap.__enter__()
    sh.display_trap.__enter__()
    return sh


def transformers():
    """The input transformers and prefilter checkers a user could change (run_plain knows the
    default ones only)."""
    m = shell.input_transformer_manager
    return (list(m.cleanup_transforms), list(m.line_transforms), list(m.token_transformers),
            list(shell.prefilter_manager.checkers))


default_transformers = None
trait_all = None
autocalled = ()  # what IPython's prefilter calls when a line names it: macros, autocallables
ipython_types = {}  # what run_plain makes of IPython's, looked up once


# What IPython would rewrite before Python sees the cell (IPython.core.inputtransformer2 and
# the prefilter): an escape at a line's start (%magic, !shell, ?help, ,/; autocall), `= %` and
# `= !` assignments, a `?` anywhere, a prompt pasted in (>>>, ..., In [n]:), and top-level
# await (run by IPython's loop runner). Found in a string too, which only sends the cell the
# long way.
IPYTHON_SYNTAX = None


def trait(obj, name):
    """A trait's value as traitlets keeps it: a dict lookup, not TraitType.__get__."""
    try:
        return obj._trait_values[name]
    except (AttributeError, KeyError):
        return getattr(obj, name)


def set_trait(obj, name, value):
    """Sets a trait nobody observes without traitlets' validation and notification, which
    touch pages of their own; one that is observed (a cell may add an observer) goes through
    traitlets."""
    try:
        notifiers = obj._trait_notifiers
        if not any(notifiers.get(name, {}).values()) and not any(notifiers.get(trait_all, {}).values()):
            obj._trait_values[name] = value
            return
    except (AttributeError, TypeError):
        pass
    setattr(obj, name, value)


def plain_cell(code):
    """The cell as IPython's transform_cell would leave it, when that is sure to be the cell
    itself plus a final newline; None when IPython must transform it."""
    global IPYTHON_SYNTAX
    if IPYTHON_SYNTAX is None:
        import re
        IPYTHON_SYNTAX = re.compile(r"(?m)^[ \t]*(?:[%!?,;/]|>>>|\.\.\.|In \[)|=[ \t]*[%!]|\?|\b(?:await|async)\b|-\*-")
    # Leading blank lines and a common indent are removed by IPython (the line numbers move).
    if code[:1] in (" ", "\t", "\n", "\r") or IPYTHON_SYNTAX.search(code):
        return None
    sh = shell
    if (trait(sh, "ast_transformers") or trait(sh, "autocall") or sh.input_transformers_post
            or sh.custom_exceptions or sh.trio_runner or sh.prefilter_manager._transformers
            or trait(sh, "ast_node_interactivity") != "last_expr"
            or transformers() != default_transformers):
        return None
    if "\n" not in code.rstrip("\n"):
        # One line: IPython's prefilter may make it a magic (automagic `ls`, `pwd`, `pip`) or
        # call a macro; a line that starts with the name of neither is left as it is.
        head = code.lstrip().split(None, 1)[0] if code.strip() else ""
        name = ""
        for ch in head:
            if not (ch.isalnum() or ch == "_"):
                break
            name += ch
        magics = sh.magics_manager.magics
        if not name or name in magics["line"] or name in magics["cell"]:
            return None
        obj = sh.user_ns.get(name)
        if obj is not None and isinstance(obj, autocalled):
            return None
    return code if code.endswith("\n") else code + "\n"


def run_plain(raw, cell):
    """IPython's run_cell for a cell it would not transform, without the steps that cannot
    change it: the transformers, the check for top-level await, a compile per statement,
    traitlets' checks on the shell's own bookkeeping. Each step IPython takes touches pages of
    the interpreter, and in the fork a cell runs in, every page touched first is a
    copy-on-write fault (about 400 for run_cell, a few microseconds each here). What a cell
    sees is IPython's: In, Out, _, _i, the execution count, the displayhook and its `;`,
    tracebacks with the cell's lines, the events its callbacks hear (matplotlib's figures
    shown after the cell). None when the cell does not compile: IPython shows that its way."""
    sh = shell
    count = trait(sh, "execution_count")
    # Compiled before anything is changed: code that parses but does not compile (a top-level
    # return, a misplaced __future__ import, nesting past the recursion limit) goes the long
    # way, and IPython says what is wrong its way. The name is the one compile.cache gives.
    name = code_name(cell, count)
    try:
        tree = sh.compile.ast_parse(cell, filename="<cell>")
        body = tree.body
        parts = []
        if body and isinstance(body[-1], ast.Expr):
            if len(body) > 1:
                parts.append(ast.Module(body[:-1], tree.type_ignores))
            parts.append(ast.Interactive(body[-1:]))
        elif body:
            parts.append(tree)
        flags = sh.compile.flags
        try:
            codes = [sh.compile(mod, name, "single" if isinstance(mod, ast.Interactive) else "exec")
                     for mod in parts]
        except Exception:
            sh.compile.flags = flags  # a __future__ import of a part compiled before
            raise
    except Exception:
        return None
    events = sh.events.callbacks
    if events["pre_execute"] == [sh._clear_warning_registry]:
        sh.user_global_ns.pop("__warningregistry__", None)
    else:
        sh.events.trigger("pre_execute")
    info = ipython_types["ExecutionInfo"](raw, True, False, True, None)
    if events["pre_run_cell"]:
        sh.events.trigger("pre_run_cell", info)
    store_inputs(sh.history_manager, count, cell, raw)
    if sh.logger.log_active:
        sh.logger.log(cell, raw)
    # compile.cache, with the name computed above.
    sh.compile._filename_map[name] = count
    entry = (len(cell), time.time(), [line + "\n" for line in cell.splitlines()], name)
    linecache.cache[name] = entry
    linecache._ipython_cache[name] = entry
    result = ipython_types["ExecutionResult"](info)
    result.execution_count = count
    ok = True
    sh.displayhook.exec_result = result
    for code_obj in codes:
        # IPython's run_code, a coroutine that never awaits here (no top-level await): its
        # handling of the cell's errors, SystemExit included, and its frame under the cell's.
        coro = sh.run_code(code_obj, result)
        try:
            coro.send(None)
        except StopIteration as stop:
            if stop.value:
                ok = False
                break
        else:
            coro.close()
            raise RuntimeError("run_code awaited")
    sh.displayhook.exec_result = None
    set_trait(sh, "last_execution_succeeded", ok)
    if trait(sh.history_manager, "db_log_output"):
        sh.history_manager.store_output(count)
    set_trait(sh, "execution_count", count + 1)
    if events["post_execute"]:
        sh.events.trigger("post_execute")
    set_trait(sh, "last_execution_result", result)
    if events["post_run_cell"]:
        sh.events.trigger("post_run_cell", result)
    return ok, count


def code_name(cell, count):
    """The file name IPython's compile.cache gives the cell (tracebacks find its lines by it)."""
    return ipython_types["code_name"](cell, count)


def store_inputs(hm, count, cell, raw):
    """HistoryManager.store_inputs, its traits set as set_trait() does (the history database
    is off: HistoryManager.enabled)."""
    if trait(hm, "enabled") or hm._exit_re.match(raw.strip()):
        hm.store_inputs(count, cell, raw)
        return
    source, source_raw = cell.rstrip("\n"), raw.rstrip("\n")
    hm.input_hist_parsed.append(source)
    hm.input_hist_raw.append(source_raw)
    i, ii = trait(hm, "_i"), trait(hm, "_ii")
    set_trait(hm, "_iii", ii)
    set_trait(hm, "_ii", i)
    i00 = trait(hm, "_i00")
    set_trait(hm, "_i", i00)
    set_trait(hm, "_i00", source_raw)
    ns = {"_i": i00, "_ii": i, "_iii": ii, "_i%s" % count: source_raw}
    shell.user_ns.update(ns)
    shell.user_ns_hidden.update(ns)


def run_ipython_cell(code):
    count = trait(shell, "execution_count")
    cell = plain_cell(code) if PLAIN else None
    if cell is not None:
        done = run_plain(code, cell)
        if done is not None:
            return done
    result = shell.run_cell(code, store_history=True)
    return result.success, count


def run_cell(code):
    """Runs one cell; returns (ok, execution count)."""
    global plain_count
    if shell is not None:
        # IPython's display trap, entered for good at the start, sets its displayhook once:
        # a cell that replaces sys.displayhook must not do so for the cells after it, as
        # under IPython, whose trap puts its own back around each cell.
        sys.displayhook = shell.displayhook
        try:
            return run_ipython_cell(code)
        finally:
            sys.displayhook = shell.displayhook
    count = plain_count
    plain_count += 1
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), plain_ns)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), plain_ns)
            if value is not None:
                plain_ns["_"] = value
                emit({"type": "result", "data": {"text/plain": repr(value)}, "metadata": {}})
        return True, count
    except BaseException as e:  # a cell's SystemExit and KeyboardInterrupt end the cell only
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        emit({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": "".join(tb)})
        return False, count


# ---------------------------------------------------------------- JavaScript: node holds the context

def start_node():
    """A fresh node running NODE_KERNEL: cells on its fd 4, events from its fd 3, its stdout and
    stderr from fds 1 and 2. It starts with this process's cwd and env (the context's)."""
    global node
    cells_r, cells_w = os.pipe()
    events_r, events_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            # Out of the way first: a pipe's own number may be one of the targets.
            import fcntl
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (NULL_FD, out_w, err_w, events_w, cells_r)]
            for target, fd in enumerate(moved):
                os.dup2(fd, target, inheritable=True)
            os.closerange(5, 4096)
            # import() from a cell is vm's, experimental in Node 20: without its warning.
            os.execv("/usr/bin/node", ["node", "--experimental-vm-modules", "--no-warnings", "-e", NODE_KERNEL])
        finally:
            os._exit(127)
    for fd in (cells_r, events_w, out_w, err_w):
        os.close(fd)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        pidfd = -1
    node = {"pidfd": pidfd, "cells": cells_w, "events": events_r, "out": out_r, "err": err_r}


def stop_node():
    global node
    if node is None:
        return
    if node["pidfd"] >= 0:
        try:
            signal.pidfd_send_signal(node["pidfd"], signal.SIGKILL)
        except OSError:
            pass
    for fd in node.values():
        if fd >= 0:
            os.close(fd)
    node = None


def run_js(code, env, cwd, persist):
    """Sends a cell to node and relays what comes back until its end. Returns (ok, count)."""
    import codecs
    import select
    cell = {"code": code, "env": dict(e.partition("=")[::2] for e in env if "=" in e), "persist": bool(persist)}
    if cwd:
        cell["cwd"] = os.path.realpath(cwd)
    data = (json.dumps(cell) + "\n").encode("utf-8", "surrogateescape")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(node["cells"], view):]
    except OSError:
        return js_reset("node was gone before the cell")
    decoders = {"out": codecs.getincrementaldecoder("utf-8")("replace"),
                "err": codecs.getincrementaldecoder("utf-8")("replace")}
    names = {node["events"]: "events", node["out"]: "out", node["err"]: "err"}
    buf, ok, count = b"", True, None

    def relay(fd, block):
        name = names[fd]
        try:
            chunk = os.read(fd, 65536) if block else os.read(fd, 65536)
        except BlockingIOError:
            return None
        if chunk and name != "events":
            text = decoders[name].decode(chunk)
            if text:
                emit({"type": "stdout" if name == "out" else "stderr", "text": text})
        return chunk

    while True:
        ready, _, _ = select.select(list(names), [], [])
        for fd in ready:
            chunk = relay(fd, True)
            if names[fd] != "events":
                continue
            if not chunk:
                return js_reset("node exited during the cell")
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(ev, dict):
                    continue
                if ev.get("type") == "end":
                    # What node printed before its end is in the pipes: relayed first.
                    for other in (node["out"], node["err"]):
                        os.set_blocking(other, False)
                        while relay(other, False):
                            pass
                        os.set_blocking(other, True)
                    c = ev.get("executionCount")
                    return ok, c if isinstance(c, int) else None
                if ev.get("type") == "error":
                    ok = False
                emit(ev)


def js_reset(why):
    """node is gone: a fresh one takes over, and the cell says so, with what node said last."""
    said = b""
    if node is not None:
        try:
            os.set_blocking(node["err"], False)
            said = os.read(node["err"], 4096)
        except OSError:
            pass
    if said.strip():
        why += " (node said: %s)" % said.decode("utf-8", "replace").strip()[-1000:]
    stop_node()
    start_node()
    emit({"type": "error", "name": "ContextReset",
          "value": why + "; a fresh node took over: every variable of the JavaScript context is gone",
          "traceback": ""})
    return False, None


# ---------------------------------------------------------------- the worker

def warm_up():
    """While idle, what a cell's way through run_plain() touches, changing nothing: a fork's
    first cell would otherwise pay for the copy-on-write faults of every page the
    interpreter's path to a cell writes (reference counts are writes), a few milliseconds on
    the way of the answer. It stops when a cell comes: the cell's own run takes the faults
    that are left."""
    import select

    def cell_waits():
        return select.select([sock], [], [], 0)[0]

    if cell_waits():
        return
    try:
        if shell is not None:
            sh = shell
            cell = plain_cell("pass")
            if cell is not None:
                tree = sh.compile.ast_parse(cell, filename="<cell>")
                if cell_waits():
                    return
                exec(compile(tree, "<cell>", "exec"), {})
                if cell_waits():
                    return
                # The same values written back: the pages of what a cell updates.
                ns = sh.user_ns
                for key in ("_i", "_ii", "_iii", "_"):
                    if key in ns:
                        ns[key] = ns[key]
                if cell_waits():
                    return
                hm = sh.history_manager
                hm.input_hist_parsed.append("")
                hm.input_hist_parsed.pop()
                hm.input_hist_raw.append("")
                hm.input_hist_raw.pop()
                set_trait(sh, "execution_count", trait(sh, "execution_count"))
            else:
                sh.run_cell("pass", store_history=False, silent=True)
        if cell_waits():
            return
        json.dumps({"type": "end", "executionCount": 0})
    except Exception:
        pass


# Where RUN messages are read: an anonymous mapping made once, whose pages exist only where a
# message was written (recvmsg() of MAX_MSG bytes maps and unmaps that much for every cell).
run_buf = None


def recv_run():
    """One RUN message and its three fds; exits when the daemon is gone."""
    global run_buf
    if run_buf is None:
        import mmap
        run_buf = mmap.mmap(-1, MAX_MSG)
    while True:
        try:
            n, anc, flags, _ = sock.recvmsg_into([run_buf], socket.CMSG_SPACE(3 * 4), MSG_CMSG_CLOEXEC)
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)
        if not n:
            os._exit(0)
        msg = run_buf[:n]
        fds = []
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(data[: len(data) - len(data) % a.itemsize])
                fds.extend(a)
        if len(msg) >= HDR.size and len(fds) == 3 and not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            h = HDR.unpack_from(msg)
            # Addressed to another worker (one that died before reading it): not this one's.
            if h[0] == WIRE_RUN and HDR.size + h[3] + h[4] + h[5] == len(msg) and h[2] in (0, os.getpid()):
                return h, msg, fds
        for fd in fds:
            os.close(fd)


def apply_env(entries):
    """Sets NAME=VALUE entries; returns what to put back."""
    saved = []
    for entry in entries:
        name, sep, value = entry.partition("=")
        if sep and name:
            saved.append((name, value, os.environ.get(name)))
            os.environ[name] = value
    return saved


def restore_env(saved):
    """Puts variables back unless the cell itself changed them since."""
    for name, value, old in reversed(saved):
        if os.environ.get(name) == value:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def worker(held_threads, go=-1):
    """Takes a cell, runs it, reports. Returns when this process is to become the holder:
    True if it was told MOVED already. After a clean end the daemon may say KEEP instead:
    a fork of this process becomes the holder (fork_keeper()) and this one takes the next
    cell, its pages and caches warm, while the fork pays for its own first steps.
    A spare (go >= 0) first waits for its holder's go-ahead; its end means: not needed."""
    global events_fd, started_w
    # The OOM killer's first choice is this process, not the holder: the daemon says so
    # (oom_score_adj 500, and 0 once it is the holder), since nothing in the sandbox may write
    # to /proc.
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    warm_up()
    if go >= 0:
        while True:
            try:
                ahead = os.read(go, 1)
                break
            except InterruptedError:
                continue
        if not ahead:
            os._exit(0)
        os.close(go)
    while True:
        h, msg, fds = recv_run()
        # With a cell, this process must outlive its holder (it becomes the holder when the
        # cell ends); the holder learns the cell began (its spare's clock starts).
        libc.prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)
        try:
            os.write(started_w, b"1")
            os.close(started_w)
        except OSError:
            pass
        started_w = -1
        _, seq, _, cwd_len, env_len, cmd_len, flags, nonce = h
        off = HDR.size
        cwd = msg[off:off + cwd_len].decode("utf-8", "surrogateescape")
        off += cwd_len
        env = [e.decode("utf-8", "surrogateescape") for e in msg[off:off + env_len].split(b"\0") if e]
        off += env_len
        code = msg[off:off + cmd_len].decode("utf-8", "replace")
        del msg
        if flags & F_EVENTS:
            events_fd = os.dup2(fds[0], EVENTS_FD, inheritable=False)
            os.close(fds[0])
            os.dup2(NULL_FD, 0)
        else:
            os.dup2(fds[0], 0)
            os.close(fds[0])
        for i in (1, 2):
            os.dup2(fds[i], i)
            os.close(fds[i])
        status = 0
        if flags & (F_DUMP | F_RESTORE | F_GETENV | F_DETACH) or not flags & F_EVENTS:
            os.write(2, b"sbx: a Python context runs code cells only\n")
            status = 1
        else:
            out, err = EventStream("stdout"), EventStream("stderr")
            streams[:] = [out, err]
            sys.stdout, sys.stderr = out, err
            if held_threads:
                emit({"type": "warning",
                      "text": "this context held %d thread(s) started by earlier cells (%s); a cell runs in a fork "
                              "of the context, where they do not run, and they are gone from now on"
                              % (len(held_threads), ", ".join(held_threads))})
            old_cwd = os.getcwd() if cwd else None
            ok = True
            if cwd:
                try:
                    os.chdir(cwd)
                except OSError as e:
                    emit({"type": "error", "name": type(e).__name__, "value": "cwd %s: %s" % (cwd, e.strerror),
                          "traceback": ""})
                    ok = False
            saved = apply_env(env) if ok else []
            count = None
            if js_mode and ok:
                ok, count = run_js(code, env, cwd, flags & F_PERSIST_ENV)
            elif ok and code.strip():
                ok, count = run_cell(code)
            if flags & F_PERSIST_ENV:
                saved = []
            restore_env(saved)
            if old_cwd and not flags & F_PERSIST_ENV:
                try:
                    if os.getcwd() == os.path.realpath(cwd):
                        os.chdir(old_cwd)
                except OSError:
                    pass
            out.flush()
            err.flush()
            emit({"type": "end", "executionCount": count})
            status = 0 if ok else 1
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
            streams[:] = []
        keeps = keeper_ok and one_thread()
        try:
            send_hdr(WIRE_DONE, seq, status, nonce, F_KEEPS if keeps else 0)
        except OSError:
            os._exit(status)
        # The daemon's word first: the cgroup must have held this process alone at DONE,
        # which a fork made before it read DONE could spoil. MOVED: the holder, as before.
        # Waited for at once: this process sleeps while the daemon and the answer's reader
        # run, and is woken where a CPU is free, not made to wait behind them where it ran.
        word = await_word() if keeps else None
        # The run's pipes let go only now: the daemon reads what is left in them when DONE
        # comes (and keeps what is still open for the background log: a cell may have kept a
        # copy of fd 1), so their ends are not three more wake-ups of the daemon on the way of
        # the answer.
        if events_fd >= 0:
            os.close(events_fd)
        events_fd = -1
        for i in (0, 1, 2):
            os.dup2(NULL_FD, i)
        if not keeps:
            return False
        if not word:
            return True
        fork_keeper()
        held_threads = []
        warm_up()


def await_kind(kinds):
    """The next of these words of the daemon (bare headers) on the socket; the others are
    dropped. Exits when the daemon is gone."""
    while True:
        try:
            data = sock.recv(HDR.size)
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)
        if not data:
            os._exit(0)
        if len(data) == HDR.size and HDR.unpack(data)[0] in kinds:
            return HDR.unpack(data)[0]


def await_word():
    """After an end told with F_KEEPS: True for KEEP (this process stays the worker), False
    for MOVED (it becomes the holder, out of the cell's cgroup)."""
    return await_kind((WIRE_KEEP, WIRE_MOVED)) == WIRE_KEEP


class BecameKeeper(Exception):
    """Unwinds the fork that fork_keeper() made to the holder's loop: (a pidfd of the worker,
    the read and write ends of its "a cell started" pipe, when the worker's cell started or
    None)."""


POLLIN = 1


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


# What a keeper's nap() polls, made by the worker before its fork: the keeper then writes one
# page of it, not a page for each object poll() would make.
nap_fds = None
nap_sigs = None


def nap(me, started_r):
    """A keeper's first wait, right after its fork: until its worker's cell has run
    SPARE_AFTER, the daemon's word of a kill (SIGURG, blocked: waiting for hold() to take it),
    or the worker's end. Most keepers are killed in it, when the next cell ends clean; one
    that is not does hold()'s steps only then. Every page either process writes after the
    fork is a copy-on-write fault, and on this kind of guest two processes' faults wait for
    each other: the worker runs the next cell meanwhile. Returns when the cell started
    (time.monotonic()), or None."""
    sfd = c_signalfd(-1, nap_sigs, os.O_CLOEXEC | os.O_NONBLOCK)
    fds = nap_fds
    fds[0].fd, fds[1].fd, fds[2].fd = sfd, me, started_r
    began, timeout = None, -1
    # A wake-up's steps, taken once now, when the worker is idle or forking: the pages they
    # write are copied now, not when the worker's next cell starts and wakes this process.
    c_poll(fds, 3, 0)
    if fds[0].revents or fds[1].revents or fds[2].revents:
        pass
    spare_ms = max(1, int(SPARE_AFTER * 1000 + 0.999))
    time.monotonic()
    try:
        while sfd >= 0:
            n = c_poll(fds, 3, timeout)
            if n < 0:
                if ctypes.get_errno() == errno.EINTR:
                    continue
                break
            if n == 0 or fds[0].revents or fds[1].revents:
                break
            if fds[2].revents:
                os.read(started_r, 64)
                if began is None:
                    began = time.monotonic()
                    timeout = spare_ms
    finally:
        if sfd >= 0:
            os.close(sfd)
    return began


# Pidfds of the keepers this worker forked that it has not reaped yet (the daemon kills each
# once the next cell ended clean, or with the context): reaped by pidfd, never by a pid a
# cell's own child could have by then.
keepers = []


def forget_keepers():
    """In a fork: the keepers are its parent's, not its children."""
    for fd in keepers:
        close_fd(fd)
    keepers.clear()


def fork_keeper():
    """The daemon said KEEP: the state this cell left is kept by a fork, the holder from now
    on, and this process stays the worker and reads the next RUN. The fork is this process's
    child, so a cell's os.wait() for any child could see it (said in ARCHITECTURE); what it
    forks itself it reaps itself. The pipe tells the keeper when this worker's next cell
    starts (its spare's clock); the keeper's own workers and spares write it too. The keeper
    gets a pidfd of this process made before the fork: this process may have run its next
    cell and ended before the keeper runs at all, and only a pidfd made before the end is
    told how it ended."""
    global started_w, nap_fds, nap_sigs
    try:
        me = os.pidfd_open(os.getpid())
    except OSError:
        os._exit(1)
    r, w = os.pipe()
    if nap_fds is None:
        nap_fds = (PollFd * 3)()
        for f in nap_fds:
            f.events = POLLIN
        nap_sigs = (ctypes.c_uint64 * 16)()
        nap_sigs[0] = 1 << (signal.SIGURG - 1)
    # The daemon's word that it killed this worker (SIGURG, to the holder) may come before the
    # keeper has a handler for it (its after-fork steps take about a millisecond): born with
    # it blocked, the keeper gets it once its handler is in place (hold()), not never.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG})
    pid = fork(how=raw_fork)
    if pid == 0:
        raise BecameKeeper(me, r, w, nap(me, r))
    # Named to the daemon (KEPT) before this process reads anything more: the next cell's RUN
    # may be on the socket already, sent at the answer, and the daemon holds a kill of that
    # cell until it knows the keeper. Out of fds (a cell's doing), or the socket gone: without
    # a keeper the daemon took this process must not run a cell, and it goes (the holder until
    # then: the context is told lost).
    try:
        pfd = os.pidfd_open(pid)
        send_fd(WIRE_KEPT, pfd)
    except OSError:
        os._exit(1)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    os.close(me)
    os.close(r)
    started_w = w
    for fd in keepers[:]:
        try:
            if os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG) is None:
                continue
        except OSError:
            pass
        keepers.remove(fd)
        close_fd(fd)
    keepers.append(pfd)


def await_moved():
    """The new holder forks its worker only once out of the cell's cgroup (WIRE_MOVED)."""
    await_kind((WIRE_MOVED,))


def announce_worker(pid):
    try:
        pfd = os.pidfd_open(pid)
    except OSError:
        return  # the daemon then never takes a worker: the cell times out cleanly
    try:
        sock.sendmsg([HDR.pack(WIRE_SPAWNED, 0, 0, 0, 0, 0, 0, 0)],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pfd]))])
    finally:
        os.close(pfd)


def one_thread():
    """Whether this process runs one thread, counting every kind: threading's, _thread's, one
    just started that has no Python frame yet, a library's own. Only then does a worker offer
    to stay: a fork of a process where another thread runs may hold its locks, and that
    thread could speak on the socket in this process's name."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def other_threads():
    me = threading.current_thread()
    return [t.name for t in threading.enumerate() if t is not me and t.is_alive()]


def main():
    global sock, shell, js_mode, wake_r, wake_w, default_transformers, trait_all, autocalled, keeper_ok
    assert HDR.size == 40
    fd = int(sys.argv[1])
    os.dup2(fd, SOCK_FD, inheritable=False)
    os.close(fd)
    # This script's lines, for tracebacks through its frames (IPython's formats every frame of
    # a traceback, the one that caught a cell's error too): its file name, /proc/self/fd/4,
    # names the script's memfd only until it is closed, a pipe of the holder's after that,
    # which reading would block on. An entry without mtime is never checked or read again.
    try:
        with open(sys.argv[0], encoding="utf-8") as f:
            source = f.read()
        linecache.cache[sys.argv[0]] = (len(source), None, source.splitlines(True), sys.argv[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        os.close(4)  # the script's memfd
    except OSError:
        pass
    nul = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    os.dup2(nul, NULL_FD, inheritable=False)
    os.close(nul)
    sock = socket.socket(fileno=SOCK_FD)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    js_mode = sys.argv[2:3] == ["javascript"]
    keeper_ok = KEEP and not js_mode and exit_status_told()
    if js_mode:
        start_node()
    else:
        shell = make_shell()
        if shell is not None:
            import traitlets
            from IPython.core.autocall import IPyAutocall
            from IPython.core.compilerop import code_name
            from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult
            from IPython.core.macro import Macro
            trait_all = traitlets.All
            autocalled = (Macro, IPyAutocall)
            ipython_types.update(ExecutionInfo=ExecutionInfo, ExecutionResult=ExecutionResult, code_name=code_name)
            default_transformers = transformers()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    send_hdr(WIRE_HELLO)
    moved, adopted = False, None
    while True:
        try:
            hold(moved, adopted)
            moved, adopted = False, None
        except BecameHolder as e:
            # A worker (or a spare) whose cell ended: this process is the holder now, told
            # MOVED before it forks (unless it was already: e.args[0]).
            moved, adopted = not e.args[0], None
        except BecameKeeper as e:
            # The fork of a worker that stays one: the holder, of a worker that is not its child.
            moved, adopted = False, e.args
            forget_keepers()


class BecameHolder(Exception):
    """Unwinds a worker whose cell ended to the holder's loop: it is the holder now."""


# A cell that has run this long gets a spare worker (see hold()); a tunable, for the tests
# of the daemon's word (SIGURG) that must tell that spare from this one.
SPARE_AFTER = float(os.environ.pop("SBX_PYKERNEL_SPARE_AFTER", "0.01"))
# "0": every cell through IPython's own run_cell (the tests compare the two ways).
PLAIN = os.environ.pop("SBX_PYKERNEL_PLAIN", "1") != "0"
# "0": a worker whose cell ended always becomes the holder (no keeper; the tests run both).
KEEP = os.environ.pop("SBX_PYKERNEL_KEEP", "1") != "0"
# Whether a worker may offer to stay one (F_KEEPS): set in main().
keeper_ok = False
# The holder's wake-up: SIGCHLD writes to it (signal.set_wakeup_fd), so that one select()
# waits for the worker's word, its end and the spare's time at once.
wake_r = wake_w = -1
# The write end of the current holder's "a cell started" pipe: a worker writes one byte
# there once it has its cell.
started_w = -1


def spawn(held, retry=True):
    """Forks a worker, or a spare when retry is False: (pid, go), go the write end of the
    spare's go-ahead pipe (-1 for a worker); (None, -1) when a spare cannot be made now. In
    the child: the worker's life, then BecameHolder once its cell ended.

    A spare reads nothing of the session socket until its holder writes on go (the worker
    it stands in for died): a second reader would take messages meant for the worker, the
    MOVED that a worker whose cell ended waits for."""
    go_r, go_w = os.pipe() if not retry else (-1, -1)
    # Threads held (an earlier cell's): Python's own after-fork steps must tell the child they
    # are gone, or it would wait for them at its exit.
    pid = fork(retry, raw_fork if not held and one_thread() else os.fork)
    if pid is None:
        os.close(go_r)
        os.close(go_w)
        return None, -1
    if pid == 0:
        forget_keepers()
        if go_w >= 0:
            os.close(go_w)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGURG, signal.SIG_DFL)
        # Idle, a worker goes with its holder: it holds nothing the holder does not.
        # Once it has a cell it must outlive it (it becomes the holder): see worker().
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:
            os._exit(0)
        raise BecameHolder(worker(held, go_r))
    if go_r >= 0:
        os.close(go_r)
    return pid, go_w


def fork(retry=True, how=os.fork):
    """os.fork() (or how), tried again every 20 ms while it fails (most likely the pids
    limit, with a fork bomb still dying), or None at once when retry is False."""
    while True:
        try:
            return how()
        except OSError:
            if not retry:
                return None
            time.sleep(0.02)


def close_fd(fd):
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
    return -1


def reap():
    """The children that ended: {pid: wait status}. What the last cell left running are
    this process's children too: reaped here as they end."""
    ended = {}
    while True:
        try:
            pid, ws = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended[pid] = ws


def hold(moved=False, adopted=None):
    """The holder's turn: a worker forked and announced, waited for. moved: a worker whose
    cell ended, which forks once told MOVED; what comes before the fork is done while that
    word is on its way (the daemon sends it with the cell's answer), since in a process just
    forked it is page faults, not work. adopted: a keeper's (fork_keeper()): its worker is
    the process it was forked from, announced by that one, and not its child: its end is
    heard on a pidfd, its wait status from the kernel once its parent (the sandbox's pid 1)
    reaped it. A cell that runs past
    SPARE_AFTER, or is killed before that (the daemon's SIGURG), gets a spare, forked from this
    same state and announced too (the daemon contains it while the cell runs): if the cell is
    killed or its process dies, the spare
    takes the next cell at once; if it ends, the daemon kills the spare with this holder.
    node (JavaScript) holds its own state, which a spare could not restore: none there.
    Returns when the worker died with no spare to follow it."""
    import select
    global started_w
    # The holder reaps its children itself: nothing a cell did to SIGCHLD may stop that.
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    # The daemon's word that it killed the worker (SIGURG): the spare is forked at once, while
    # the worker's copy of the context is torn down, which takes as long as a fork.
    signal.signal(signal.SIGURG, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_w)
    held = other_threads()
    # A word left from the last worker (killed as it died on its own) is not about this one.
    while True:
        try:
            if not os.read(wake_r, 4096):
                break
        except (BlockingIOError, InterruptedError):
            break
    # A keeper's word that came while it started (fork_keeper()) is about its worker: let in
    # after the drain.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGURG})
    spare_go = wfd = -1
    keeper = False
    began = None
    if adopted:
        wfd, started_r, started_w, began = adopted
        w = -1  # not a child: its end is heard on wfd, never from reap()
    else:
        started_r, started_w = os.pipe()
    poller = select.poll()
    try:
        if adopted:
            # Watched for its reaping (the pidfd hangs up), after which the kernel tells how it
            # ended; its exit alone (readable) is not waited for.
            poller.register(wfd, 0)
        else:
            if moved:
                await_moved()
            w, _ = spawn(held)
            announce_worker(w)
        poller.register(started_r, select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        spare, spared, reaped, killed = None, js_mode, False, False
        while True:
            ended = reap()
            if reaped:
                # Killed by the daemon (it said so): gone at its exit, the status does not
                # count; else how it ended, once reaped.
                st = None if killed else pidfd_exit_status(wfd, 0)
                ended[w] = st if st is not None else signal.SIGKILL
                poller.unregister(wfd)
                wfd = close_fd(wfd)
                reaped = False
            if spare in ended:
                spare = None
                spare_go = close_fd(spare_go)
            if w in ended:
                if js_mode:
                    # The cell did not end: node may be running it still, or be gone. It
                    # cannot be trusted to hold the context as it was, so a fresh one does.
                    stop_node()
                    start_node()
                try:
                    send_hdr(WIRE_DIED, 0, ended[w])
                except OSError:
                    os._exit(0)
                if spare is None:
                    return
                # The spare goes ahead, and is told again: the daemon took it already, or (had
                # it refused it) takes it now.
                try:
                    os.write(spare_go, b"1")
                except OSError:
                    pass
                spare_go = close_fd(spare_go)
                w, spare, spared, began = spare, None, False, None
                announce_worker(w)
                continue
            timeout = None
            if not spared and began is not None:
                timeout = began + SPARE_AFTER - time.monotonic()
                if timeout <= 0:
                    spared = True
                    spare, spare_go = spawn(held, retry=False)
                    if spare is not None:
                        announce_worker(spare)
                    continue
            try:
                ready = dict(poller.poll(None if timeout is None else max(0, timeout) * 1000))
            except InterruptedError:
                continue
            if wfd in ready and (killed or ready[wfd] & select.POLLHUP):
                reaped = True
            if started_r in ready:
                os.read(started_r, 64)
                began = time.monotonic()
            if wake_r in ready:
                try:
                    woke = os.read(wake_r, 4096)
                except BlockingIOError:
                    woke = b""
                # The daemon killed the worker: a keeper need not wait for its reaping.
                if signal.SIGURG in woke and wfd >= 0 and not killed:
                    killed = True
                    poller.modify(wfd, select.POLLIN)
                # Only about a cell that began: one sent before the worker died on its own
                # would fork a spare for a worker with no cell, which the daemon refuses.
                if signal.SIGURG in woke and not spared and began is not None:
                    spared = True
                    spare, spare_go = spawn(held, retry=False)
                    if spare is not None:
                        announce_worker(spare)
    except BecameKeeper:
        # A keeper unwinding to its own holder's loop: the fds of this frame are the old
        # holder's, inherited, but their numbers may be the keeper's pipe's by now (a cell
        # can close fds): left open.
        keeper = True
        raise
    finally:
        # Also in a worker unwinding to become the holder (BecameHolder): the old holder's
        # pipes are not its own any more.
        if not keeper:
            for fd in (started_r, started_w, spare_go, wfd):
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            started_w = -1


if __name__ == "__main__":
    main()
