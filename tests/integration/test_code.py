"""Code contexts (context.*, code.run) through the Python SDK against the real daemon.

A Python context is a session whose shell is sbx's Python kernel: each cell runs in a process
that a fork of the context stands behind (the worker forked from the holder, or, after a clean
end, the worker itself with its fork as the keeper), so a cell that is killed (timeout, cancel,
its process dying) leaves every variable as it was before the cell.
"""
import base64
import json
import os
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python"))

from sbx import Sandbox, SbxError  # noqa: E402

SBX_BIN = os.environ.get("SBX_BIN") or str(REPO / "build" / "src" / "cli" / "sbx")


def _have(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="no /usr/bin/python3"),
]
needs_ipython = pytest.mark.skipif(not os.path.exists("/usr/lib/python3/dist-packages/IPython"),
                                   reason="python3-ipython is not installed (build.sh installs it)")
needs_libs = pytest.mark.skipif(not all(os.path.exists("/usr/lib/python3/dist-packages/" + m)
                                        for m in ("numpy", "pandas", "matplotlib")),
                                reason="python3-numpy, -pandas, -matplotlib are not installed (build.sh installs them)")


@pytest.fixture(name="sb")
def sb_fixture():
    with Sandbox(binary=SBX_BIN, limits={"memoryBytes": 3 << 30}) as sb:
        yield sb


def _exit_status_told():
    """Whether this kernel keeps a reaped process's wait status for a pidfd (PIDFD_INFO_EXIT,
    Linux 6.15): only then does a worker stay the worker after a clean end (the kernel's
    exit_status_told(): its keeper is not its parent, and must learn how it ended)."""
    import fcntl
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    fd = os.pidfd_open(pid)
    os.waitpid(pid, 0)
    info = bytearray(64)
    struct.pack_into("Q", info, 0, 8)
    try:
        fcntl.ioctl(fd, (3 << 30) | (64 << 16) | (0xFF << 8) | 11, info)
    except OSError:
        return False
    finally:
        os.close(fd)
    return bool(struct.unpack_from("Q", info)[0] & 8) and struct.unpack_from("i", info, 60)[0] == 7 << 8


needs_keepers = pytest.mark.skipif(not _exit_status_told(), reason="the kernel does not keep a reaped "
                                   "process's status for a pidfd (Linux 6.15): workers never stay")


def _png_size(b64):
    data = base64.b64decode(b64)
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@needs_ipython
@needs_libs
def test_state_survives_ten_cells(sb):
    sb.run_code("import pandas as pd\nimport math\nrows = []")
    for i in range(8):
        ex = sb.run_code(f"rows.append({i} * 2)\nlen(rows)")
        assert ex.error is None, ex.error
        assert ex.text == str(i + 1)
    ex = sb.run_code("df = pd.DataFrame({'v': rows}); df")
    assert ex.error is None
    html = ex.results[0].html
    assert html and "<table" in html and "<td>14</td>" in html
    ex = sb.run_code("math.floor(df.v.sum() / 2), type(df).__name__")
    assert ex.text == "(28, 'DataFrame')"
    assert ex.execution_count == 11


@needs_libs
def test_endless_cell_killed_context_kept_with_a_gib(sb):
    ex = sb.run_code("import numpy as np\nbig = np.ones(1 << 27)\nbig.nbytes", timeout=60)
    assert ex.error is None, ex.error
    assert ex.text == str(1 << 30)
    t = time.monotonic()
    ex = sb.run_code("big[:] = 0\nwhile True: pass", timeout=0.5)
    assert time.monotonic() - t < 20
    assert ex.error is not None and ex.error.name == "TimeoutError", ex.error
    assert ex.error_class == "TIMEOUT" and ex.exit_code == 124
    assert "as it was before" in ex.error.value
    ex = sb.run_code("int(big.sum()), big.nbytes")
    assert ex.error is None, ex.error
    assert ex.text == f"({1 << 27}, {1 << 30})"


def test_killed_cell_leaves_mutations_undone(sb):
    sb.run_code("items = [1, 2, 3]\nd = {'k': 'v'}")
    ex = sb.run_code("items.append(4)\nd['k'] = 'changed'\nimport time\ntime.sleep(30)", timeout=0.5)
    assert ex.error.name == "TimeoutError"
    assert sb.run_code("items, d").text == "([1, 2, 3], {'k': 'v'})"
    # A cell that ends keeps what it did.
    sb.run_code("items.append(4)")
    assert sb.run_code("items").text == "[1, 2, 3, 4]"


@needs_libs
def test_matplotlib_chart_is_a_png(sb):
    ex = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.title('squares')\nplt.show()")
    assert ex.error is None, ex.error
    pngs = [r.png for r in ex.results if r.png]
    assert len(pngs) == 1
    w, h = _png_size(pngs[0])
    assert w > 100 and h > 100
    # A figure made and not shown comes out at the cell's end too, once.
    ex = sb.run_code("plt.figure(); plt.bar([1, 2], [3, 4]);")
    assert len([r for r in ex.results if r.png]) == 1
    assert sb.run_code("len(plt.get_fignums())").text == "0"


@needs_ipython
def test_display_gives_a_result_each(sb):
    ex = sb.run_code("display('first')\ndisplay({'a': 1})\n'last'")
    assert [r.text for r in ex.results] == ["'first'", "{'a': 1}", "'last'"]
    assert [r.is_main_result for r in ex.results] == [False, False, True]
    ex = sb.run_code("from IPython.display import HTML, Markdown\ndisplay(HTML('<b>x</b>'), Markdown('# t'))")
    assert ex.results[0].html == "<b>x</b>"
    assert ex.results[1].markdown == "# t"
    # A trailing semicolon hides the value, as in IPython.
    assert sb.run_code("1 + 1;").results == []


def test_exception_has_name_value_traceback(sb):
    sb.run_code("def inner(x):\n    return {}[x]\n")
    ex = sb.run_code("y = 5\ninner('missing')")
    assert ex.error.name == "KeyError"
    assert ex.error.value == "'missing'"
    assert "inner" in ex.error.traceback and "KeyError" in ex.error.traceback
    assert ex.exit_code == 1
    # What ran before the exception is kept, as in Jupyter.
    assert sb.run_code("y").text == "5"
    ex = sb.run_code("def broken(:\n    pass")
    assert ex.error.name == "SyntaxError"


def test_output_order_and_logs(sb):
    ex = sb.run_code("import os, sys\nprint('a')\nsys.stdout.flush()\nos.system('echo b')\n"
                     "print('c', file=sys.stderr)\n'v'")
    assert "".join(ex.logs.stdout) == "a\nb\n"
    assert "".join(ex.logs.stderr) == "c\n"
    assert ex.text == "'v'"


def test_streaming_callbacks(sb):
    seen = []
    lock = threading.Lock()

    def add(kind):
        def f(x):
            with lock:
                seen.append((kind, x if isinstance(x, str) else getattr(x, "text", None) or x.name))
        return f

    ex = sb.run_code("print('one')\ndisplay(2)\nprint('three')\n4", on_stdout=add("out"), on_result=add("res"),
                     on_error=add("err"))
    assert ex.error is None
    with lock:
        assert seen == [("out", "one\n"), ("res", "2"), ("out", "three\n"), ("res", "4")]
    seen.clear()
    sb.run_code("1/0", on_error=add("err"))
    assert seen == [("err", "ZeroDivisionError")]


