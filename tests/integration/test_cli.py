"""The `sbx` command line: help, version, argument errors, options, exit codes, output."""
import hashlib
import os
import subprocess

import pytest

from conftest import killing, SBX_BIN, describe, err, out, sbx_raw


# ------------------------------------------------------------------ help / version / usage


def test_run_help_exits_0_with_usage():
    cp = sbx_raw("run", "--help")
    assert cp.returncode == 0, describe(cp)
    text = out(cp)
    assert text.startswith("Usage: sbx run [OPTIONS] -- CMD [CMD ...]")
    for opt in ("--timeout", "--cwd", "--env", "--network", "--memory", "--pids", "--fs-size",
                "--files", "--stdout-limit", "--stderr-limit", "--rootfs"):
        assert opt in text, opt
    assert cp.stderr == b""


def test_run_short_help():
    cp = sbx_raw("run", "-h")
    assert cp.returncode == 0
    assert out(cp).startswith("Usage: sbx run")


def test_top_level_help():
    cp = sbx_raw("--help")
    assert cp.returncode == 0, describe(cp)
    assert "Usage: sbx COMMAND" in out(cp)
    assert "run" in out(cp)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag):
    cp = sbx_raw(flag)
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"sbx 0.1.0\n"


def test_no_subcommand_is_usage_error():
    cp = sbx_raw()
    assert cp.returncode == 2, describe(cp)
    assert "Usage: sbx COMMAND" in err(cp)


def test_unknown_subcommand_is_usage_error():
    cp = sbx_raw("frobnicate")
    assert cp.returncode == 2, describe(cp)
    assert "Usage:" in err(cp)


@pytest.mark.parametrize("args", [
    ["--bogus", "--", "true"],
    ["-Z", "--", "true"],
    ["--timeout"],
])
def test_bad_flag_exits_2_with_where_help_is(args):
    # One line saying what is wrong and where help is, not the whole help (issue 28 item 12).
    cp = sbx_raw("run", *args)
    assert cp.returncode == 2, describe(cp)
    assert "Try 'sbx run --help'." in err(cp) and "Usage: sbx run" not in err(cp), describe(cp)
    assert len(err(cp).splitlines()) == 2, describe(cp)
    assert cp.stdout == b""


@pytest.mark.parametrize("args", [[], ["--"], ["-t", "5"], ["-t", "5", "--"]])
def test_run_without_command_exits_2(args):
    cp = sbx_raw("run", *args)
    assert cp.returncode == 2, describe(cp)
    assert "no command given" in err(cp)
    assert "Usage: sbx run" in err(cp)


NUMBER = "takes a number (fractions allowed)"
SIZE = "takes a size (a number, with K, M, G or T for powers of 1024)"
WHOLE = "takes a whole number"
ENV = "--env takes NAME=VALUE, NAME of letters, digits and _ (not starting with a digit)"


@pytest.mark.parametrize("args,message", [
    (["-t", "0"], "--timeout must be at least 0.001 s; got 0 s"),
    (["-t", "-1"], "--timeout must be above 0; got '-1'"),
    (["-t", "abc"], f"--timeout {NUMBER}; got 'abc'"),
    (["--timeout", "1x"], f"--timeout {NUMBER}; got '1x'"),
    (["--timeout", "86401"], "--timeout must be at most 86400 s; got 86401 s"),
    (["--memory", "12X"], f"--memory {SIZE}; got '12X'"),
    (["--memory", ""], f"--memory {SIZE}; got ''"),
    (["--memory", "1k"], "--memory must be at least 16M; got 1K"),
    (["--memory", "0"], "--memory must be at least 16M; got 0 bytes"),
    (["--memory", "32T"], "--memory must be at most 16T; got 32T"),
    (["--pids", "many"], f"--pids {WHOLE}; got 'many'"),
    (["--pids", "1"], "--pids must be at least 12; got 1"),
    (["--pids", "2"], "--pids must be at least 12; got 2"),
    (["--fs-size", "lots"], f"--fs-size {SIZE}; got 'lots'"),
    (["--fs-size", "1"], "--fs-size must be at least 64K; got 1 byte"),
    (["--files", "-3"], "--files must be above 0; got '-3'"),
    (["--files", "0"], "--files must be at least 16; got 0"),
    (["--stdout-limit", "1Q"], f"--stdout-limit {SIZE}; got '1Q'"),
    (["--stdout-limit", "0"], "--stdout-limit must be at least 1 byte; got 0 bytes"),
    (["--stderr-limit", "x"], f"--stderr-limit {SIZE}; got 'x'"),
    (["--cpus", "0"], "--cpus must be at least 0.01 CPUs; got 0 CPUs"),
    (["--cpus", "4096"], "--cpus must be at most "),
    (["-e", "NOEQUALS"], f"{ENV}; got 'NOEQUALS'"),
    (["-e", "1BAD=x"], f"{ENV}; got '1BAD=x'"),
    (["-e", "=x"], f"{ENV}; got '=x'"),
])
def test_invalid_option_values_exit_2_with_the_reason(args, message):
    cp = sbx_raw("run", *args, "--", "echo SHOULD-NOT-RUN")
    assert cp.returncode == 2, describe(cp)
    assert b"SHOULD-NOT-RUN" not in cp.stdout
    lines = err(cp).splitlines()
    assert lines[0].startswith("sbx run: " + message), lines
    assert lines[1:] == ["Try 'sbx run --help'."], lines


