"""Resource limits: writable filesystem bytes and inodes, memory, processes."""
import os
import re
import signal

from conftest import (killing, wait_until, CGROUP2, _v1_mount, _v1_own_path, describe, err, finish, out, read_line,
                      sbx_popen)


def test_fs_size_limit_enospc_and_next_command_works(sbx):
    cp = sbx("head -c 8M /dev/zero > /tmp/big; echo rc=$?",
             "echo next; rm /tmp/big; head -c 1M /dev/zero > /tmp/small && echo small-ok",
             opts=["--fs-size", "4M"])
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"rc=1\nnext\nsmall-ok\n", describe(cp)
    assert "No space left on device" in err(cp)


def test_fs_size_limit_is_shared_by_tmp_and_home(sbx):
    cp = sbx("head -c 3M /dev/zero > /tmp/a && echo tmp-ok",
             "head -c 3M /dev/zero > ~/b; echo home-rc=$?",
             "df -B1 --output=size /tmp /home/user | tail -n +2 | tr -s ' ' | tr '\\n' ' '",
             opts=["--fs-size", "4M"])
    assert cp.returncode == 0, describe(cp)
    lines = out(cp).splitlines()
    assert lines[0] == "tmp-ok"
    assert lines[1] == "home-rc=1", describe(cp)
    assert "No space left on device" in err(cp)
    sizes = lines[2].split()
    assert sizes == [str(4 * 1024 * 1024)] * 2, lines[2]


def test_default_fs_size_is_256m(sbx):
    cp = sbx("df -B1 --output=size,itotal /tmp | tail -1")
    assert cp.returncode == 0, describe(cp)
    size, inodes = out(cp).split()
    assert int(size) == 256 * 1024 * 1024
    assert 10000 <= int(inodes) <= 10100


def test_file_count_limit(sbx):
    cp = sbx("n=0; for i in $(seq 200); do : > /tmp/f$i || break; n=$i; done; echo created=$n",
             "echo next; rm -f /tmp/f*; : > /tmp/again && echo again-ok",
             opts=["--files", "50"])
    assert cp.returncode == 0, describe(cp)
    lines = out(cp).splitlines()
    m = re.fullmatch(r"created=(\d+)", lines[0])
    assert m, describe(cp)
    assert 40 <= int(m.group(1)) <= 50, describe(cp)
    assert lines[1:] == ["next", "again-ok"]
    assert "No space left on device" in err(cp)


def test_file_count_limit_with_mkdir_and_home(sbx):
    cp = sbx("for i in $(seq 30); do mkdir ~/d$i 2>/dev/null || break; done; "
             "for i in $(seq 30); do : > /tmp/f$i 2>/dev/null || break; done; "
             "echo $(( $(ls ~ | wc -l) + $(ls /tmp | wc -l) ))",
             opts=["--files", "40"])
    assert cp.returncode == 0, describe(cp)
    assert 30 <= int(out(cp)) <= 40, describe(cp)


def test_memory_limit_kills_big_allocation_and_next_works(sbx):
    alloc = ("python3 -c 'b = bytearray(200 * 1024 * 1024); "
             "b[::4096] = b\"x\" * len(b[::4096]); print(\"ALLOCATED\")'")
    cp = sbx("x=kept", alloc, opts=["--memory", "64M"], timeout=60)
    assert cp.returncode != 0, describe(cp)
    assert cp.returncode in (137, 1), describe(cp)
    assert b"ALLOCATED" not in cp.stdout
    cp = sbx("x=kept", alloc + "; echo rc=$?", 'echo "next $x"', opts=["--memory", "64M"], timeout=60)
    assert cp.returncode == 0, describe(cp)
    assert b"ALLOCATED" not in cp.stdout
    assert cp.stdout.endswith(b"next kept\n"), describe(cp)


def test_memory_limit_allows_small_allocation(sbx):
    cp = sbx("python3 -c 'b = bytearray(20 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096]); "
             "print(\"ok\")'", opts=["--memory", "64M"], timeout=60)
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"ok\n"


PIDS_PROBE = """python3 -c '
import os, signal, time
kids = []
try:
    for i in range(100):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
except OSError as e:
    print("fork failed:", e.strerror)
print("forked", len(kids))
for k in kids:
    os.kill(k, signal.SIGKILL)
'"""