def test_cancel_leaves_context_as_it_was(sb):
    sb.run_code("n = 10")
    h = sb.start_code("n += 1\nimport time\ntime.sleep(60)")
    time.sleep(0.5)
    h.cancel()
    ex = h.wait(30)
    assert ex.error.name == "CancelledError" and ex.error_class == "CANCELLED"
    assert sb.run_code("n").text == "10"


def test_abuse_leaves_context_usable(sb):
    sb.run_code("keep = 'kept'")
    ex = sb.run_code("import os\nos._exit(3)")
    assert ex.error.name == "CellDied" and ex.exit_code == 3
    ex = sb.run_code("import sys, os\nsys.stdout.close()\nos.close(1)\nos.close(2)\n'still'")
    assert ex.text == "'still'"
    ex = sb.run_code("import os\nos.write(1, bytes(range(256)) * 4)\nprint('\\udcff\\x00junk')")
    assert ex.error is None
    assert len("".join(ex.logs.stdout)) >= 1024
    ex = sb.run_code("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", timeout=2)
    assert ex.error.name in ("PidsLimit", "TimeoutError"), ex.error
    ex = sb.run_code("import sys\nsys.exit(4)")
    assert ex.error is not None and ex.error.name == "SystemExit"
    assert sb.run_code("keep").text == "'kept'"
    assert sb.commands.run("echo sandbox fine").stdout == "sandbox fine\n"


def test_memory_past_the_limit_keeps_the_context():
    with Sandbox(binary=SBX_BIN, limits={"memoryBytes": 256 << 20}) as sb:
        sb.run_code("keep = list(range(10))")
        ex = sb.run_code("hog = bytearray(1 << 30)\nhog[::4096] = b'x' * len(hog[::4096])", timeout=60)
        assert ex.error is not None
        assert ex.error.name in ("CellDied", "MemoryError"), ex.error
        assert sb.run_code("sum(keep)").text == "45"


# A cell's code that finds the context's holder: the cell's own child when the worker stayed
# after the last cell (its keeper), else the cell's parent.
FIND_HOLDER = (
    "import os\n"
    "def _holder():\n"
    "    me = str(os.getpid())\n"
    "    for p in os.listdir('/proc'):\n"
    "        try:\n"
    "            f = open('/proc/%s/stat' % p).read().rsplit(')', 1)[1].split()\n"
    "        except (OSError, IndexError):\n"
    "            continue\n"
    "        if f[1] == me and f[0] != 'Z':\n"
    "            return int(p)\n"
    "    return os.getppid()\n")


def test_holder_killed_is_a_reset(sb):
    sb.run_code("gone = 1")
    ex = sb.run_code(FIND_HOLDER + "import signal\nos.kill(_holder(), signal.SIGKILL)\nimport time\ntime.sleep(5)")
    assert ex.context_reset
    assert ex.error.name == "ContextReset"
    ex = sb.run_code("'gone' in dir()")
    assert ex.text == "False"
    assert ex.error is None


@needs_keepers
def test_a_context_lost_while_idle_says_so_at_its_next_cell(sb):
    """A context whose holder dies between cells (killed from a command of the sandbox here)
    is lost as one that dies during a cell: its next cell says so (contextReset) and runs
    with the context's own cwd and env again, never silently in a fresh interpreter."""
    ctx = sb.create_code_context(cwd="/tmp", envs={"GREETING": "hello"})
    w = sb.run_code("import os\nkept = 1\nos.getpid()", context=ctx).text
    # After a clean end the holder is the worker's child, the keeper.
    assert sb.commands.run("for p in $(ps -o pid= --ppid %s); do kill -9 $p; done" % w).exit_code == 0
    time.sleep(0.5)
    ex = sb.run_code("import os\n'kept' in dir(), os.getcwd(), os.environ.get('GREETING')", context=ctx)
    assert ex.context_reset, ex
    assert ex.text == "(False, '/tmp', 'hello')", ex
    assert ex.error is None and ex.warnings and "died after its last cell" in ex.warnings[0], ex
    ex = sb.run_code("1", context=ctx)
    assert not ex.context_reset and ex.text == "1"


def test_threads_are_said(sb):
    sb.run_code("import threading, time\nt = threading.Thread(target=time.sleep, args=(60,), name='sleeper', daemon=True)\n"
                "t.start()")
    ex = sb.run_code("t.is_alive()")
    assert ex.text == "False"
    assert ex.warnings and "sleeper" in ex.warnings[0]
    assert not sb.run_code("1").warnings


def test_contexts_create_list_restart_destroy(sb):
    ctx = sb.create_code_context(cwd="/tmp", envs={"GREETING": "hello"})
    assert ctx.language == "python" and ctx.cwd == "/tmp"
    ex = sb.run_code("import os\nv = 7\n(os.getcwd(), os.environ['GREETING'])", context=ctx)
    assert ex.text == "('/tmp', 'hello')"
    assert ex.context_id == ctx.id
    # Contexts are apart from each other and from the default one.
    assert sb.run_code("'v' in dir()").text == "False"
    assert sb.run_code("v", context=ctx).text == "7"
    ids = [c.id for c in sb.list_code_contexts()]
    assert ctx.id in ids and "default-python" in ids
    # A cell's env is for that cell only.
    assert sb.run_code("os.environ.get('X')", context=ctx, envs={"X": "1"}).text == "'1'"
    assert sb.run_code("repr(os.environ.get('X'))", context=ctx).text == "'None'"
    again = sb.restart_code_context(ctx)
    assert again.id == ctx.id
    ex = sb.run_code("import os\n('v' in dir(), os.getcwd(), os.environ['GREETING'])", context=ctx)
    assert ex.text == "(False, '/tmp', 'hello')"
    sb.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sb.list_code_contexts()]
    with pytest.raises(SbxError, match="no context"):
        sb.run_code("1", context=ctx)
    # Python contexts are not sessions: the sessions list does not show them.
    assert all(not s.startswith("default-python") for s in sb.sessions.list())


def test_bash_context(sb):
    ctx = sb.create_code_context(language="bash", cwd="/tmp", envs={"A": "b"})
    ex = sb.run_code("cd /home/user && X=5", context=ctx)
    assert ex.error is None
    ex = sb.run_code("echo $PWD $A $X", context=ctx)
    assert ex.logs.stdout == ["/home/user b 5\n"]
    ex = sb.run_code("exit 3", context=ctx)
    assert ex.error.name == "ExitError" and ex.exit_code == 3
    assert sb.run_code("echo $((2 + 2))", language="bash").logs.stdout == ["4\n"]


def test_bad_input_is_refused_clearly(sb):
    c = sb.client
    for params, word in [({"code": "1", "language": "cobol"}, "language"),
                         ({"code": "1", "contextId": "nope"}, "no context"),
                         ({"code": "1", "contextId": "default-python", "language": "python"}, "not both"),
                         ({"code": "1", "timeoutMs": 0}, "timeoutMs"),
                         ({"code": 5}, "code")]:
        with pytest.raises(SbxError, match=word):
            c.request("code.run", dict(params, sandboxId=sb.sandbox_id))
    with pytest.raises(SbxError, match="absolute"):
        sb.create_code_context(cwd="relative")
    with pytest.raises(SbxError, match="not a directory in the sandbox"):
        sb.create_code_context(cwd="/does/not/exist")
    with pytest.raises(SbxError, match="not a directory in the sandbox"):
        sb.create_code_context(cwd="/etc/passwd")
    # Refused creates leave nothing: no context listed, none counted.
    assert all(c.cwd != "/does/not/exist" for c in sb.list_code_contexts())
    # A cell over the command limit is refused; the context is fine after.
    ex = sb.run_code("x = 1\n" + "#" * (70 * 1024))
    assert ex.error_class == "LIMIT_EXCEEDED"
    assert sb.run_code("2 + 2").text == "4"