def test_invalid_value_message_names_the_option():
    cp = sbx_raw("run", "-t", "0", "--", "true")
    assert cp.returncode == 2
    first = err(cp).splitlines()[0]
    assert "-t" in first or "--timeout" in first, first


# ------------------------------------------------------------------ exit codes


def test_exit_code_is_last_commands(sbx):
    cp = sbx("exit 3", "exit 4", "exit 42")
    assert cp.returncode == 42, describe(cp)
    cp = sbx("false", "true")
    assert cp.returncode == 0, describe(cp)
    cp = sbx("true", "false")
    assert cp.returncode == 1, describe(cp)


def test_all_commands_run_in_order_even_after_failures(sbx):
    cp = sbx("echo one; false", "echo two; exit 9", "nosuchcommand_zz", "echo four")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"one\ntwo\nfour\n"


def test_single_command_basic_output(sbx):
    cp = sbx("echo hello; echo oops >&2; exit 5")
    assert cp.returncode == 5
    assert cp.stdout == b"hello\n"
    assert cp.stderr == b"oops\n"


# ------------------------------------------------------------------ options


def test_env_option_sets_variables(sbx):
    cp = sbx('printf "%s|%s|%s\\n" "$FOO" "$SPACED" "$EMPTY"; env | grep -c "^FOO=bar$"',
             opts=["-e", "FOO=bar", "--env", "SPACED=a b  c", "-e", "EMPTY="])
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"bar|a b  c|\n1\n"


def test_env_option_overrides_a_default(sbx):
    cp = sbx('echo "$LANG $PAGER"', opts=["-e", "LANG=C", "-e", "PAGER=less"])
    assert cp.stdout == b"C less\n", describe(cp)


def test_caller_environment_does_not_leak(sbx):
    env = dict(os.environ, SBX_TEST_MARKER_7f3a="leaked-secret", AWS_SECRET_ACCESS_KEY="xyz")
    cp = sbx('echo "${SBX_TEST_MARKER_7f3a-unset}"; env', env=env)
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout.startswith(b"unset\n")
    assert b"leaked-secret" not in cp.stdout
    assert b"SBX_TEST_MARKER" not in cp.stdout
    assert b"AWS_SECRET" not in cp.stdout


def test_default_environment_is_exactly_the_documented_set(sbx):
    cp = sbx("env -0")
    assert cp.returncode == 0, describe(cp)
    env = dict(e.split("=", 1) for e in out(cp).split("\0") if e)
    # bash itself adds PWD, SHLVL, _ (and OLDPWD); everything else must be sbx's defaults.
    names = set(env) - {"PWD", "SHLVL", "_", "OLDPWD"}
    assert names == {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TERM", "PAGER", "GIT_PAGER",
                     "SHELL", "HOSTNAME"}, env
    assert env["HOME"] == "/home/user"
    assert env["USER"] == env["LOGNAME"] == "user"
    assert env["LANG"] == "C.UTF-8"
    assert env["TERM"] == "dumb"
    assert env["PAGER"] == env["GIT_PAGER"] == "cat"
    assert env["SHELL"] == "/bin/bash"
    assert env["HOSTNAME"] == "sandbox"
    assert "/usr/bin" in env["PATH"].split(":") and "/bin" in env["PATH"].split(":")


