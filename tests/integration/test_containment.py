"""What a command inside the sandbox can see and do."""
import errno
import json
import os
import shlex
import socket
import subprocess
import threading

import pytest

from conftest import REPO, describe, err, host_ipv4, out


def test_cannot_read_root_home(sbx):
    cp = sbx("ls /root; echo rc=$?", "cat /root/.bashrc 2>&1; echo rc=$?",
             "test -e /root/.pyenv && echo VISIBLE; true")
    assert cp.returncode == 0, describe(cp)
    assert b"VISIBLE" not in cp.stdout
    lines = out(cp).splitlines()
    assert lines[0] == "rc=2", describe(cp)
    assert lines[-1] != "rc=0"
    assert "Permission denied" in err(cp)


def test_host_directories_are_not_visible(sbx):
    repo = str(REPO)
    cp = sbx(f"test -e {repo} && echo REPO-VISIBLE; test -e /work && echo WORK-VISIBLE; "
             "ls -A /home; ls -A /home/user | wc -l; "
             "test -e /etc/shadow && echo SHADOW-VISIBLE; "
             "test -e /.dockerenv && echo DOCKERENV-VISIBLE; "
             "test -e /opt && echo OPT-VISIBLE; test -e /mnt && echo MNT-VISIBLE; "
             "test -e /boot && echo BOOT-VISIBLE; true")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"user\n0\n", describe(cp)


def test_generated_passwd_has_no_host_users(sbx):
    cp = sbx("cut -d: -f1 /etc/passwd | sort | tr '\\n' ' '; echo; cat /etc/hostname; getent passwd 1000")
    assert cp.returncode == 0, describe(cp)
    names, hostname, user = out(cp).splitlines()
    assert set(names.split()) <= {"root", "user", "nobody"}
    assert hostname == "sandbox"
    assert user.startswith("user:x:1000:1000:")


@pytest.mark.parametrize("path", ["/usr/sbx-probe", "/etc/sbx-probe", "/bin/sbx-probe",
                                  "/lib/sbx-probe", "/sbx-probe", "/var/sbx-probe",
                                  "/proc/sys/kernel/hostname"])
def test_system_paths_are_not_writable(sbx, path):
    cp = sbx(f"echo x > {path}; echo rc=$?")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"rc=1\n", describe(cp)


def test_readonly_system_dirs_report_erofs(sbx):
    cp = sbx("touch /usr/x /etc/x /bin/x 2>&1 | sort")
    assert cp.returncode == 0, describe(cp)
    assert out(cp).count("Read-only file system") == 3, describe(cp)


def test_writable_places(sbx):
    cp = sbx("echo a > /tmp/a && echo b > ~/b && echo c > /dev/shm/c && cat /tmp/a ~/b /dev/shm/c; "
             "echo > /dev/null && echo null-ok")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"a\nb\nc\nnull-ok\n"


def test_minimal_dev(sbx):
    cp = sbx("ls /dev | sort | tr '\\n' ' '")
    assert cp.returncode == 0, describe(cp)
    entries = set(out(cp).split())
    assert {"null", "zero", "urandom"} <= entries
    # No disks, no kmsg, no mem, no host ttys.
    assert not entries & {"sda", "vda", "nvme0", "kmsg", "mem", "kvm", "tty0", "console", "vsock"}, entries