def test_pids_limit(sbx):
    cp = sbx(PIDS_PROBE, "echo next", opts=["--pids", "24", "-t", "20"], timeout=60)
    assert cp.returncode == 0, describe(cp)
    lines = out(cp).splitlines()
    assert lines[0] == "fork failed: Resource temporarily unavailable", describe(cp)
    m = re.fullmatch(r"forked (\d+)", lines[1])
    assert m, describe(cp)
    assert 10 <= int(m.group(1)) < 24, describe(cp)
    assert lines[2:] == ["next"]
    assert cp.elapsed < 10


def test_a_command_that_meets_the_limit_once_and_handles_it_goes_on(sbx):
    """A fork refused once at the limit is a command meeting it, not a fork bomb: one that
    handles the EAGAIN and takes several of the check's looks to wind down is not stopped
    (the check stops forks refused at two looks within 2 s)."""
    probe = PIDS_PROBE.replace('print("forked", len(kids))', 'time.sleep(0.6); print("forked", len(kids))')
    cp = sbx(probe, "echo next", opts=["--pids", "24", "-t", "20"], timeout=60)
    assert cp.returncode == 0 and "limit" not in err(cp), describe(cp)
    lines = out(cp).splitlines()
    assert lines[0] == "fork failed: Resource temporarily unavailable" and lines[1].startswith("forked "), describe(cp)
    assert lines[2:] == ["next"], describe(cp)


QUICK_QUITTER = """python3 -c "
import os, signal, sys
for i in range(100):
    try:
        if os.fork() == 0:
            signal.pause()
    except OSError:
        sys.exit(3)
"
"""


def test_a_command_that_fails_at_the_pids_limit_before_the_check_looks_is_told_so(sbx):
    """A command whose fork was refused at the limit and that failed at once (before the
    periodic check's next look: bash giving up its retries does that too) is said to have hit
    the limit, with what holds it, not left as a bare exit 3."""
    cp = sbx(QUICK_QUITTER, "echo next", opts=["--pids", "32", "--kill-leftovers", "-t", "20"], timeout=60)
    assert "process limit (32) was reached" in err(cp), describe(cp)
    assert out(cp).splitlines()[-1] == "next", describe(cp)


def _find_one(base, pattern):
    hits = [os.path.join(base, d) for d in os.listdir(base) if re.fullmatch(pattern, d)] \
        if os.path.isdir(base) else []
    return hits


def test_cgroup_layout_and_limits_while_running():
    p = sbx_popen("echo ready; sleep 30", opts=["--memory", "64M", "--pids", "77"])
    with killing(p):
        assert read_line(p) == b"ready\n"
        root = os.path.join(CGROUP2, f"sbx-{p.pid}")
        assert os.path.isdir(root), f"no {root}"
        boxes = _find_one(root, r"[0-9a-f]{32}")
        assert len(boxes) == 1, os.listdir(root)
        box = boxes[0]
        box_id = os.path.basename(box)
        subdirs = [d for d in os.listdir(box) if os.path.isdir(os.path.join(box, d))]
        assert subdirs, "no per-command cgroup"
        # Where memory and pids are v1 controllers, their limits sit under our own v1 cgroup.
        for ctrl, fname, want in (("memory", "memory.limit_in_bytes", 64 * 1024 * 1024),
                                  ("pids", "pids.max", 77)):
            v2file = {"memory": "memory.max", "pids": "pids.max"}[ctrl]
            if os.path.exists(os.path.join(box, v2file)):
                with open(os.path.join(box, v2file)) as f:
                    assert int(f.read()) == want
                continue
            mnt, own = _v1_mount(ctrl), _v1_own_path(ctrl)
            if not mnt:
                continue
            d = os.path.normpath(f"{mnt}{own}/sbx-{p.pid}/{box_id}")
            assert os.path.isdir(d), d
            with open(os.path.join(d, fname)) as f:
                assert int(f.read()) == want, (d, fname)
        p.send_signal(signal.SIGTERM)
        rc, _, _ = finish(p)
    assert rc == 125
    # Removed after the answer, by a detached child of sbx run (run.c, free_after_exit()).
    assert wait_until(lambda: not os.path.exists(root), timeout=10), f"{root} left"
