"""Nothing of a sandbox is left on the host after `sbx run`: no cgroup directory, no process,
no mount; and while it runs, its mounts are invisible to the host."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import (killing, CGROUP2, SBX_BIN, SPAWNED, describe, finish, mount_set,
                      read_line, sbx_cgroup_dirs, sbx_popen, sbx_processes, sbx_related_mounts, wait_until,
                      close_stdio, serve_stdio)


def _assert_clean(pids, mounts_before):
    # `sbx run` answers first and removes its sandbox after, in a detached child (run.c,
    # free_after_exit()), within SBX_DESTROY_TIMEOUT_MS (2 s) a sandbox.
    wait_until(lambda: not sbx_cgroup_dirs(pids) and not sbx_processes(pids), timeout=10)
    assert not sbx_cgroup_dirs(pids), sbx_cgroup_dirs(pids)
    assert not sbx_processes(pids), sbx_processes(pids)
    new = mount_set() - mounts_before
    assert not sbx_related_mounts(new), sorted(new)


@pytest.mark.parametrize("cmds,opts,rc", [
    pytest.param(["echo hi"], [], 0, id="plain"),
    pytest.param(["sleep 300 &", "python3 -m http.server 8001 >/dev/null 2>&1 &", "true"], [], 0,
                 id="background-left-running"),
    pytest.param(["setsid sleep 300 & (sleep 300 &); sleep 300"], ["-t", "1"], 124, id="timed-out"),
    pytest.param(["sleep 300 &", "sleep 300"], ["-t", "1"], 124, id="background-then-timeout"),
    pytest.param(["head -c 2M /dev/zero > /tmp/f; exit 3"], ["--fs-size", "1M"], 3, id="fs-full"),
])
def test_nothing_left_after_run(sbx, cmds, opts, rc):
    mounts_before = mount_set()
    first = len(SPAWNED)
    cp = sbx(*cmds, opts=opts, timeout=30)
    assert cp.returncode == rc, describe(cp)
    _assert_clean(SPAWNED[first:], mounts_before)


def test_no_sbx_processes_by_cmdline_after_run(sbx):
    cp = sbx("sleep 300 &", "setsid sleep 300 &", "echo done")
    assert cp.stdout == b"done\n", describe(cp)
    # Processes carrying the sandbox's names, whatever cgroup they are in, and that are
    # descendants of nothing we know: none may belong to the run that just ended.
    pid = SPAWNED[-1]

    def leftovers():
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{d}/cgroup") as f:
                    cg = f.read()
            except OSError:
                continue
            if (b"sbx_session" in cmd or cmd.split(b"\0")[0] == b"sbx-init") and f"/sbx-{pid}/" in cg:
                found.append((d, cmd))
        return found

    # Removed after the answer, by a detached child of sbx run (run.c, free_after_exit()).
    wait_until(lambda: not leftovers(), timeout=10)
    assert not leftovers()


def test_while_running_host_sees_no_sandbox_mounts():
    mounts_before = mount_set()
    p = sbx_popen("echo ready; sleep 30", opts=["--fs-size", "8M"])
    with killing(p):
        assert read_line(p) == b"ready\n"
        during = mount_set()
        with open("/proc/self/mountinfo") as f:
            raw = f.read()
        p.send_signal(signal.SIGTERM)
        rc, _, _ = finish(p)
    assert rc == 125
    assert not sbx_related_mounts(during - mounts_before), sorted(during - mounts_before)
    assert "sbx-fs" not in raw and "sbx-root" not in raw
    assert " /run/sbx " not in raw and " /run/sbx/" not in raw
    _assert_clean([p.pid], mounts_before)


def test_while_running_cgroups_exist_and_are_removed_after():
    p = sbx_popen("echo ready; sleep 30")
    with killing(p):
        assert read_line(p) == b"ready\n"
        during = sbx_cgroup_dirs([p.pid])
        procs = sbx_processes([p.pid])
        p.send_signal(signal.SIGINT)
        rc, _, _ = finish(p)
    assert rc == 125
    assert os.path.join(CGROUP2, f"sbx-{p.pid}") in during
    cmds = b"\n".join(c for _, c in procs)
    assert b"sbx-init" in cmds and b"sbx_session" in cmds and b"sleep 30" in cmds
    wait_until(lambda: not sbx_cgroup_dirs([p.pid]) and not sbx_processes([p.pid]), timeout=10)
    assert not sbx_cgroup_dirs([p.pid])
    assert not sbx_processes([p.pid])


def test_many_sequential_runs_leave_nothing(sbx):
    first = len(SPAWNED)
    mounts_before = mount_set()
    for i in range(8):
        cp = sbx(f"echo {i}", "sleep 300 &")
        assert cp.returncode == 0 and cp.stdout == f"{i}\n".encode(), describe(cp)
    _assert_clean(SPAWNED[first:], mounts_before)


# ------------------------------------------------------------------ --rootfs (optional)


@pytest.fixture
def rootfs_dir():
    if not shutil.which("unshare") or not shutil.which("mount"):
        pytest.skip("needs unshare(1) and mount(1)")
    d = tempfile.mkdtemp(prefix="sbx-test-rootfs-")
    # The sandbox's root is a host uid of its own, an "other" to this tree.
    os.chmod(d, 0o755)
    try:
        os.makedirs(f"{d}/usr")
        os.makedirs(f"{d}/etc")
        for name, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"),
                             ("lib64", "usr/lib64")):
            if os.path.lexists(f"/{name}"):
                os.symlink(target, f"{d}/{name}")
        for f in ("ld.so.cache", "ld.so.conf"):
            if os.path.exists(f"/etc/{f}"):
                shutil.copy(f"/etc/{f}", f"{d}/etc/{f}")
        if os.path.isdir("/etc/ld.so.conf.d"):
            shutil.copytree("/etc/ld.so.conf.d", f"{d}/etc/ld.so.conf.d")
        with open(f"{d}/etc/os-release", "w") as f:
            f.write("ID=sbx-test-rootfs\n")
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _run_in_rootfs(rootfs_dir, command, network=False):
    # /usr of the tree is a bind of the host's /usr, made in a private mount namespace so the
    # host never sees it; everything else comes from the tree.
    net = "--network " if network else ""
    p = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f'mount --bind /usr "$1/usr" && exec "$2" run {net}--rootfs "$1" -- "$3"',
         "sh", rootfs_dir, SBX_BIN, command],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    SPAWNED.append(p.pid)  # unshare execs sh, which execs sbx: same pid
    o, e = p.communicate(timeout=30)
    return p.returncode, o, e


def test_rootfs_option_uses_the_given_tree(rootfs_dir):
    rc, o, e = _run_in_rootfs(rootfs_dir, "cat /etc/os-release; test -e /lib32 && echo HOST-LIB32; "
                                          "test -e /etc/bash.bashrc && echo HOST-ETC; echo ok")
    assert rc == 0, (o, e)
    assert o == b"ID=sbx-test-rootfs\nok\n", (o, e)


def test_rootfs_resolv_conf_is_the_trees_and_its_symlink_never_names_a_host_file(rootfs_dir):
    # With the host's network the rootfs's resolv.conf is bound in; pid 1 opens it while its
    # root is still the host's, so an absolute symlink must resolve in the tree, not the host.
    fd, secret = tempfile.mkstemp(prefix="sbx-test-host-file-")
    try:
        os.write(fd, b"HOST-ONLY\n")
        os.close(fd)
        os.chmod(secret, 0o644)
        os.symlink(secret, f"{rootfs_dir}/etc/resolv.conf")
        rc, o, e = _run_in_rootfs(rootfs_dir, "cat /etc/resolv.conf; echo end", network=True)
        assert rc == 0, (o, e)
        assert o == b"end\n", (o, e)
        os.unlink(f"{rootfs_dir}/etc/resolv.conf")
        os.makedirs(f"{rootfs_dir}/run")
        with open(f"{rootfs_dir}/run/resolv.conf", "w") as f:
            f.write("nameserver 192.0.2.53\n")
        os.symlink("/run/resolv.conf", f"{rootfs_dir}/etc/resolv.conf")
        rc, o, e = _run_in_rootfs(rootfs_dir, "cat /etc/resolv.conf; echo end", network=True)
        assert rc == 0, (o, e)
        assert o == b"nameserver 192.0.2.53\nend\n", (o, e)
    finally:
        os.unlink(secret)


def test_rootfs_out_of_the_sandboxs_reach_is_refused_with_the_reason(rootfs_dir):
    if os.geteuid() != 0:
        pytest.skip("rootless, the tree's owner is the sandbox's user")
    # As root, the sandbox's ids (its root's too) are a host block of their own: a tree that
    # only its host owner may enter cannot be the sandbox's root, and create says so.
    os.chmod(rootfs_dir, 0o700)
    rc, o, e = _run_in_rootfs(rootfs_dir, "echo ran")
    assert rc != 0 and o == b"", (rc, o, e)
    assert b"out of the sandbox's reach" in e and b"o+x" in e, e


def test_rootfs_must_be_absolute(sbx):
    cp = sbx("echo SHOULD-NOT-RUN", opts=["--rootfs", "relative/dir"])
    assert cp.returncode == 1, describe(cp)
    assert b"SHOULD-NOT-RUN" not in cp.stdout
    assert cp.stderr == (b"sbx run: cannot create sandbox: rootfs must be an absolute path to a directory with "
                         b"bin/bash; got 'relative/dir'\n"), describe(cp)


# ------------------------------------------------------------------ daemons side by side


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="unshare -p needs root")
def test_a_daemon_in_another_pid_namespace_sweeps_no_live_cgroup_base():
    # A daemon removes the cgroup bases of daemons that are gone, named by their pids. One in a
    # pid namespace of its own sees none of the host's pids: it must not take a live host
    # daemon's base (here idle, so empty and removable) for a dead one's.
    host = serve_stdio()
    other = None
    try:
        sid = host.result("sandbox.create")["sandboxId"]
        base = os.path.join(CGROUP2, f"sbx-{host.proc.pid}")
        host.result("sandbox.destroy", {"sandboxId": sid})
        assert wait_until(lambda: os.path.isdir(base) and not [e for e in os.scandir(base) if e.is_dir()],
                          timeout=20), base
        other = serve_stdio(argv=["unshare", "-pf", "--mount-proc", SBX_BIN, "serve", "--stdio"])
        osid = other.result("sandbox.create")["sandboxId"]
        assert other.result("run", {"sandboxId": osid, "command": "echo there"})["stdout"] == "there\n"
        assert os.path.isdir(base), "a live daemon's cgroup base was swept by a daemon of another pid namespace"
        # Its own base says whose pid namespace its pid (1) is of.
        ns = os.stat(f"/proc/{other.proc.pid}/ns/pid_for_children").st_ino  # unshare forked it
        assert os.path.isdir(os.path.join(CGROUP2, f"sbx-1-ns{ns}")), sorted(os.listdir(CGROUP2))
        sid = host.result("sandbox.create")["sandboxId"]
        assert host.result("run", {"sandboxId": sid, "command": "echo here"})["stdout"] == "here\n"
    finally:
        if other:
            close_stdio(other, check=False)  # unshare's status
        close_stdio(host)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="unshare -p needs root")
def test_a_run_that_is_pid_1_of_its_namespace_removes_its_sandbox_before_it_exits():
    # sbx run answers first and removes its sandbox after, in a detached child: but the exit of
    # a pid namespace's first process kills every process in it, that child too. As pid 1 it
    # removes everything itself before it exits.
    before = set(os.listdir(CGROUP2))
    # pid 1 of the new namespace says which it is, then becomes sbx (a run may end before any
    # look from outside would find the namespace).
    p = subprocess.Popen(["unshare", "-pf", "--mount-proc", "sh", "-c",
                          'stat -Lc "ns=%i" /proc/self/ns/pid >&2 && exec "$0" run -- "echo in-ns"', SBX_BIN],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    o, e = p.communicate(timeout=60)
    assert p.returncode == 0 and o == b"in-ns\n", (p.returncode, o, e)
    said = [line for line in e.decode().splitlines() if line.startswith("ns=")]
    assert len(said) == 1, e
    ns = int(said[0][3:])
    assert ns != os.stat("/proc/self/ns/pid").st_ino
    assert f"sbx-1-ns{ns}" not in before
    # Nothing to wait for: the run removed its base before its exit, and nothing else would.
    assert not os.path.exists(os.path.join(CGROUP2, f"sbx-1-ns{ns}")), sorted(set(os.listdir(CGROUP2)) - before)