def test_identity_hostname_and_home(sbx):
    cp = sbx("id -u; id -g; id -un; hostname; uname -n; pwd; echo $HOME; ls -A ~ | wc -l")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"1000\n1000\nuser\nsandbox\nsandbox\n/home/user\n/home/user\n0\n"


def test_cwd_option_applies_to_each_command(sbx):
    cp = sbx("pwd", "cd /; pwd", "pwd", opts=["-C", "/tmp"])
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"/tmp\n/\n/tmp\n"


def test_cwd_option_nonexistent_dir_fails(sbx):
    cp = sbx("echo SHOULD-NOT-RUN", opts=["--cwd", "/does/not/exist"])
    assert cp.returncode != 0, describe(cp)
    assert b"SHOULD-NOT-RUN" not in cp.stdout
    assert b"/does/not/exist" in cp.stderr


def test_stdin_is_dev_null(sbx):
    # sbx run never forwards its own stdin: a command reading stdin sees EOF at once.
    cp = sbx("cat; echo cat=$?; read -r x; echo read=$?", input=b"host data\n", timeout=20)
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"cat=0\nread=1\n"
    assert cp.elapsed < 10


def test_fractional_timeout_is_accepted(sbx):
    cp = sbx("sleep 120", opts=["-t", "0.3"], timeout=150)
    assert cp.returncode == 124, describe(cp)
    assert cp.elapsed < 60  # the sleep's end would be 120 s


def test_command_longer_than_limit_is_refused(sbx):
    big = "true " + "#" * (70 * 1024)
    cp = sbx("echo first", big + "; echo SHOULD-NOT-RUN")
    assert cp.returncode == 1, describe(cp)
    assert cp.stdout == b"first\n"
    assert cp.stderr.count(b"the command was not run") == 1 and b"over the limit of 65536" in cp.stderr, describe(cp)


# ------------------------------------------------------------------ output


def test_binary_stdout_is_byte_exact(sbx):
    cp = sbx(r"printf 'a\0b\377c'")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"a\x00b\xffc"
    assert cp.stderr == b""


def test_binary_stderr_is_byte_exact(sbx):
    cp = sbx(r"printf '\0\001\376\377end' >&2")
    assert cp.stderr == b"\x00\x01\xfe\xffend"
    assert cp.stdout == b""


def test_no_trailing_newline_added_between_commands(sbx):
    cp = sbx("printf a", "printf b", r"printf 'c\0'")
    assert cp.stdout == b"abc\x00", describe(cp)


def test_large_random_output_is_exact(sbx):
    cp = sbx("head -c 300000 /dev/urandom > /tmp/r; sha256sum < /tmp/r | cut -d' ' -f1 >&2; cat /tmp/r")
    assert cp.returncode == 0, describe(cp)
    assert len(cp.stdout) == 300000
    assert hashlib.sha256(cp.stdout).hexdigest() == cp.stderr.decode().strip()


def test_stdout_limit_with_yes_under_inner_timeout(sbx):
    cp = sbx("timeout 2 yes", opts=["--stdout-limit", "1k"], timeout=30)
    assert len(cp.stdout) == 1024, describe(cp)
    assert cp.stdout == b"y\n" * 512
    assert cp.elapsed < 6, describe(cp)


def test_stdout_limit_with_yes_under_sbx_timeout(sbx):
    cp = sbx("yes", opts=["--stdout-limit", "1k", "-t", "1"], timeout=30)
    assert cp.returncode == 124, describe(cp)
    assert cp.stdout == b"y\n" * 512
    assert cp.elapsed < 5, describe(cp)


def test_stdout_limit_is_per_command(sbx):
    cp = sbx("head -c 5000 /dev/zero", "echo after", opts=["--stdout-limit", "1k"])
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout == b"\0" * 1024 + b"after\n"
    # The cut is said, with how much was dropped; the second command's output was whole.
    assert cp.stderr == b"sbx: command 1: stdout was cut at 1K; 3976 bytes more were dropped (--stdout-limit raises it)\n"