def test_fork_and_snapshot_with_a_context(sb):
    sb.run_code("z = 3")
    sb.commands.run("echo data > /tmp/f")
    child = sb.fork()
    try:
        assert child.commands.run("cat /tmp/f").stdout == "data\n"
        # Contexts are not carried: the child's default context is a fresh one.
        assert child.run_code("'z' in dir()").text == "False"
    finally:
        child.kill()
    snap = sb.snapshot()
    sb.restore(snap)
    assert sb.run_code("z").text == "3"


def test_many_cells_queue_in_order(sb):
    handles = [sb.start_code(f"acc = globals().get('acc', []) + [{i}]") for i in range(10)]
    for h in handles:
        assert h.wait(60).error is None
    assert sb.run_code("acc").text == str(list(range(10)))


needs_node = pytest.mark.skipif(not os.path.exists("/usr/bin/node"), reason="no /usr/bin/node on the host")


@needs_node
def test_javascript_context(sb):
    js = dict(language="javascript")
    ex = sb.run_code("let x = 41; const o = {a: [1, {b: 2}]}\nx + 1", **js)
    assert ex.error is None, ex.error
    assert ex.text == "42" and ex.execution_count == 1
    assert sb.run_code("o", **js).text == "{ a: [ 1, { b: 2 } ] }"
    ex = sb.run_code("const y = await Promise.resolve(5)\nconsole.log('y is', y)\ny + x", **js)
    assert ex.text == "46" and ex.logs.stdout == ["y is 5\n"]
    assert sb.run_code("y", **js).text == "5"
    ex = sb.run_code("import { join } from 'path'\nimport os from 'os'\n[join('a', 'b'), os.platform()]", **js)
    assert ex.text == "[ 'a/b', 'linux' ]", ex.error
    ex = sb.run_code("require('child_process').execSync('echo from child', {stdio: 'inherit'}); undefined", **js)
    assert ex.logs.stdout == ["from child\n"] and ex.results == []
    ex = sb.run_code("function f() { throw new RangeError('too far') }\nf()", **js)
    assert ex.error.name == "RangeError" and ex.error.value == "too far" and "at f" in ex.error.traceback
    assert sb.run_code("typeof f", **js).text == "'function'"
    assert sb.run_code("process.env.ONLY", envs={"ONLY": "this cell"}, **js).text == "'this cell'"
    assert sb.run_code("process.env.ONLY", **js).results == []


@needs_node
def test_javascript_killed_cell_resets_honestly(sb):
    js = dict(language="javascript")
    sb.run_code("var kept = 1", **js)
    ex = sb.run_code("while (true) {}", timeout=0.5, **js)
    assert ex.error.name == "ContextReset" and ex.context_reset and ex.error_class == "TIMEOUT"
    assert "Node cannot keep a context" in ex.error.value
    assert sb.run_code("typeof kept", **js).text == "'undefined'"
    sb.run_code("var again = 2", **js)
    ex = sb.run_code("process.exit(3)", **js)
    assert ex.error.name == "ContextReset" and ex.context_reset
    assert sb.run_code("typeof again", **js).text == "'undefined'"
    ctx = sb.create_code_context(language="js", cwd="/tmp", envs={"WHO": "js"})
    assert ctx.language == "javascript"
    assert sb.run_code("[process.cwd(), process.env.WHO]", context=ctx).text == "[ '/tmp', 'js' ]"
    # Its reset keeps what the context was made with.
    sb.run_code("while (true) {}", context=ctx, timeout=0.5)
    assert sb.run_code("[process.cwd(), process.env.WHO]", context=ctx).text == "[ '/tmp', 'js' ]"
    sb.remove_code_context(ctx)


def test_asyncio_run_code_and_task_cancel():
    """AsyncSandbox: the same cells awaited; cancelling the task that awaits a cell cancels it
    in the daemon, and the context is as it was before it."""
    import asyncio
    from sbx import AsyncSandbox

    async def main():
        async with await AsyncSandbox.create(binary=SBX_BIN) as sb:
            seen = []

            async def out(text):
                await asyncio.sleep(0)
                seen.append(text)

            ex = await sb.run_code("total = 10\nprint('set')\ntotal", on_stdout=out)
            assert ex.text == "10" and seen == ["set\n"]
            task = asyncio.ensure_future(sb.run_code("total += 1\nimport time\ntime.sleep(60)"))
            await asyncio.sleep(0.5)
            task.cancel()
            t0 = time.monotonic()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - t0 < 10
            assert (await sb.run_code("total")).text == "10"
            ctx = await sb.create_code_context(cwd="/tmp")
            assert (await sb.run_code("import os; os.getcwd()", context=ctx)).text == "'/tmp'"
            assert ctx.id in [c.id for c in await sb.list_code_contexts()]
            await sb.restart_code_context(ctx)
            await sb.remove_code_context(ctx)
            assert ctx.id not in [c.id for c in await sb.list_code_contexts()]

    asyncio.run(main())


def test_spares_come_and_go_without_a_trace(sb):
    """A cell that runs past 10 ms gets a spare worker (the holder's fork, contained while the
    cell runs): it takes the next cell when the cell is killed, and is killed itself when the
    cell ends. Ten of each: every ended cell counted once, every killed one not at all, and
    once idle the context is its holder and one worker, nothing left over."""
    sb.run_code("n = 0")
    for i in range(10):
        ex = sb.run_code("import time; time.sleep(0.03); n += 1")
        assert ex.error is None, (i, ex)
        ex = sb.run_code("n += 100\nwhile True: pass", timeout=0.3)
        assert ex.error.name == "TimeoutError" and not ex.context_reset, (i, ex)
    assert sb.run_code("n").text == "10"
    for _ in range(50):
        out = sb.commands.run("ps -eo args | grep -c '^python3 -I /proc/self/fd/4 3 python'").stdout
        if out == "2\n":
            break
        time.sleep(0.1)
    assert out == "2\n", sb.commands.run("ps -eo pid,ppid,stat,args").stdout


def test_what_a_cell_writes_on_the_events_pipe_is_bounded(sb):
    """The kernel's event lines come from inside the sandbox: a line of a million tiny values
    (a hundred times its bytes once parsed) is left out and counted, a forged `end` does not
    hide a kill, and the daemon answers as before."""
    ex = sb.run_code("import os\nos.write(1003, b'{\"type\":\"result\",\"data\":{\"application/json\":['"
                     " + b'{},' * 400000 + b'{}]}}\\n')\n'after'")
    assert ex.text == "'after'" and len(ex.results) == 1, ex.results[:1]
    assert ex.dropped_bytes > 1200000, ex.dropped_bytes
    ex = sb.run_code("import os, time\nos.write(1003, b'{\"type\":\"end\",\"executionCount\":7}\\n')\ntime.sleep(30)",
                     timeout=0.5)
    assert ex.error is not None and ex.error.name == "TimeoutError", ex.error
    assert sb.run_code("1 + 1").text == "2"