def test_network_is_loopback_only(sbx):
    cp = sbx("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"lo\n", describe(cp)


def test_cannot_reach_internet(sbx):
    cp = sbx("curl -sS -m 3 -o /dev/null http://1.1.1.1/; echo rc=$?",
             "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=3)' "
             "2>/dev/null; echo py=$?",
             timeout=30)
    assert cp.returncode == 0, describe(cp)
    lines = out(cp).splitlines()
    assert lines[0] != "rc=0" and lines[0].startswith("rc="), describe(cp)
    assert lines[1] == "py=1", describe(cp)
    assert cp.elapsed < 10


class _Listener:
    """A TCP listener on the host (all addresses) that records connections."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            try:
                c.sendall(b"hello-from-host\n")
            finally:
                c.close()

    def close(self):
        self.stop = True
        self.t.join(2)
        self.sock.close()


def _connect_cmd(ip, port):
    return (f"timeout 3 bash -c 'exec 3<>/dev/tcp/{ip}/{port} && head -c 15 <&3' 2>/dev/null; "
            "echo \" rc=$?\"")


def test_cannot_connect_to_host_ip_or_host_loopback(sbx):
    ip = host_ipv4()
    lst = _Listener()
    try:
        cmds = [_connect_cmd("127.0.0.1", lst.port)]
        if ip:
            cmds.append(_connect_cmd(ip, lst.port))
        cp = sbx(*cmds, timeout=30)
    finally:
        lst.close()
    assert cp.returncode == 0, describe(cp)
    assert b"hello-from-host" not in cp.stdout, describe(cp)
    assert lst.accepted == 0
    for line in out(cp).splitlines():
        assert line.strip() != "rc=0", describe(cp)
    assert cp.elapsed < 10


def test_network_option_shares_host_network(sbx):
    ip = host_ipv4()
    if not ip:
        pytest.skip("no non-loopback IPv4 address on this host")
    lst = _Listener()
    try:
        cp = sbx(_connect_cmd(ip, lst.port), "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '",
                 opts=["--network"], timeout=30)
    finally:
        lst.close()
    assert cp.returncode == 0, describe(cp)
    assert out(cp).startswith("hello-from-host rc=0\n"), describe(cp)
    assert lst.accepted == 1
    assert len(out(cp).splitlines()) > 2  # more interfaces than lo


def test_mount_fails(sbx):
    cp = sbx("mount -t tmpfs x /tmp; echo rc=$?",
             "python3 -c 'import ctypes,os; l=ctypes.CDLL(None,use_errno=True); "
             "r=l.mount(b\"x\",b\"/tmp\",b\"tmpfs\",0,None); print(r, os.strerror(ctypes.get_errno()))'",
             "df /tmp | tail -1 | cut -d' ' -f1")
    assert cp.returncode == 0, describe(cp)
    lines = out(cp).splitlines()
    assert lines[0] != "rc=0" and lines[0].startswith("rc="), describe(cp)
    assert lines[1] == "-1 Operation not permitted", describe(cp)
    assert lines[2] == "sbx-fs", describe(cp)


def test_unshare_user_namespace_fails(sbx):
    cp = sbx("unshare -U true; echo rc=$?", "unshare -r id -u; echo rc=$?",
             "python3 -c 'import ctypes,os; l=ctypes.CDLL(None,use_errno=True); "
             "r=l.unshare(0x10000000); print(r, os.strerror(ctypes.get_errno()))'")
    assert cp.returncode == 0, describe(cp)
    assert out(cp).splitlines() == ["rc=1", "rc=1", "-1 Operation not permitted"], describe(cp)
    assert "Operation not permitted" in err(cp)


def test_pid_namespace_shows_only_sandbox_processes(sbx):
    cp = sbx("ps ax -o pid=,args=")
    assert cp.returncode == 0, describe(cp)
    rows = [l.strip().split(None, 1) for l in out(cp).splitlines() if l.strip()]
    pids = [int(r[0]) for r in rows]
    cmds = [r[1] for r in rows]
    assert len(rows) <= 5, rows
    assert rows[0] == ["1", "sbx-init"], rows
    assert os.getpid() not in pids or os.getpid() < 10
    for c in cmds:
        assert c == "sbx-init" or "sbx_session" in c or c.startswith("ps ax"), rows
    assert max(pids) < 100, rows


def test_pid1_is_sbx_init_and_hides_daemon_argv(sbx):
    marker = "argv-marker-5b1e"
    cp = sbx(f": {marker}; cat /proc/1/cmdline; echo; cat /proc/1/comm; "
             "cat /proc/1/environ 2>/dev/null && echo ENVIRON-READABLE; "
             "cat /proc/1/maps 2>/dev/null | head -1 | grep -q . && echo MAPS-READABLE; "
             "readlink /proc/1/exe 2>/dev/null && echo EXE-READABLE; "
             "awk '/^Uid/{print $2}' /proc/1/status; true")
    assert cp.returncode == 0, describe(cp)
    cmdline, comm, uid = cp.stdout.split(b"\n")[:3]
    assert cmdline.split(b"\0")[0] == b"sbx-init", describe(cp)
    # Nothing of the daemon's own command line (which holds the CMD texts) is left.
    assert cmdline.strip(b"\0") == b"sbx-init", describe(cp)
    assert marker.encode() not in cp.stdout
    assert comm == b"sbx-init"
    assert uid == b"0"
    assert b"READABLE" not in cp.stdout, describe(cp)


def test_cannot_signal_pid1(sbx):
    cp = sbx("kill -0 1; echo rc=$?", "kill -9 1; echo rc=$?", "echo alive")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"rc=1\nrc=1\nalive\n"
    assert "Operation not permitted" in err(cp)


def test_cannot_signal_host_process(sbx):
    victim = subprocess.Popen(["sleep", "100"])
    try:
        hp = victim.pid
        cp = sbx(f"kill {hp}; echo rc=$?", f"kill -9 {hp}; echo rc=$?",
                 f"test -e /proc/{hp} && echo VISIBLE; true")
        assert victim.poll() is None, "the host process was killed from inside the sandbox"
    finally:
        victim.kill()
        victim.wait()
    assert cp.returncode == 0, describe(cp)
    assert b"VISIBLE" not in cp.stdout or hp < 100
    assert cp.stdout.startswith(b"rc=1\nrc=1\n"), describe(cp)


def test_no_capabilities_no_new_privs_seccomp(sbx):
    cp = sbx("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status",
             "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/$$/status")
    assert cp.returncode == 0, describe(cp)
    fields = {}
    for line in out(cp).splitlines():
        k, v = line.split(":", 1)
        fields.setdefault(k, set()).add(v.strip())
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert fields[cap] == {"0000000000000000"}, (cap, fields)
    assert fields["NoNewPrivs"] == {"1"}
    assert fields["Seccomp"] == {"2"}


# x86_64 numbers, and arguments with which each call would fail with another errno than
# EPERM (or succeed) for an unprivileged process without the filter: a bad fd, a NULL
# pointer. Under the filter every one is EPERM before the kernel looks at them; clone3 ENOSYS.
SECCOMP_PROBES = {
    "keyctl": (250, [0, 0]), "add_key": (248, [0, 0, 0, 0, 0]), "request_key": (249, [0, 0, 0, 0]),
    "io_uring_setup": (425, [1, 0]), "io_uring_enter": (426, [-1, 0, 0, 0, 0, 0]),
    "io_uring_register": (427, [-1, 0, 0, 0]), "perf_event_open": (298, [0, 0, -1, -1, 0]),
    "setns": (308, [-1, 0]), "name_to_handle_at": (303, [-1, 0, 0, 0, 0]),
    "fsconfig": (431, [-1, 0, 0, 0, 0]), "mount_setattr": (442, [-1, 0, 0, 0, 0]),
    "move_mount": (429, [-1, 0, -1, 0, 0]), "open_tree": (428, [-1, 0, 0]), "fspick": (433, [-1, 0, 0]),
    "quotactl": (179, [0, 0, 0, 0]), "userfaultfd": (323, [1]), "clone3": (435, [0, 0]),
    "unshare_newuser": (272, [0x10000000]), "mount": (165, [0, 0, 0, 0, 0]), "umount2": (166, [0, 0]),
    "open_by_handle_at": (304, [-1, 0, 0]), "bpf": (321, [0, 0, 0]), "fanotify_init": (300, [0x200, 0]),
    "lookup_dcookie": (212, [0, 0, 0]),
}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 syscall numbers")
def test_the_filter_refuses_each_call_it_names(sbx):
    probe = ("import ctypes, json\n"
             "l = ctypes.CDLL(None, use_errno=True)\n"
             "l.syscall.restype = ctypes.c_long\n"
             f"probes = {SECCOMP_PROBES!r}\n"
             "out = {}\n"
             "for name, (nr, args) in probes.items():\n"
             "    ctypes.set_errno(0)\n"
             "    r = l.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])\n"
             "    out[name] = (r, ctypes.get_errno())\n"
             "print(json.dumps(out))\n")
    cp = sbx(f"python3 -c {shlex.quote(probe)}")
    assert cp.returncode == 0, describe(cp)
    got = json.loads(out(cp))
    want = {name: [-1, errno.ENOSYS if name == "clone3" else errno.EPERM] for name in SECCOMP_PROBES}
    assert got == want, got


def test_setuid_binaries_do_not_give_root(sbx):
    probes = {"/usr/bin/su": "/usr/bin/su -c 'id -u' </dev/null 2>&1; echo rc=$?",
              "/usr/bin/passwd": "/usr/bin/passwd </dev/null 2>&1; echo rc=$?",
              "/usr/bin/sudo": "/usr/bin/sudo -n id -u </dev/null 2>&1; echo rc=$?"}
    cmds = [c for p, c in probes.items() if os.path.exists(p) and os.stat(p).st_mode & 0o4000]
    if not cmds:
        pytest.skip("no setuid su/passwd/sudo on this host")
    cmds.append("id -u; python3 -c 'import os; os.setuid(0)' 2>&1 | tail -1")
    cp = sbx(*cmds, timeout=30)
    assert cp.returncode == 0, describe(cp)
    text = out(cp)
    for line in text.splitlines():
        assert line != "rc=0" and line.strip() != "0", describe(cp)
    assert "1000\n" in text
    assert "PermissionError" in text


def test_sandbox_filesystem_is_nosuid(sbx):
    cp = sbx("grep -E ' /usr | /tmp | /home/user ' /proc/self/mountinfo")
    assert cp.returncode == 0, describe(cp)
    lines = out(cp).splitlines()
    assert len(lines) >= 3, describe(cp)
    for line in lines:
        opts = line.split()[5].split(",")
        assert "nosuid" in opts, line


def test_hostname_cannot_be_changed(sbx):
    cp = sbx("hostname evil 2>/dev/null; echo rc=$?; hostname")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"rc=1\nsandbox\n"
    assert os.uname().nodename != "evil"


def test_cannot_see_host_cgroups_or_escape_cgroup(sbx):
    cp = sbx("cat /proc/self/cgroup | grep '^0::'; "
             "echo $$ > /sys/fs/cgroup/cgroup.procs 2>/dev/null; echo rc=$?")
    assert cp.returncode == 0, describe(cp)
    assert b"rc=0" not in cp.stdout, describe(cp)
    assert b"sbx-" not in cp.stdout, "the host cgroup path leaks into the sandbox"