def test_stderr_limit(sbx):
    cp = sbx("head -c 5000 /dev/zero | tr '\\0' e >&2; echo out", opts=["--stderr-limit", "1k"])
    assert cp.returncode == 0, describe(cp)
    assert cp.stderr == b"e" * 1024 + b"sbx: command 1: stderr was cut at 1K; 3976 bytes more were dropped (--stderr-limit raises it)\n"
    assert cp.stdout == b"out\n"


def test_stdout_limit_does_not_block_the_writer(sbx):
    # 20 MB written through a 1 KiB cap must finish at full speed: the excess is drained.
    cp = sbx("head -c 20000000 /dev/zero; echo done >&2", opts=["--stdout-limit", "1k", "-t", "20"])
    assert cp.returncode == 0, describe(cp)
    assert len(cp.stdout) == 1024
    assert cp.stderr == (b"done\nsbx: command 1: stdout was cut at 1K; 19998976 bytes more were dropped "
                         b"(--stdout-limit raises it)\n")
    assert cp.elapsed < 10


def test_output_under_default_limit_is_complete(sbx):
    cp = sbx("head -c 900000 /dev/zero | tr '\\0' x")
    assert cp.stdout == b"x" * 900000, describe(cp)


def test_closed_stdout_of_sbx_does_not_leave_anything_behind():
    # sbx's own stdout is a pipe whose reader goes away: sbx must neither die of SIGPIPE
    # halfway (leaking the sandbox) nor hang.
    r, w = os.pipe()
    p = subprocess.Popen([SBX_BIN, "run", "-t", "1", "--", "yes"], stdin=subprocess.DEVNULL,
                         stdout=w, stderr=subprocess.PIPE)
    os.close(w)
    os.read(r, 10)
    os.close(r)
    with killing(p):
        rc = p.wait(timeout=15)
    assert rc == 124, (rc, p.stderr.read())
    p.stderr.close()


# ------------------------------------------------------------------ archives


def test_run_export_then_import_keeps_files_and_state(sbx, tmp_path):
    arc = tmp_path / "work.tar.zst"
    cp = sbx("cd /tmp && mkdir -p w && printf 'x\\0y' > w/bin && chmod 600 w/bin", "N=42; f() { echo f$1; }",
             opts=["--export", str(arc)])
    assert cp.returncode == 0, describe(cp)
    assert arc.stat().st_size > 0
    listing = subprocess.run(["tar", "--zstd", "-tf", str(arc)], capture_output=True, text=True, check=True).stdout
    assert "tmp/w/bin" in listing.split() and listing.split()[-1] == "sbx-manifest.json"
    cp = sbx("pwd; echo $N; f 1; stat -c %a w/bin; od -An -tx1 w/bin", opts=["--import", str(arc)])
    assert cp.returncode == 0, describe(cp)
    assert out(cp).split() == ["/tmp", "42", "f1", "600", "78", "00", "79"]


def test_run_import_refuses_a_bad_archive_and_runs_nothing(sbx, tmp_path):
    bad = tmp_path / "bad.tar.zst"
    bad.write_bytes(os.urandom(4096))
    cp = sbx("echo ran > /tmp/ran; echo ran", opts=["--import", str(bad)])
    assert cp.returncode == 1, describe(cp)
    assert out(cp) == ""
    assert "sbx run: import: not an sbx archive" in err(cp)
    cp = sbx("true", opts=["--import", str(tmp_path / "missing")])
    assert cp.returncode == 1 and "missing" in err(cp), describe(cp)


