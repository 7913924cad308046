#!/usr/bin/python3
"""The floor plan of src/, checked against what the code really does.

Reads every object file of src/ that a meson build made (their sources named by
compile_commands.json), asks `nm` what each defines and what it uses, and reads the
`#include "..."` lines of every source and header. From that:

  check BUILD   fails (exit 1) on a call cycle between .c files, on a call from a folder
                into a folder it may not use (LAYERS below), on an include of such a
                folder's header, and on a folder over MAX_FOLDER_LINES; prints each as a line.
  table BUILD   prints the layer table of docs/ARCHITECTURE.md (between its markers).
  doc BUILD DOC exits 1 when DOC's table is not what `table` prints (a TAP test).
  graph BUILD   prints every file-to-file edge, for reading.
  tap BUILD DOC check and doc as two TAP cases (the unit suite's `layers` test).
  write BUILD DOC rewrites DOC's table.

A folder may use the folders it lists and what they may use. Folders not in LAYERS fail the
check, so a new folder has to say where it stands.
"""
import json
import os
import re
import subprocess
import sys

# (folder, folders it may use directly, what it owns). Lowest first.
LAYERS = [
    ("base", [], "the loop, buffers, queues, jobs, the redactor, text and fd helpers, the new mount "
     "API's calls, every limit"),
    ("cgroup", ["base"], "cgroups: the daemon's bases in v2 and v1, a sandbox's cgroups with "
     "their limits, counters, parking and removal, and the mover that puts processes in them"),
    ("bglog", ["cgroup"], "what commands leave running: the pipes their background processes "
     "write to, read into one bounded log per sandbox, and the command cgroups still holding "
     "processes, swept once empty"),
    ("sandbox", ["cgroup"], "one sandbox as the kernel sees it: the spawner and its program, "
     "clone3, pid 1, the private root, seccomp, Landlock"),
    ("bashext", ["base"], "the session loop inside bash (a loadable builtin): holder, worker, "
     "state dump and restore"),
    ("fs", ["base"], "the jailed files API, tree walks, copies and layers, the change watch, "
     "the export archive"),
    ("oci", ["base", "fs"], "OCI images: the store of layers and records, imports from layouts and "
     "archives (the job), unpacking an untrusted layer"),
    ("options", ["sandbox"], "a sandbox's options as plain functions: their checks, defaults, "
     "copies and the shells' environment; the accepted range of every limit"),
    ("session", ["options", "oci", "bglog"], "libsbx's core: the context and its pool, a sandbox's "
     "lifecycle, sessions, runs, freezing, the corpse yard"),
    ("net", ["session"], "the network rooms: exposed ports, the egress proxy with its rules, "
     "resolver and TLS interception, and the byte pump both use"),
    ("process", ["session"], "processes: started alone or adopted from a run's leftovers, "
     "their logs, stdin, terminals, waits and kills"),
    ("files", ["session", "fs"], "the files API of a sandbox (uploads, the jail's error words) "
     "and file change events"),
    ("image", ["session", "fs"], "fork, snapshots, export and import as operations, and the jobs "
     "they start"),
    ("lib", ["net", "process", "files", "image"], "libsbx assembled: the public constructor "
     "puts the rooms that hear of every sandbox into a new context"),
    ("rpc", ["base"], "newline framing with a hard line limit, JSON-RPC parsing and errors"),
    ("server", ["rpc", "lib"], "`sbx serve`'s request machinery: "
     "connections, dispatch and the param checker, pending requests, lanes, the registry, audit, "
     "expiry, the listeners and shutdown"),
    ("methods", ["server"], "the protocol's methods: each domain's rows of the method table "
     "and their handlers (sandboxes, runs, processes, files, watches, images, ports, the server)"),
    ("mcp", ["rpc"], "`sbx mcp`: an MCP server over a daemon's socket, its tools and their "
     "files"),
    ("http", ["base"], "HTTP in the daemon's loop: a listener (libmicrohttpd, external epoll, "
     "TLS with client certificates), a client (libcurl, TLS), and a request forwarded from one "
     "to the other; no routes"),
    ("e2b", ["http", "rpc"], "the E2B door: E2B's control plane and envd (Connect, /files, "
     "/health) on the HTTP listener, as a client of the daemon's own protocol"),
    ("kube", ["e2b"], "sbx on Kubernetes: the API server's client, each daemon a node (its "
     "Node and Lease, each bound pod a sandbox on the pod network), and the gateway that makes "
     "E2B's sandboxes Pods and forwards their envd calls to their nodes' doors"),
    ("console", ["http", "rpc"], "the operator console and GET /metrics on the HTTP listener: "
     "the token, the page's files, its calls and streams (server-sent events) as a client of the "
     "daemon's protocol on operator connections, the Prometheus text"),
    ("cli", ["methods", "mcp", "e2b", "kube", "console"], "the `sbx` program: one file per subcommand, the client "
     "connection they share"),
]