def test_a_timeout_at_the_end_of_a_cell_leaves_the_context_working(sb):
    """A timeout that fires after the cell ended (its DONE came) but before its worker was
    moved out of its cgroup must not wedge the session: the cell's result stands, what it left
    running is killed, the next cell runs. Timeouts around the cell's own length, many times,
    to land in that moment at least sometimes; the same for a bash session."""
    sb.run_code("import subprocess, time\nk = 0")
    for i in range(12):
        sb.run_code("subprocess.Popen(['sleep', '30']); time.sleep(0.2); k += 1", timeout=0.2 + i * 0.002)
        ex = sb.run_code("k", timeout=10)
        assert ex.error is None and ex.text is not None, (i, ex)
    for i in range(12):
        sb.commands.run("sleep 30 & sleep 0.2", timeout=0.2 + i * 0.002)
        assert sb.commands.run("echo alive", timeout=10).stdout == "alive\n", i


def test_a_forged_spawned_cannot_make_the_daemon_kill_pid_1(sb):
    """A thread a cell started lives on in the holder once that cell's worker becomes it, and
    can write on the session socket as the holder: a SPAWNED naming pid 1 (or any process
    that is not the holder's child) must be ignored, not killed or moved."""
    sb.run_code("import array, os, socket, struct, threading, time\n"
                "def forge():\n"
                "    time.sleep(0.5)\n"
                "    s = socket.socket(fileno=os.dup(1001))\n"
                "    fd = os.pidfd_open(1)\n"
                "    s.sendmsg([struct.pack('@IIiIIIIQ', 6, 0, 0, 0, 0, 0, 0, 0)],\n"
                "              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [fd]))])\n"
                "threading.Thread(target=forge, daemon=True).start()")
    time.sleep(1.5)
    assert sb.commands.run("echo sandbox alive").stdout == "sandbox alive\n"
    assert sb.run_code("2 + 2").text == "4"


@pytest.mark.parametrize("target", ["pid 1", "a bash session's process"])
def test_a_forged_kept_cannot_make_the_daemon_kill_anything(sb, target):
    """The same with KEPT (a worker's word naming its keeper), written by a thread that lives
    on in the holder: refused, and what it names is left alone, pid 1 or any other process."""
    pid = 1
    if target != "pid 1":
        pid = int(sb.commands.run("sleep 1000 >/dev/null 2>&1 & echo $!").stdout.split()[-1])
    sb.run_code("import array, os, socket, struct, threading, time\n"
                "def forge():\n"
                "    time.sleep(0.5)\n"
                "    s = socket.socket(fileno=os.dup(1001))\n"
                "    fd = os.pidfd_open(%d)\n"
                "    s.sendmsg([struct.pack('@IIiIIIIQ', 13, 0, 0, 0, 0, 0, 0, 0)],\n"
                "              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [fd]))])\n"
                "threading.Thread(target=forge, daemon=True).start()" % pid)
    time.sleep(1.5)
    assert sb.commands.run("echo sandbox alive").stdout == "sandbox alive\n"
    if pid != 1:  # pid 1's end would be the sandbox's (above); the user may not signal it
        assert sb.commands.run("kill -0 %d && echo there" % pid).stdout == "there\n"
    assert sb.run_code("2 + 2").text == "4"


def test_a_reset_context_keeps_the_cwd_and_env_it_was_made_with(sb):
    ctx = sb.create_code_context(cwd="/tmp", envs={"MADE": "with"})
    sb.run_code("v = 1", context=ctx)
    ex = sb.run_code(FIND_HOLDER + "import signal\nos.kill(_holder(), signal.SIGKILL)\nimport time\ntime.sleep(5)",
                     context=ctx)
    assert ex.context_reset, ex
    ex = sb.run_code("import os\n('v' in dir(), os.getcwd(), os.environ.get('MADE'))", context=ctx)
    assert ex.text == "(False, '/tmp', 'with')", ex


def test_a_cell_in_a_gone_sandbox_says_so_at_once(sb):
    """pid 1 killed from outside: a cell is answered at once with SandboxGone, not with a
    CellDied that says the context is as it was (nothing more runs there)."""
    assert sb.run_code("x = 41").error is None
    daemon = sb._client.pid
    inits = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except (OSError, ValueError):
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm == "sbx-init" and int(stat[stat.rindex(")") + 2:].split()[1]) == daemon:
            inits.append(int(d))
    assert len(inits) == 1, inits
    os.kill(inits[0], 9)
    time.sleep(0.5)
    t = time.monotonic()
    ex = sb.run_code("x + 1", timeout=60)
    assert time.monotonic() - t < 45  # answered, not timed out
    assert ex.error is not None and ex.error.name == "SandboxGone", ex.error
    assert "pid 1 exited" in ex.error.value


def _word(sock, timeout):
    """The next message from a kernel on `sock`: (type, flags, fds), or None if none came."""
    import array
    import select
    import socket
    hdr = struct.Struct("@IIiIIIIQ")
    if not select.select([sock], [], [], timeout)[0]:
        return None
    fds = array.array("i")
    msg, anc, _, _ = sock.recvmsg(hdr.size, socket.CMSG_SPACE(4 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    if len(msg) != hdr.size:
        return 0, 0, list(fds)
    h = hdr.unpack(msg)
    return h[0], h[6], list(fds)


def _spawned(sock, timeout):
    """The next SPAWNED from a kernel on `sock`, as its worker's pidfd; None if none came."""
    deadline = time.monotonic() + timeout
    while True:
        w = _word(sock, max(0.0, deadline - time.monotonic()))
        if w is None:
            return None
        if w[0] == 6 and w[2]:  # WIRE_SPAWNED
            for fd in w[2][1:]:
                os.close(fd)
            return w[2][0]
        for fd in w[2]:
            os.close(fd)


def _bare_kernel(cwd, **env):
    """sbx's Python kernel run bare on the host, speaking the session wire on a socketpair:
    (the process, our end)."""
    import socket
    import subprocess
    script = REPO / "src" / "sandbox" / "pykernel.py"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    p = subprocess.Popen(["/usr/bin/python3", "-I", str(script), str(theirs.fileno())],
                         pass_fds=[theirs.fileno()], cwd=cwd, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, **env))
    theirs.close()
    return p, ours


def _bare_kernel_stop(p, ours, pidfds):
    """Kills the kernel and every worker it announced (each later a holder: all of its
    processes)."""
    import signal
    p.kill()
    p.wait()
    ours.close()
    for fd in pidfds:
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        os.close(fd)


def test_a_python_holder_told_of_a_kill_forks_its_spare_at_once(tmp_path):
    """The daemon SIGURGs a Python holder when it kills its worker's cell: the holder forks the
    spare then, not SPARE_AFTER into the cell (here an hour), so that the next cell's worker is
    made while the killed one is torn down. A word while no cell runs (sent as the worker died
    on its own) forks nothing. The kernel is run bare on the host, speaking the session wire
    on a socketpair."""
    import array
    import signal
    import socket
    p, ours = _bare_kernel(tmp_path, SBX_PYKERNEL_SPARE_AFTER="3600")
    pidfds, pipes = [], []
    try:
        ours.settimeout(60)
        assert struct.unpack_from("@I", ours.recv(64))[0] == 1  # WIRE_HELLO
        worker = _spawned(ours, 60)
        assert worker is not None, "the holder announced no worker"
        pidfds.append(worker)
        os.kill(p.pid, signal.SIGURG)
        assert _spawned(ours, 0.5) is None, "a spare for a worker with no cell"
        # A cell that sleeps: WIRE_RUN, its code, the events pipe and stdout/stderr (F_EVENTS).
        code = b"import time; time.sleep(60)"
        hdr = struct.Struct("@IIiIIIIQ").pack(3, 1, 0, 0, 0, len(code), 64, 7)
        events_r, events_w = os.pipe()
        out_r, out_w = os.pipe()
        pipes += [events_r, events_w, out_r, out_w]
        ours.sendmsg([hdr + code], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                     array.array("i", [events_w, out_w, out_w]))])
        assert _spawned(ours, 1.0) is None, "a spare before an hour (SBX_PYKERNEL_SPARE_AFTER)"
        os.kill(p.pid, signal.SIGURG)
        spare = _spawned(ours, 30)
        assert spare is not None, "told of a kill, the holder forked no spare"
        pidfds.append(spare)
        os.kill(p.pid, signal.SIGURG)
        assert _spawned(ours, 0.5) is None, "a second word made a second spare"
    finally:
        _bare_kernel_stop(p, ours, pidfds)
        for fd in pipes:
            os.close(fd)