def test_export_import_commands_against_a_socket_server(tmp_path):
    import json
    import socket
    import tempfile
    import time
    d = tempfile.mkdtemp(prefix="sbx-cli-")
    path = os.path.join(d, "s.sock")
    srv = subprocess.Popen([SBX_BIN, "serve", "--socket", path, "--pool", "0"], stderr=subprocess.PIPE)
    try:
        for _ in range(300):
            if os.path.exists(path):
                break
            time.sleep(0.01)
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(path)
        f = conn.makefile("rwb")

        def call(method, **params):
            f.write((json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}) + "\n").encode())
            f.flush()
            return json.loads(f.readline())

        a = call("sandbox.create", persist=True)["result"]["sandboxId"]
        b = call("sandbox.create", persist=True)["result"]["sandboxId"]
        assert call("run", sandboxId=a, command="cd /home/user && echo hello > h && V=7")["result"]["exitCode"] == 0
        assert call("run", sandboxId=b, command="echo old > /tmp/old")["result"]["exitCode"] == 0
        arc = str(tmp_path / "a.tar.zst")
        cp = sbx_raw("export", "--socket", path, "--sandbox", a, "-o", arc)
        assert cp.returncode == 0, describe(cp)
        cp = sbx_raw("import", "--socket", path, "--sandbox", b, arc)
        assert cp.returncode == 0, describe(cp)
        r = call("run", sandboxId=b, command="pwd; cat h; echo $V; ls /tmp")["result"]
        assert r["stdout"] == "/home/user\nhello\n7\n", r
        cp = sbx_raw("export", "--socket", path, "--sandbox", "0" * 32, "-o", arc)
        assert cp.returncode == 4 and "Unknown sandboxId" in err(cp), describe(cp)  # as the other commands
        # The id positional and the socket from SBX_SOCKET, as the other commands take them.
        env = dict(os.environ, SBX_SOCKET=path)
        arc2 = str(tmp_path / "a2.tar.zst")
        cp = sbx_raw("export", a, "-o", arc2, env=env)
        assert cp.returncode == 0 and os.path.getsize(arc2) > 0, describe(cp)
        cp = sbx_raw("import", b, arc2, env=env)
        assert cp.returncode == 0, describe(cp)
        bad = tmp_path / "bad"
        bad.write_bytes(b"\x28\xb5\x2f\xfd" + os.urandom(100))
        cp = sbx_raw("import", "--socket", path, "--sandbox", b, str(bad))
        assert cp.returncode == 1 and "not an sbx archive" in err(cp), describe(cp)
        assert call("run", sandboxId=b, command="cat h")["result"]["stdout"] == "hello\n"
        assert sbx_raw("export", "--socket", path).returncode == 2
        # An archive past the daemon's default request line (8 MiB of base64): export took it,
        # import refused it as "Request too large" (a new-user pass); it goes through now.
        r = call("run", sandboxId=a, command="head -c 10M /dev/urandom > /home/user/rand.bin; md5sum < rand.bin")
        digest = r["result"]["stdout"]
        arc3 = str(tmp_path / "big.tar.zst")
        assert sbx_raw("export", a, "-o", arc3, env=env).returncode == 0 and os.path.getsize(arc3) > 10 << 20
        cp = sbx_raw("import", b, arc3, env=env)
        assert cp.returncode == 0, describe(cp)
        assert call("run", sandboxId=b, command="md5sum < rand.bin")["result"]["stdout"] == digest
        conn.close()
    finally:
        srv.terminate()
        srv.wait(10)


@pytest.mark.skipif(os.geteuid() != 0, reason="hides the installed sbx-engine in a mount namespace of its own")
def test_without_sbx_engine_what_needs_it_fails_with_127_and_says_why(tmp_path):
    """sbx becomes sbx-engine for serve, audit and a run with --image, --import or --export. A
    sbx with none beside it, in ../libexec/sbx from it or where it was installed (hidden here)
    exits 127 with the path it tried, and what needs no engine still works."""
    import shutil
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) missing")
    lone = tmp_path / "bin" / "sbx"
    lone.parent.mkdir()
    shutil.copy2(SBX_BIN, lone)
    hide = " ".join(f"mount -t tmpfs sbx-test {d} &&" for d in ("/usr/local/libexec", "/usr/libexec")
                    if os.path.isdir(d))
    for args, engine in ((["serve", "--stdio"], True), (["run", "--image", "x", "--", "true"], True),
                         (["run", "--", "echo without an engine"], False)):
        cp = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", f'{hide} exec "$0" "$@"',
                             str(lone), *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        if engine:
            assert cp.returncode == 127, (args, cp.returncode, cp.stderr)
            assert b"sbx: cannot start " in cp.stderr and b"sbx-engine" in cp.stderr, cp.stderr
        else:
            assert cp.returncode == 0 and cp.stdout == b"without an engine\n", (cp.returncode, cp.stderr)