RANK = {name: i for i, (name, _, _) in enumerate(LAYERS)}

# A folder past this many lines (its .c and .h files) holds more than one room's worth: split it.
MAX_FOLDER_LINES = 6000


def allowed():
    """Each folder's transitive closure of usable folders (itself included)."""
    out = {}
    for name, uses, _ in LAYERS:
        s = {name}
        for u in uses:
            s |= out[u]
        out[name] = s
    return out


def src_root():
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))


def folder_of(path):
    rel = os.path.relpath(path, src_root())
    return rel.split(os.sep)[0] if not rel.startswith("..") else None


def read_objects(build):
    """{source path: [object path, ...]} for the objects of src/ in this build."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        cmds = json.load(f)
    objs = {}
    for c in cmds:
        src = os.path.normpath(os.path.join(c["directory"], c["file"]))
        out = os.path.normpath(os.path.join(c["directory"], c["output"]))
        if folder_of(src) is None or not os.path.exists(out):
            continue
        # The bash builtin's own copy of base/util.c is the same source: one node.
        objs.setdefault(src, []).append(out)
    return objs


def nm_all(flags, objs):
    """{object: {symbol}} from one nm over every object (one process, not two per object:
    under load, hundreds of them took longer than the test's time)."""
    out = {o: set() for o in objs}
    r = subprocess.run(["nm", "-A", *flags, *objs], capture_output=True, text=True, check=True)
    for ln in r.stdout.splitlines():
        if not ln.strip() or ":" not in ln:
            continue
        obj, rest = ln.split(":", 1)
        if obj in out and rest.split():
            out[obj].add(rest.split()[-1])
    return out


_graphs = {}


def call_graph(build):
    if build in _graphs:
        return _graphs[build]
    objs = read_objects(build)
    every = sorted({o for outs in objs.values() for o in outs})
    defined = nm_all(["--defined-only", "-g"], every)
    undefined = nm_all(["-u"], every)
    defs, uses = {}, {}
    for src, outs in objs.items():
        d, u = set(), set()
        for o in outs:
            d |= defined[o]
            u |= undefined[o]
        defs[src], uses[src] = d, u
    owner = {}
    for src, d in defs.items():
        for s in d:
            owner.setdefault(s, set()).add(src)
    edges = {src: {} for src in defs}
    for src, u in uses.items():
        for s in u:
            for o in owner.get(s, ()):
                if o != src:
                    edges[src].setdefault(o, set()).add(s)
    _graphs[build] = edges
    return edges


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def include_edges():
    """[(file, line number, header path)] for every quoted include that names a file of src/."""
    root = src_root()
    out = []
    for dirpath, _, names in os.walk(root):
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, n)
            with open(path, errors="replace") as f:
                text = f.read()
            for m in INCLUDE.finditer(text):
                inc = m.group(1)
                for base in (dirpath, root):
                    cand = os.path.normpath(os.path.join(base, inc))
                    if os.path.exists(cand) and folder_of(cand):
                        line = text.count("\n", 0, m.start()) + 1
                        out.append((path, line, cand))
                        break
    return out