@needs_keepers
def test_a_keeper_told_of_a_kill_forks_its_spare_first(tmp_path):
    """The daemon's SIGURG reaches a keeper in its first steps or its nap (blocked since before
    its fork, waited for on a signalfd): it forks the spare at once, announced before the
    killed worker's DIED (a word not heard meant no spare, DIED first and a fresh worker after
    it). The word comes as soon as the next cell printed, right after the keeper announced
    itself. Bare kernel on a socketpair, the daemon's part played here."""
    import array
    import signal
    import socket
    p, ours = _bare_kernel(tmp_path, SBX_PYKERNEL_SPARE_AFTER="3600")
    hdr = struct.Struct("@IIiIIIIQ")
    pidfds, pipes = [], []

    def run(seq, code):
        events_r, events_w = os.pipe()
        out_r, out_w = os.pipe()
        pipes.extend([events_r, out_r])
        ours.sendmsg([hdr.pack(3, seq, 0, 0, 0, len(code), 64, 7) + code],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [events_w, out_w, out_w]))])
        os.close(events_w)
        os.close(out_w)

    try:
        ours.settimeout(60)
        assert struct.unpack_from("@I", ours.recv(64))[0] == 1  # WIRE_HELLO
        worker = _spawned(ours, 60)
        assert worker is not None
        pidfds.append(worker)
        run(1, b"x = 1")
        done = _word(ours, 60)
        assert done is not None and done[0] == 4 and done[1] & 128, done  # DONE, F_KEEPS
        ours.send(hdr.pack(12, 0, 0, 0, 0, 0, 0, 0))  # WIRE_KEEP
        kept = _word(ours, 60)
        assert kept is not None and kept[0] == 13 and len(kept[2]) == 1, kept  # WIRE_KEPT
        keeper = kept[2][0]
        pidfds.append(keeper)
        p.kill()  # the old holder, as the daemon kills it
        p.wait()
        # The word and the kill once the cell runs, as the daemon's.
        run(2, b"print('go')\nimport time; time.sleep(60)")
        import select
        assert select.select([pipes[-2]], [], [], 30)[0], "the cell never printed"
        signal.pidfd_send_signal(keeper, signal.SIGURG)
        signal.pidfd_send_signal(worker, signal.SIGKILL)
        seen = []
        while len(seen) < 2:
            w = _word(ours, 30)
            assert w is not None, ("the keeper said nothing more", seen)
            pidfds.extend(w[2])
            if w[0] in (5, 6):  # WIRE_DIED, WIRE_SPAWNED
                seen.append(w[0])
        assert seen == [6, 5], "told of the kill, the keeper forked no spare first: %r" % seen
    finally:
        _bare_kernel_stop(p, ours, pidfds)
        for fd in pipes:
            os.close(fd)


PARITY_CELLS = [
    "x = 5",
    "x",
    "x;",
    "print(_, _i, _ii, _iii, len(In), sorted(Out))",
    "a = 1\nraise ValueError('v')\nb = 2",
    "print(a, 'b' in dir())",
    "x = (",
    "def g(n):\n    return n * 2\ng(21)",
    "import inspect\nprint(inspect.getsource(g))",
    "from __future__ import annotations",
    "def h(v: not_defined_anywhere) -> None:\n    pass\nh.__annotations__",
    "raise SystemExit(3)",
    "pwd",
    "%%capture c\ny = 2\nprint('hidden')",
    "c.stdout",
    "%xmode Context",
    "y + x",
    "class C:\n    def __repr__(self):\n        return 'C()'\n    def _repr_html_(self):\n        return '<b>c</b>'\nC()",
    "display(1, 2)",
    "get_ipython().execution_count",
    "import warnings\nwarnings.warn('careful')",
    "def f():\n    return 1/0\nf()",
    "exit",
    "for i in range(2):\n    i",
    "  z = 1",
    "print(z)",
    "return 5",
    "from os import sep\nfrom __future__ import annotations",
    "%config InteractiveShell.ast_node_interactivity = 'all'",
    "1\n2",
    "%config InteractiveShell.ast_node_interactivity = 'last_expr'",
    "import sys\nsys.displayhook = lambda v: print('mine', v)\n3",
    "4",
    "seen = []\nget_ipython().events.register('post_run_cell', lambda r: seen.append(r.execution_count))",
    "seen",
    "get_ipython().last_execution_result.execution_count",
]


def _kernel_cells(tmp_path, cells, plain):
    """Runs cells one by one in sbx's Python kernel run bare on the host (the session wire on a
    socketpair, as test_a_python_holder_told_of_a_kill_forks_its_spare_at_once does), playing
    the daemon's part: RUN, the cell's events to their end, DONE, MOVED, the next SPAWNED.
    Returns each cell's events and what it wrote to stdout/stderr."""
    import array
    import select
    import socket
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    p, ours = _bare_kernel(home, SBX_PYKERNEL_SPARE_AFTER="3600", SBX_PYKERNEL_PLAIN="1" if plain else "0",
                           HOME=str(home))
    hdr = struct.Struct("@IIiIIIIQ")
    pidfds, runs = [], []
    try:
        ours.settimeout(60)
        assert struct.unpack_from("@I", ours.recv(64))[0] == 1  # WIRE_HELLO
        for seq, cell in enumerate(cells, 1):
            worker = _spawned(ours, 60)
            assert worker is not None, "no worker for cell %d" % seq
            pidfds.append(worker)
            code = cell.encode()
            events_r, events_w = os.pipe()
            out_r, out_w = os.pipe()
            ours.sendmsg([hdr.pack(3, seq, 0, 0, 0, len(code), 64, 7) + code],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [events_w, out_w, out_w]))])
            os.close(events_w)
            os.close(out_w)
            data, out = b"", b""
            deadline = time.monotonic() + 60
            # The pipes end once the worker has its word after DONE (type 4): the new holder is
            # told it was moved out (the daemon reads what is in them at DONE).
            open_fds = [events_r, out_r, ours]
            while (events_r in open_fds or out_r in open_fds) and time.monotonic() < deadline:
                for fd in select.select(open_fds, [], [], 1)[0]:
                    if fd is ours:
                        if hdr.unpack(ours.recv(hdr.size))[0] == 4:
                            open_fds.remove(ours)
                            ours.send(hdr.pack(8, 0, 0, 0, 0, 0, 0, 0))  # WIRE_MOVED
                        continue
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        open_fds.remove(fd)
                    elif fd == events_r:
                        data += chunk
                    else:
                        out += chunk
            os.close(events_r)
            os.close(out_r)
            assert open_fds == [], "cell %d did not end: %r" % (seq, cell)
            runs.append(([json.loads(line) for line in data.decode().splitlines()], out.decode()))
    finally:
        _bare_kernel_stop(p, ours, pidfds)
    return runs