def test_cgroup_parent_too_long_is_refused_not_cut(sbx):
    # A delegated cgroup directory whose path does not fit is an error, never a shortened path
    # that would name some other directory.
    env = dict(os.environ, SBX_CGROUP_PARENT="/sys/fs/cgroup/unified/" + "a" * 600)
    cp = sbx("echo hi", env=env, timeout=30)
    assert cp.returncode == 1 and cp.stdout == b"", describe(cp)
    assert b"cannot create sandbox" in cp.stderr, describe(cp)


def _loads(binary):
    """The shared libraries a program loads, by their sonames (ldd: the whole closure)."""
    cp = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    return {line.split()[0].split("/")[-1].split(".so")[0] for line in cp.stdout.splitlines() if line.strip()}


def _needed(binary):
    """The shared libraries a program names itself (its ELF NEEDED entries)."""
    cp = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    return {line.split("[")[1].split("]")[0] for line in cp.stdout.splitlines() if "(NEEDED)" in line}


def test_each_program_loads_only_what_it_uses(sbx):
    """sbx (the clients and run, whose sandboxes have no egress proxy: sbx_context_new_local)
    loads neither GnuTLS nor c-ares with what they bring, nor libarchive; sbx-engine all. Built
    without a sanitizer, sbx is linked whole (static-pie, src/cli/meson.build): it loads
    nothing at all, and still runs a sandbox; so is sbx-spawner, which loads none of them."""
    here = os.path.dirname(SBX_BIN)
    engine = os.path.join(here, "sbx-engine")
    if not os.path.exists(engine):
        pytest.skip(f"sbx-engine is not beside {SBX_BIN} (an installed sbx keeps it in libexec)")
    tls = {"libgnutls", "libcares", "libp11-kit", "libhogweed", "libgmp"}
    if os.environ.get("SBX_SANITIZED"):
        assert not _loads(SBX_BIN) & (tls | {"libarchive", "libxml2", "libicuuc"}), _loads(SBX_BIN)
        assert "libseccomp" in _loads(SBX_BIN)
    else:
        assert _needed(SBX_BIN) == set(), _needed(SBX_BIN)
        cp = sbx("echo linked whole", timeout=60)
        assert cp.returncode == 0 and cp.stdout == b"linked whole\n", describe(cp)
    assert tls | {"libarchive"} <= _loads(engine)
    # sbx-spawner, which every pid 1 of the daemon's is a copy of: the sandbox layer alone.
    spawner = os.path.join(here, "sbx-spawner")
    assert os.path.exists(spawner), spawner
    if os.environ.get("SBX_SANITIZED"):
        assert not _loads(spawner) & (tls | {"libarchive", "libjansson", "libcurl-gnutls"}), _loads(spawner)
    else:
        assert _needed(spawner) == set(), _needed(spawner)
        # sbx-spawner.so, the same preloaded into bash (test_zygote.py): libc alone, which bash
        # has already.
        preload = os.path.join(here, "sbx-spawner.so")
        assert _needed(preload) == {"libc.so.6"}, _needed(preload)


def test_serve_stdio_with_a_file_or_dev_null_for_stdin_says_what_it_needs(tmp_path):
    """epoll takes no regular file and no /dev/null: serve --stdio says that stdin must be a
    pipe, a socket or a terminal (it said "Operation not permitted"); with a pipe in and a file
    out it answers."""
    req = tmp_path / "req.json"
    req.write_text('{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    for stdin in (open(os.devnull, "rb"), open(req, "rb")):
        with stdin:
            cp = subprocess.run([SBX_BIN, "serve", "--stdio"], stdin=stdin, capture_output=True, timeout=30)
        assert cp.returncode == 1, cp
        assert cp.stderr == (b"sbx serve --stdio: stdin must be a pipe, a socket or a terminal (the client's end), "
                             b"not a file or /dev/null\n"), cp.stderr
    out_file = tmp_path / "out.json"
    with open(out_file, "wb") as f:
        cp = subprocess.run([SBX_BIN, "serve", "--stdio"], input=req.read_bytes(), stdout=f, stderr=subprocess.PIPE,
                            timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert out_file.read_bytes() == b'{"jsonrpc":"2.0","id":1,"result":{"pong":true}}\n'