def sccs(edges):
    """Tarjan's strongly connected components, iteratively; those with more than one node."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def rel(p):
    return os.path.relpath(p, os.path.dirname(src_root()))


def folder_lines():
    """{folder: lines of its .c and .h files}."""
    n = {}
    for dirpath, _, names in os.walk(src_root()):
        for name in names:
            if name.endswith((".c", ".h")):
                with open(os.path.join(dirpath, name), errors="replace") as f:
                    n[folder_of(dirpath + os.sep)] = n.get(folder_of(dirpath + os.sep), 0) + sum(1 for _ in f)
    return n


def check(build, out=print):
    edges = call_graph(build)
    ok = allowed()
    problems = []
    for src in sorted(edges):
        f = folder_of(src)
        if f not in RANK:
            problems.append(f"{rel(src)}: folder '{f}' is not in tools/layers.py's LAYERS")
            continue
        for dst, syms in sorted(edges[src].items()):
            g = folder_of(dst)
            if g not in ok[f]:
                problems.append(f"upward call: {rel(src)} -> {rel(dst)} ({', '.join(sorted(syms)[:4])}"
                                f"{', ...' if len(syms) > 4 else ''}): '{f}' may not use '{g}'")
    for comp in sccs(edges):
        inner = []
        for a in comp:
            for b in comp:
                if b in edges[a]:
                    inner.append(f"{rel(a)} -> {rel(b)} ({', '.join(sorted(edges[a][b])[:3])})")
        problems.append("call cycle between " + ", ".join(rel(c) for c in comp) + ":\n    " +
                        "\n    ".join(inner))
    for path, line, hdr in include_edges():
        f, g = folder_of(path), folder_of(hdr)
        if f in RANK and g not in ok[f]:
            problems.append(f"upward include: {rel(path)}:{line} includes {rel(hdr)}: '{f}' may not use '{g}'")
    for f, n in sorted(folder_lines().items()):
        if n > MAX_FOLDER_LINES:
            problems.append(f"src/{f}/ has {n} lines, over {MAX_FOLDER_LINES}: more than one room's worth, split it")
    for p in problems:
        out(p)
    n = sum(len(v) for v in edges.values())
    out(f"layers: {len(edges)} files, {n} file-to-file call edges, {len(problems)} problem(s)")
    return 1 if problems else 0


def table(build):
    edges = call_graph(build)
    files = {}
    for src in edges:
        files.setdefault(folder_of(src), []).append(os.path.basename(src))
    headers = {}
    for dirpath, _, names in os.walk(src_root()):
        for n in names:
            if n.endswith(".h"):
                headers.setdefault(folder_of(os.path.join(dirpath, n)), []).append(n)
    used = {}
    for src, dsts in edges.items():
        for dst in dsts:
            f, g = folder_of(src), folder_of(dst)
            if f != g:
                used.setdefault(f, set()).add(g)
    lines = ["| layer | may use | calls now | files | owns |", "|---|---|---|---|---|"]
    for name, uses, owns in LAYERS:
        fs = sorted(files.get(name, []))
        hs = sorted(headers.get(name, []))
        calls = ", ".join(f"`{u}`" for u in sorted(used.get(name, ()), key=lambda x: RANK.get(x, 99)))
        lines.append(f"| `{name}` | {', '.join(f'`{u}`' for u in uses) or '—'} | {calls or '—'} | "
                     f"{' '.join(f'`{n}`' for n in fs + hs)} | {owns} |")
    return "\n".join(lines) + "\n"


BEGIN = "<!-- layers: generated by tools/layers.py table; do not edit -->\n"
END = "<!-- end of layers -->\n"


def doc(build, path, n=1):
    with open(path) as f:
        text = f.read()
    want = table(build)
    i, j = text.find(BEGIN), text.find(END)
    have = text[i + len(BEGIN):j] if i >= 0 and j > i else None
    if have == want:
        print(f"ok {n} - ARCHITECTURE's layer table is what tools/layers.py reads")
    else:
        import difflib
        sys.stdout.writelines("# " + ln for ln in difflib.unified_diff(
            (have or "").splitlines(True), want.splitlines(True), "in the doc", "from the objects"))
        print(f"not ok {n} - ARCHITECTURE's layer table is stale: tools/layers.py write build docs/ARCHITECTURE.md")
    if n == 1:
        print("1..1")
    return 0


def tap(build, path):
    lines = []
    bad = check(build, lines.append)
    for ln in lines:
        print("# " + ln.replace("\n", "\n# "))
    print(("not ok" if bad else "ok") + " 1 - no call cycle between the .c files of src/, no call or include up the layers")
    doc(build, path, 2)
    print("1..2")
    return 0


def write(build, path):
    with open(path) as f:
        text = f.read()
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        sys.exit(f"{path}: no '{BEGIN.strip()}' ... '{END.strip()}' markers")
    text = text[:i + len(BEGIN)] + table(build) + text[j:]
    with open(path, "w") as f:
        f.write(text)
    return 0


def graph(build):
    edges = call_graph(build)
    for src in sorted(edges):
        for dst, syms in sorted(edges[src].items()):
            print(f"{rel(src)} -> {rel(dst)}: {' '.join(sorted(syms))}")
    return 0


def main(argv):
    if len(argv) < 3 or argv[1] not in ("check", "table", "doc", "write", "graph", "tap"):
        sys.exit(__doc__)
    cmd, build = argv[1], argv[2]
    if cmd == "table":
        sys.stdout.write(table(build))
        return 0
    if cmd in ("doc", "write", "tap"):
        if len(argv) < 4:
            sys.exit(__doc__)
        return {"doc": doc, "write": write, "tap": tap}[cmd](build, argv[3])
    return {"check": check, "graph": graph}[cmd](build)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