@needs_ipython
def test_plain_cells_see_what_ipythons_run_cell_gives(tmp_path):
    """A cell IPython would not transform runs the short way (run_plain: no transformers, one
    compile, the shell's bookkeeping without traitlets' checks, fewer pages touched in the
    fork it runs in). What every cell gives must be what IPython's own run_cell gives, cell by
    cell, in one context: values and their `;`, In/Out/_/_i, counts, errors and their
    tracebacks, syntax errors, __future__ flags kept, magics and automagic (the long way),
    rich results, display(), warnings, SystemExit."""
    probe = "import sys\nsys._getframe(2).f_code.co_name"
    plain = _kernel_cells(tmp_path, PARITY_CELLS + [probe], True)
    ipython = _kernel_cells(tmp_path, PARITY_CELLS + [probe], False)
    for cell, a, b in zip(PARITY_CELLS, plain, ipython):
        assert a == b, "cell %r:\n  short way %r\n  run_cell  %r" % (cell, a, b)
    # The short way was taken (run_code's caller is run_plain, not IPython's run_ast_nodes).
    assert plain[-1][0][0]["data"]["text/plain"] == "'run_plain'", plain[-1]
    assert ipython[-1][0][0]["data"]["text/plain"] == "'run_ast_nodes'", ipython[-1]
    # And the cells did what they say (not two ways equally broken).
    by_cell = dict(zip(PARITY_CELLS, plain))
    assert by_cell["x"][0][0]["data"]["text/plain"] == "5"
    assert by_cell["x;"][0] == [{"type": "end", "executionCount": 3}]
    assert by_cell["a = 1\nraise ValueError('v')\nb = 2"][0][0]["name"] == "ValueError"
    assert "1 False" in json.dumps(by_cell["print(a, 'b' in dir())"][0])
    assert by_cell["x = ("][0][0]["name"] == "SyntaxError"
    assert "def g(n):" in json.dumps(by_cell["import inspect\nprint(inspect.getsource(g))"][0])
    assert "not_defined_anywhere" in json.dumps(by_cell["def h(v: not_defined_anywhere) -> None:\n    pass\nh.__annotations__"][0])
    assert by_cell["y + x"][0][0]["data"]["text/plain"] == "7"
    assert by_cell[next(c for c in PARITY_CELLS if c.startswith("class C"))][0][0]["data"] == {"text/plain": "C()", "text/html": "<b>c</b>"}
    assert [e["type"] for e in by_cell["display(1, 2)"][0]] == ["display", "display", "end"]
    tb = by_cell["def f():\n    return 1/0\nf()"][0][0]
    assert tb["name"] == "ZeroDivisionError" and "return 1/0" in tb["traceback"], tb
    assert by_cell["return 5"][0][0]["name"] == "SyntaxError"
    assert [e["type"] for e in by_cell["1\n2"][0]] == ["result", "result", "end"]
    assert by_cell["4"][0][0]["data"]["text/plain"] == "4"
    assert by_cell["seen"][0][0]["data"]["text/plain"] != "[]"


@needs_ipython
def test_the_context_holds_no_terminal_or_completer_until_a_cell_imports_one(sb):
    """IPython's import brings prompt_toolkit (for IPython.embed(), a terminal's) and jedi (its
    completer's), 11 MiB a context never uses and every cell's fork copies: kept out of the
    context, yet a cell that imports either gets the real module."""
    assert sb.run_code("import sys\n('prompt_toolkit' in sys.modules, 'jedi' in sys.modules)").text == "(False, False)"
    if os.path.exists("/usr/lib/python3/dist-packages/jedi"):
        assert sb.run_code("import jedi\njedi.Script('import os\\nos.pa').complete()[0].name").text == "'pardir'"
    if os.path.exists("/usr/lib/python3/dist-packages/prompt_toolkit"):
        assert sb.run_code("from IPython.terminal.embed import InteractiveShellEmbed\n"
                           "InteractiveShellEmbed.__module__").text == "'IPython.terminal.embed'"
    ex = sb.run_code("import IPython\nIPython.embed()")
    assert ex.error.name == "RuntimeError" and "terminal" in ex.error.value, ex
    assert sb.run_code("get_ipython().execution_count").text is not None


def test_a_cell_that_left_nothing_hands_its_cgroup_to_the_next(sb):
    """After a cell that left nothing, the daemon says MOVED with the answer, before the new
    holder's move out of the cell's cgroup, and the holder forks the next worker at once: that
    worker, alone there once the holder left, or moved into it once it emptied, runs the next
    cell in the same cgroup, with no directory made. A cell that left a process behind gives
    up its cgroup to it, and the next cell gets one of its own; the leftover is the sandbox's,
    as after any command. The same for a bash session's commands."""
    here = "print(open('/proc/self/cgroup').read().splitlines()[-1])"
    seen = [sb.run_code(here).logs.stdout[0].strip() for _ in range(5)]
    assert len(set(seen)) == 1 and seen[0].split("/")[-1].startswith("c"), seen
    sb.run_code("import subprocess\nleft = subprocess.Popen(['sleep', '30'])")
    after = sb.run_code(here).logs.stdout[0].strip()
    assert after != seen[0], (seen, after)
    ps = sb.commands.run("ps -eo args").stdout
    assert "sleep 30" in ps, ps
    again = [sb.run_code(here).logs.stdout[0].strip() for _ in range(3)]
    assert len(set(again)) == 1 and again[0] == after, (after, again)
    ps = sb.commands.run("ps -eo args").stdout
    assert "sleep 30" in ps, ps
    shell = [sb.commands.run("tail -1 /proc/self/cgroup").stdout for _ in range(4)]
    assert len(set(shell[1:])) == 1, shell
    sb.commands.run("sleep 30 &")
    assert sb.commands.run("tail -1 /proc/self/cgroup").stdout != shell[-1]


@needs_keepers
def test_a_worker_whose_cell_ended_clean_runs_the_next_cell(sb):
    """After a clean end the worker stays, and its fork, the keeper, holds the state in case
    the next cell is killed: cells share one process, so nothing a fork changes changes
    between them (random's state, which Python reseeds in every child). A killed cell still
    leaves the context as it was, the keeper's own worker taking the next cell; one that
    exits is told with its own status, which the keeper learns from the kernel (it is not its
    worker's parent); one that leaves a process behind makes its worker the holder, as
    before, and the next clean end keeps the next worker."""
    import random
    pids = {sb.run_code("import os, random\nos.getpid()").text for _ in range(4)}
    assert len(pids) == 1, pids
    sb.run_code("random.seed(7)")
    assert sb.run_code("random.random()").text == repr(random.Random(7).random())
    sb.run_code("n = [1]")
    ex = sb.run_code("n.append(2)\nwhile True:\n    pass", timeout=1)
    assert ex.error is not None and ex.error.name == "TimeoutError", ex.error
    assert sb.run_code("n").text == "[1]"
    after = sb.run_code("os.getpid()").text
    assert after not in pids
    assert sb.run_code("os.getpid()").text == after
    ex = sb.run_code("n.append(3)\nos._exit(5)")
    assert ex.error.name == "CellDied" and ex.exit_code == 5, ex
    assert sb.run_code("n").text == "[1]"
    sb.run_code("import subprocess\nleft = subprocess.Popen(['sleep', '30'])")
    here = [sb.run_code("n.append(4)\nos.getpid()").text for _ in range(3)]
    assert len(set(here)) == 1, here
    assert sb.run_code("n").text == "[1, 4, 4, 4]"
    assert "sleep 30" in sb.commands.run("ps -eo args").stdout


def _mover_of(sb):
    """The pid of the daemon's mover process (sbx-mover, a child of `sbx serve`)."""
    daemon = sb._client.pid
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                st = f.read()
        except OSError:
            continue
        comm, rest = st[st.index("(") + 1:st.rindex(")")], st[st.rindex(")") + 2:].split()
        if comm == "sbx-mover" and int(rest[1]) == daemon:
            return int(name)
    return None


@needs_keepers
@pytest.mark.parametrize("leftovers", [None, "kill"])
def test_a_cell_sent_while_its_keeper_is_moved_cannot_take_the_keeper_with_it(leftovers):
    """The next cell is sent as soon as the keeper of the state it starts from is announced,
    while the keeper's move out of the worker's cgroup is on its way. A kill of that cgroup
    meanwhile (here a timeout) must not reach the keeper: the worker dies at once and the
    rest once the keeper is out. A worker that dies on its own meanwhile is told once the
    keeper is out, so that the keeper is neither taken for the cell's leftover (listed,
    killable) nor swept with a retired cgroup (leftovers killed). A keeper lost meanwhile
    ends the killed cell all the same. The daemon's mover is stopped to hold each keeper in
    the cgroup, and let go a second later."""
    with Sandbox(binary=SBX_BIN, leftovers=leftovers) as sb:
        _keeper_kept_while_moved(sb)


@needs_keepers
def test_a_cell_whose_worker_exits_while_its_keeper_is_moved_leaves_no_leftover(monkeypatch):
    """The worker of a cell exits on its own while the previous cell's keeper is still in the
    worker's cgroup (the mover held). The keeper, told of the exit, forks the next worker
    there before its move out; the cell's end is told only once that worker is moved out too,
    so nothing of the session's is taken for the cell's leftover. The mover pauses 300 ms after
    each answer (SBX_MOVER_ANSWER_GAP_MS), between the keeper's move and the next worker's."""
    import signal
    monkeypatch.setenv("SBX_MOVER_ANSWER_GAP_MS", "300")
    with Sandbox(binary=SBX_BIN) as sb:
        mover = _mover_of(sb)
        assert mover, "no sbx-mover process under the daemon"
        assert sb.commands.run("true").exit_code == 0
        assert sb.run_code("x = 41").error is None
        time.sleep(0.7)  # the moves of that cell are through, pauses included
        os.kill(mover, signal.SIGSTOP)
        timer = threading.Timer(1.0, os.kill, (mover, signal.SIGCONT))
        timer.start()
        try:
            assert sb.run_code("x = 43").error is None  # its keeper stays in the worker's cgroup
            ex = sb.run_code("x = 0\nimport os\nos._exit(3)")
            assert ex.error is not None and ex.error.name == "CellDied" and ex.exit_code == 3, ex
        finally:
            timer.join()
            os.kill(mover, signal.SIGCONT)
        assert [p for p in sb.commands.list() if p.origin == "leftover"] == []
        assert sb.run_code("x").text == "43"


def _host_pid(nspid):
    """The host pid of the sandbox's process nspid (its python3), None if there is none."""
    mine = os.readlink("/proc/self/ns/pid")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/ns/pid" % name) == mine:
                continue
            with open("/proc/%s/status" % name) as f:
                ns = [line.split()[-1] for line in f if line.startswith("NSpid:")]
            with open("/proc/%s/comm" % name) as f:
                comm = f.read().strip()
        except OSError:
            continue
        if ns and int(ns[0]) == nspid and comm == "python3":
            return int(name)
    return None


def _keeper_kept_while_moved(sb):
    import signal
    mover = _mover_of(sb)
    assert mover, "no sbx-mover process under the daemon"

    def hold_moves():
        os.kill(mover, signal.SIGSTOP)
        timer = threading.Timer(1.5, os.kill, (mover, signal.SIGCONT))
        timer.start()
        return timer

    try:
        # The bash session that lists processes below is made now: its first worker's move
        # would otherwise wait for the mover too.
        assert sb.commands.run("true").exit_code == 0
        sb.run_code("x = 41")
        timer = hold_moves()
        assert sb.run_code("x = 42").error is None  # its keeper stays in the worker's cgroup
        began = time.monotonic()
        ex = sb.run_code("x = 0\nimport time\ntime.sleep(30)", timeout=0.5)
        assert ex.error is not None and ex.error.name == "TimeoutError", ex.error
        # Its end waited for the keeper's move (the cgroup was not empty before).
        assert time.monotonic() - began >= 1.0, time.monotonic() - began
        timer.join()
        assert sb.run_code("x").text == "42"
        timer = hold_moves()
        assert sb.run_code("x = 43").error is None
        ex = sb.run_code("x = 0\nimport os\nos._exit(3)")
        assert ex.error is not None and ex.error.name == "CellDied" and ex.exit_code == 3, ex
        timer.join()
        assert [p for p in sb.commands.list() if p.origin == "leftover"] == []
        sb.commands.kill_leftovers()
        assert sb.run_code("x").text == "43"
        assert sb.run_code("x + 1").text == "44"
        # The keeper killed from outside while a killed cell waits for it to be moved: the
        # context is lost, and the cell is answered all the same, its child process killed.
        w = int(sb.run_code("import os\nos.getpid()").text)
        timer = hold_moves()
        assert sb.run_code("x = 45").error is None
        kids = sb.commands.run("ps -o pid=,stat= --ppid %d" % w).stdout.split("\n")
        keeper = [int(k.split()[0]) for k in kids if k.strip() and k.split()[1][0] not in "TZ"]
        assert len(keeper) == 1, kids
        answer = {}
        cell = threading.Thread(target=lambda: answer.setdefault("ex", sb.run_code(
            "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(30)", timeout=0.5)))
        cell.start()
        time.sleep(0.8)  # timed out, its kill waiting for the keeper's move
        host = _host_pid(keeper[0])
        assert host, keeper
        os.kill(host, signal.SIGKILL)
        cell.join(30)
        assert not cell.is_alive(), "the killed cell was never answered"
        assert answer["ex"].context_reset, answer["ex"]
        timer.join()
        assert "sleep 300" not in sb.commands.run("ps -eo args").stdout
        assert sb.run_code("'x' in dir()").text == "False"
    finally:
        os.kill(mover, signal.SIGCONT)


@needs_keepers
def test_a_keeper_that_dies_at_once_is_a_reset_not_a_hang(sb):
    """A keeper that dies right after its fork (here a cell had the kernel's keeper exit in
    its first step), before or after its worker named it (KEPT), leaves a worker that must
    not run on without it: the context is told lost at the next cell, not left waiting for
    a keeper that never comes (every cell a timeout)."""
    sb.run_code("x = 1")
    cell = ("import sys, os\n"
            "f = sys._getframe()\n"
            "while 'nap' not in f.f_globals:\n"
            "    f = f.f_back\n"
            "f.f_globals['nap'] = lambda *args: os._exit(1)\n"
            "del f")
    assert sb.run_code(cell).error is None
    # Sent before the loss was known, the cell is lost with the context, and says so; sent
    # after, it runs in a fresh one, and says so too.
    ex = sb.run_code("'x' in dir()", timeout=10)
    assert ex.context_reset and (ex.error is None and ex.text == "False" or ex.error.name == "ContextReset"), ex
    assert sb.run_code("'x' in dir()").text == "False"
    assert sb.run_code("y = 2\ny").text == "2"


# A cell after which its worker names its keeper (KEPT) slow_kept seconds late, slow_kept being
# a variable of the context: the next cell's RUN, sent with the answer, then reaches a worker
# that has not named its keeper yet.
SLOW_KEPT = ("import sys, time\n"
             "f = sys._getframe()\n"
             "while 'send_fd' not in f.f_globals:\n"
             "    f = f.f_back\n"
             "g = f.f_globals\n"
             "def slow_send_fd(kind, fd, _send=g['send_fd'], _kept=g['WIRE_KEPT'], _ns=globals()):\n"
             "    if kind == _kept:\n"
             "        time.sleep(_ns.get('slow_kept', 0))\n"
             "    _send(kind, fd)\n"
             "g['send_fd'] = slow_send_fd\n"
             "del f, g")


@needs_keepers
@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_a_cell_killed_before_its_worker_names_its_keeper_keeps_the_context(sb, how):
    """The next cell goes to a worker told to stay as soon as the last cell's answer is out,
    before the worker has named the keeper of the state it starts from; the worker names it
    before it reads the cell. A kill of that cell meanwhile (a timeout, a cancel) waits for
    the name: killed before it, the worker would take the context with it."""
    assert sb.run_code("data = [1, 2, 3]\n" + SLOW_KEPT).error is None
    assert sb.run_code("x = 1\nslow_kept = 0.8").error is None  # its worker's KEPT is 0.8 s late
    cell = "data.append(4)\nwhile True:\n    pass"
    if how == "timeout":
        ex = sb.run_code(cell, timeout=0.2)
        assert ex.error is not None and ex.error.name == "TimeoutError", ex.error
    else:
        h = sb.start_code(cell, timeout=30)
        time.sleep(0.2)
        h.cancel()
        ex = h.wait(30)
        assert ex.error is not None and ex.error.name == "CancelledError", ex.error
    ex = sb.run_code("slow_kept = 0\ndata, x")
    assert ex.error is None and ex.text == "([1, 2, 3], 1)" and not ex.context_reset, ex


@needs_keepers
def test_a_keeper_fork_refused_at_the_process_limit_keeps_the_context_of_a_killed_cell():
    """A worker whose fork of its keeper is refused (what a shell command left running holds
    the sandbox's process limit) retries it. The next cell, sent meanwhile, is killed at its
    timeout; that kill waits for the keeper, and halfway through that wait what earlier
    commands left is killed, as for a run no worker took: the fork then goes through and the
    context is kept, not lost."""
    with Sandbox(binary=SBX_BIN, limits={"pids": 48}) as sb:
        assert sb.run_code("x = 1").error is None
        # One sleep left running per command, until a command's fork is refused: the limit's
        # share for commands is then held.
        for _ in range(60):
            cp = sb.commands.run("sleep 1000 2>/dev/null &", timeout=20)
            if cp.error_class == "PIDS_LIMIT":
                break
        assert cp.error_class == "PIDS_LIMIT", cp
        assert sb.run_code("y = 2").error is None  # its worker's keeper fork is refused
        ex = sb.run_code("z = 3", timeout=0.3)
        assert ex.error is not None and ex.error.name == "TimeoutError" and not ex.context_reset, ex
        ex = sb.run_code("x + y")
        assert ex.error is None and ex.text == "3" and not ex.context_reset, ex


@needs_keepers
def test_a_killed_cell_whose_worker_is_slow_to_name_its_keeper_is_answered_and_the_context_kept(sb):
    """A worker that takes long to name its keeper (here it sleeps 8 s first) does not hold a
    killed cell's answer past SBX_KEPT_WAIT_MS (2 s): the cell is answered as killed then, and
    the kill itself is done once the keeper is named, so the context is kept (the next cell
    waits for that)."""
    assert sb.run_code("x = 1\n" + SLOW_KEPT).error is None
    assert sb.run_code("slow_kept = 8").error is None
    began = time.monotonic()
    ex = sb.run_code("z = 3", timeout=0.2)
    assert time.monotonic() - began < 7.5, "the answer waited for the worker's KEPT"
    assert ex.error is not None and ex.error.name == "TimeoutError" and not ex.context_reset, ex
    ex = sb.run_code("slow_kept = 0\n('z' in dir(), x)", timeout=30)
    assert ex.error is None and ex.text == "(False, 1)" and not ex.context_reset, ex


def test_a_cells_at_fork_hooks_do_not_run_for_sbxs_own_forks(sb):
    """Cells run as in one process: sbx's forks (a keeper after a clean end, the next worker
    after a killed cell) run none of Python's at-fork hooks, a cell's os.register_at_fork()
    ones included, while a cell's own os.fork() still runs them."""
    sb.run_code("import os\nseen = []\n"
                "os.register_at_fork(before=lambda: seen.append('before'), "
                "after_in_parent=lambda: seen.append('parent'), "
                "after_in_child=lambda: open('/tmp/at-fork-child', 'a').write('child\\n'))")
    for _ in range(3):
        assert sb.run_code("x = 1").error is None
    ex = sb.run_code("seen.append('lost')\nwhile True:\n    pass", timeout=0.5)
    assert ex.error is not None and ex.error.name == "TimeoutError", ex.error
    assert sb.run_code("x = 2").error is None
    assert sb.run_code("seen").text == "[]"
    assert sb.commands.run("cat /tmp/at-fork-child 2>/dev/null | wc -l").stdout.strip() == "0"
    ex = sb.run_code("pid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nseen")
    assert ex.text == "['before', 'parent']", ex
    assert sb.commands.run("cat /tmp/at-fork-child").stdout == "child\n"


def test_the_oom_killer_is_pointed_at_the_cell_not_the_context(sb):
    """A cell's process is the OOM killer's first choice (oom_score_adj 500), its holder, the
    context as it was, is not (0): the daemon writes both (nothing in the sandbox may), the
    worker's when it is announced or stays, the holder's when it becomes one (a worker that
    became the holder, or the keeper of one that stayed)."""
    cell = (FIND_HOLDER +
            "open('/proc/self/oom_score_adj').read().strip(), "
            "open('/proc/%d/oom_score_adj' % _holder()).read().strip()")
    for _ in range(3):
        assert sb.run_code(cell).text == "('500', '0')"
