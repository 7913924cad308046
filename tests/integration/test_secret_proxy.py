"""Secrets the commands never see: `secrets: {NAME: {value, hosts}}` (mode "proxy").

The sandbox's commands get NAME=SBX_SECRET_NAME_<random>; the egress proxy ends the TLS of
CONNECTs to the secret's hosts with a CA of the sandbox's own and puts the value where the
placeholder is in the request's head. Every byte stays on loopback: the test's HTTPS server
listens on the host's 127.0.0.1 with a self-signed certificate that the daemon trusts through
--egress-ca, and --egress-hosts maps the test names to 127.0.0.1 (no DNS).

The value is never given to a sandbox's command, not even to look for it: where a command
must search for it (files, environments, memory), it gets the value reversed and turns it
round itself, in the searching process only.
"""
import base64
import hashlib
import http.server
import json
import os
import re
import secrets as pysecrets
import shutil
import socketserver
import subprocess
import time
import tempfile
import threading
from pathlib import Path

import pytest

from conftest import Delegation
from test_egress import SBX, Daemon

VALUE = "sk-live-" + pysecrets.token_hex(20)
OTHER_VALUE = "gh-other-" + pysecrets.token_hex(12)
PH = re.compile(r"^SBX_SECRET_TOKEN_[0-9a-f]{24}$")


def _big():
    """300 KB with the value at offsets across TLS records' 16 KiB (and the proxy's reads')."""
    body = bytearray(hashlib.sha256(b"fill").hexdigest().encode() * (300 * 1024 // 64))
    for at in (0, 16384 - 5, 32768 - 1, 65536 - len(VALUE) + 1, 100000, len(body) - len(VALUE)):
        body[at:at + len(VALUE)] = VALUE.encode()
    return bytes(body)


BIG = _big()
BIG_MASKED = BIG.replace(VALUE.encode(), b"*" * len(VALUE))


class Recorder(http.server.BaseHTTPRequestHandler):
    """Records each request's Authorization and X-Key; /echo sends them back in a header and
    the body (a server that reflects what it got)."""
    protocol_version = "HTTP/1.1"
    seen = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        rec = {"path": self.path, "auth": auth, "key": self.headers.get("X-Key", ""),
               "host": self.headers.get("Host"), "connection": self.headers.get("Connection")}
        Recorder.seen.append(rec)
        if self.path == "/probe":
            # Sends back X-Probe after an "x", then keeps the connection open (more is
            # promised): what the client gets meanwhile is what the proxy let go.
            body = ("x" + self.headers.get("X-Probe", "")).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + 100))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            time.sleep(8)
            return
        if self.path == "/big":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BIG)))
            self.end_headers()
            self.wfile.write(BIG)
            return
        body = (("echo " + auth + " " + self.path) if self.path.startswith("/echo") else "ok").encode()
        self.send_response(200)
        if self.path.startswith("/echo"):
            self.send_header("X-Echo", auth)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        Recorder.seen.append({"path": self.path, "auth": self.headers.get("Authorization", ""), "body": body.decode()})
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(ctx=None):
    srv = Server(("127.0.0.1", 0), Recorder)
    if ctx:
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def last(path_prefix):
    for rec in reversed(Recorder.seen):
        if rec["path"].startswith(path_prefix):
            return rec
    raise AssertionError(f"the server saw no request for {path_prefix}: {Recorder.seen}")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed: no certificate for the HTTPS server")
    d = tmp_path_factory.mktemp("tls")
    d.chmod(0o755)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "1", "-subj", "/CN=api.secret.test",
                    "-addext", "subjectAltName=DNS:api.secret.test,DNS:other.secret.test,DNS:echo.secret.test",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    (d / "cert.pem").chmod(0o644)
    (d / "hosts").write_text("127.0.0.1 api.secret.test other.secret.test echo.secret.test\n")
    (d / "hosts").chmod(0o644)
    return d


@pytest.fixture(scope="module")
def https(certs):
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(certs / "cert.pem"), str(certs / "key.pem"))
    srv = _serve(ctx)
    yield srv.server_address[1]
    srv.shutdown()


@pytest.fixture(scope="module")
def http_port():
    srv = _serve()
    yield srv.server_address[1]
    srv.shutdown()


def daemon_opts(certs):
    return ["--egress-hosts", str(certs / "hosts"), "--egress-allow-private", "127.0.0.1/32",
            "--egress-ca", str(certs / "cert.pem")]


@pytest.fixture(scope="module")
def daemon(certs):
    d = Daemon(*daemon_opts(certs))
    yield d
    d.close()


SECRETS = {"TOKEN": {"value": VALUE, "hosts": ["api.secret.test:*", "echo.secret.test:*"]},
           "KEY2": {"value": OTHER_VALUE, "hosts": ["echo.secret.test:*"], "mode": "proxy"},
           "PLAIN": "an-env-secret-value"}


@pytest.fixture(scope="module")
def sid(daemon):
    """The secret's hosts join the allowlist; other.secret.test is allowed but not the
    secret's."""
    return daemon.create(network="allowlist", networkAllow=["other.secret.test:*"], secrets=SECRETS)


def run_ok(daemon, sid, cmd, stdin=None):
    r = daemon.run(sid, cmd, stdin=stdin)
    assert r["exitCode"] == 0, r
    return r["stdout"]


# The value, reversed, and a shell word that turns it round inside the one process that needs it.
REV = VALUE[::-1]
UNREV = f"\"$(printf %s '{REV}' | rev)\""


# ------------------------------------------------------------------ what the commands see

def test_the_environment_holds_the_placeholder_and_the_trust_store(daemon, sid):
    out = run_ok(daemon, sid, "echo $TOKEN; echo $KEY2; echo $PLAIN; echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE "
                              "$CURL_CA_BUNDLE $PIP_CERT $GIT_SSL_CAINFO $NODE_EXTRA_CA_CERTS; "
                              "grep -c 'BEGIN CERTIFICATE' /etc/sbx/sandbox-ca.crt; "
                              "cmp -s /etc/sbx/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt && echo bound")
    lines = out.split("\n")
    assert PH.match(lines[0]), out
    assert lines[1].startswith("SBX_SECRET_KEY2_") and lines[1] != lines[0], out
    assert lines[2] == "[REDACTED:PLAIN]", out  # an env secret is there, as before (redacted in output)
    assert lines[3] == " ".join(["/etc/sbx/ca-certificates.crt"] * 5 + ["/etc/sbx/sandbox-ca.crt"]), out
    assert lines[4] == "1" and lines[5] == "bound", out


def test_placeholders_differ_between_sandboxes(daemon, sid):
    other = daemon.create(network="allowlist", secrets={"TOKEN": {"value": VALUE, "hosts": ["api.secret.test"]}})
    try:
        a = run_ok(daemon, sid, "echo $TOKEN").strip()
        b = run_ok(daemon, other, "echo $TOKEN").strip()
        assert PH.match(a) and PH.match(b) and a != b
    finally:
        daemon.ok("sandbox.destroy", {"sandboxId": other})


# ------------------------------------------------------------------ what the server gets

def test_curl_sends_the_value(daemon, sid, https):
    out = run_ok(daemon, sid, f'curl -sS -m 20 -H "Authorization: Bearer $TOKEN" https://api.secret.test:{https}/curl')
    assert out == "ok", out
    rec = last("/curl")
    assert rec["auth"] == "Bearer " + VALUE, rec
    assert rec["connection"] == "close", rec


def test_python_urllib_sends_the_value(daemon, sid, https):
    py = ("import os, urllib.request as u\n"
          f"req = u.Request('https://api.secret.test:{https}/py?t=' + os.environ['TOKEN'], "
          "headers={'Authorization': 'token ' + os.environ['TOKEN'], 'X-Key': os.environ['TOKEN']})\n"
          "print(u.urlopen(req, timeout=20).read().decode())\n")
    out = run_ok(daemon, sid, "python3 -", stdin=py.encode())
    assert out.strip() == "ok", out
    rec = last("/py")
    # The request line and every header carry the value; nothing of the placeholder is left.
    assert rec["auth"] == "token " + VALUE and rec["key"] == VALUE, rec
    assert rec["path"] == "/py?t=" + VALUE, rec


def test_a_post_body_is_relayed_unchanged(daemon, sid, https):
    out = run_ok(daemon, sid, f'curl -sS -m 20 -H "Authorization: Bearer $TOKEN" --data-binary "body=$TOKEN" '
                              f'https://api.secret.test:{https}/post; echo; echo $TOKEN')
    ok, ph = out.strip().split("\n")
    assert ok == "ok", out
    rec = last("/post")
    assert rec["auth"] == "Bearer " + VALUE and rec["body"] == "body=" + ph, rec


def test_a_host_not_listed_gets_the_placeholder(daemon, sid, https, certs):
    """other.secret.test is allowed but not the secret's: a plain tunnel (the server's own
    certificate, which curl must be given), and the placeholder stays."""
    out = run_ok(daemon, sid, f'cat > /tmp/srv.pem; curl -sS -m 20 --cacert /tmp/srv.pem -H "Authorization: Bearer $TOKEN" '
                              f'https://other.secret.test:{https}/notlisted; echo; echo $TOKEN',
                 stdin=(certs / "cert.pem").read_bytes())
    ok, ph = out.strip().split("\n")
    assert ok == "ok" and PH.match(ph), out
    assert last("/notlisted")["auth"] == "Bearer " + ph


def test_a_secret_goes_only_to_its_own_hosts(daemon, sid, https):
    """api.secret.test is TOKEN's, not KEY2's: KEY2's placeholder stays."""
    out = run_ok(daemon, sid, f'curl -sS -m 20 -H "Authorization: Bearer $TOKEN" -H "X-Key: $KEY2" '
                              f'https://api.secret.test:{https}/mixed; echo; echo $KEY2')
    ok, ph2 = out.strip().split("\n")
    rec = last("/mixed")
    assert rec["auth"] == "Bearer " + VALUE and rec["key"] == ph2 and ph2.startswith("SBX_SECRET_KEY2_"), (out, rec)


def test_plain_http_is_never_given_the_value(daemon, sid, http_port):
    """No TLS, no value: a plain request to a listed host carries the placeholder as it is."""
    out = run_ok(daemon, sid, f'curl -sS -m 20 -H "Authorization: Bearer $TOKEN" '
                              f'http://api.secret.test:{http_port}/plain; echo; echo $TOKEN')
    ok, ph = out.strip().split("\n")
    assert ok == "ok" and last("/plain")["auth"] == "Bearer " + ph


def test_an_echoed_value_comes_back_masked(daemon, sid, https):
    """The server reflects the header in its answer (a header and the body): the sandbox
    gets '*' for each byte of the value, never the value (which redaction would show as
    [REDACTED:TOKEN])."""
    out = run_ok(daemon, sid, f'curl -sS -m 20 -D /tmp/h -H "Authorization: Bearer $TOKEN" '
                              f'https://echo.secret.test:{https}/echo; echo; grep -i x-echo /tmp/h')
    mask = "*" * len(VALUE)
    assert out.startswith(f"echo Bearer {mask} /echo\n"), out
    assert f"X-Echo: Bearer {mask}" in out, out
    assert "REDACTED" not in out, out
    assert last("/echo")["auth"] == "Bearer " + VALUE


def test_what_the_proxy_holds_back_tells_nothing_of_the_value(daemon, sid, https):
    """The masking must not be an oracle: an answer whose tail begins the value (the sandbox
    chose it, through an endpoint that sends back what it got) arrives as soon as one whose
    tail does not, on a connection that stays open (an Upgrade keeps it so). Before, the
    prefix waited for more bytes and the sandbox saw only the "x"."""
    got = {}
    for name, probe in (("prefix", VALUE[:12]), ("other", "zz" + VALUE[2:12])):
        # Cut after 4 s (curl's 28): what arrived by then is what the proxy let go; the server
        # keeps the connection open for 8.
        out = run_ok(daemon, sid, f'curl -sS -N -m 4 -H "Upgrade: probe" -H "X-Probe: {probe}" '
                                  f'https://echo.secret.test:{https}/probe; echo " rc=$?"')
        got[name] = out
        assert out.startswith("x" + probe + " rc=28"), (name, out)
    assert got["prefix"].replace(VALUE[:12], "P") == got["other"].replace("zz" + VALUE[2:12], "P"), got


def test_a_value_goes_only_to_the_host_the_connection_was_made_to(daemon, sid, https):
    """A Host header or an absolute target naming another host inside a CONNECT to the
    secret's host is refused with a 403 that says why, and the value never goes out (a front
    that routes by Host would hand it to another tenant)."""
    before = len(Recorder.seen)
    for how in ('-H "Host: attacker-tenant.example"',
                f'--request-target https://attacker-tenant.example:{https}/t'):
        out = run_ok(daemon, sid, f'curl -sS -m 20 {how} -H "Authorization: Bearer $TOKEN" '
                                  f'-w " status=%{{http_code}}" https://api.secret.test:{https}/tenant')
        assert "status=403" in out and "goes only to the host this connection was made to" in out, out
    assert all(VALUE not in json.dumps(r) for r in Recorder.seen[before:]), Recorder.seen[before:]
    out = run_ok(daemon, sid, f'curl -sS -m 20 -H "Host: api.secret.test:{https}" -H "Authorization: Bearer $TOKEN" '
                              f'https://api.secret.test:{https}/same-host')
    assert last("/same-host")["auth"] == "Bearer " + VALUE, out


def test_output_holds_back_nothing_of_a_proxy_secret(daemon, sid):
    """The sandbox's own output is not redacted for proxy secrets (no command holds them): a
    process that prints a guess and waits shows the same whether the guess begins the value or
    not (the value starts with a key shape, sk-, whose own hold-back treats both alike). Before,
    the redactor held back a prefix of the value, and process.logs showed only the "x"."""
    def shown(probe):
        p = daemon.ok("process.start", {"sandboxId": sid, "command": f"printf 'x%s' '{probe}'; sleep 3"})
        deadline = time.monotonic() + 10
        while not daemon.ok("process.logs", {"processId": p["processId"]})["stdout"] and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        text = daemon.ok("process.logs", {"processId": p["processId"]})["stdout"]
        daemon.ok("process.kill", {"processId": p["processId"]})
        return text
    prefix = VALUE[:12]
    other = VALUE[:8] + ("0" if VALUE[8] != "0" else "1") + VALUE[9:12]
    a, b = shown(prefix), shown(other)
    # The same shown of both, whatever the key shape's own hold-back keeps of its tail for a
    # moment on a loaded machine: as many bytes, each the probe's own.
    assert len(a) == len(b) > 1, (a, b)
    assert a == "x" + prefix[:len(a) - 1] and b == "x" + other[:len(b) - 1], (a, b)


def test_a_large_answer_is_masked_across_records(daemon, sid, https):
    out = run_ok(daemon, sid, f"curl -sS -m 30 https://echo.secret.test:{https}/big | sha256sum | cut -c1-64")
    assert out.strip() == hashlib.sha256(BIG_MASKED).hexdigest()


def test_one_curl_many_requests(daemon, sid, https):
    """Each request gets a connection of its own (the proxy asks the server to close after
    one), and each its value."""
    out = run_ok(daemon, sid, f'curl -sS -m 30 -H "Authorization: Bearer $TOKEN" https://api.secret.test:{https}/m1 '
                              f'https://api.secret.test:{https}/m2 https://api.secret.test:{https}/m3')
    assert out == "okokok", out
    assert all(last(p)["auth"] == "Bearer " + VALUE for p in ("/m1", "/m2", "/m3"))


def test_a_server_not_trusted_is_a_502(tmp_path, certs, https):
    """Without --egress-ca the test's certificate is not trusted: the proxy answers 502 in
    the client's own TLS, saying why, and sends nothing."""
    d = Daemon("--egress-hosts", str(certs / "hosts"), "--egress-allow-private", "127.0.0.1/32")
    try:
        s = d.create(network="allowlist", secrets={"TOKEN": {"value": VALUE, "hosts": ["api.secret.test:*"]}})
        n = len(Recorder.seen)
        r = d.run(s, f'curl -sS -m 20 -i -H "Authorization: Bearer $TOKEN" https://api.secret.test:{https}/untrusted')
        assert "HTTP/1.1 502" in r["stdout"] and "is not trusted" in r["stdout"], r
        assert not any(x["path"] == "/untrusted" for x in Recorder.seen[n:])
    finally:
        d.close()


# ------------------------------------------------------------------ where the value is not

def test_no_file_holds_the_value(daemon, sid, https):
    """After requests went out: grep over the writable tree and /etc finds the placeholder
    where a command wrote it (the search works) and the value nowhere."""
    run_ok(daemon, sid, f'echo "$TOKEN" > /tmp/ph.txt; curl -sS -m 20 -o /home/user/resp -H "Authorization: Bearer $TOKEN" '
                        f'https://echo.secret.test:{https}/echo-file')
    out = run_ok(daemon, sid, f'grep -rlF "$TOKEN" /tmp /home/user /dev/shm; echo ---; '
                              f'grep -rlsF {UNREV} /tmp /home/user /dev/shm /etc /run /var; echo rc=$?')
    found, rest = out.split("---\n")
    assert "/tmp/ph.txt" in found.split("\n"), out
    # No file named: grep's 1 (no match), or 2 when some file could not be read (/etc has
    # files only root may read), never 0.
    assert rest.strip() in ("rc=1", "rc=2"), out


def test_no_environment_holds_the_value(daemon, sid):
    """Every process of the sandbox that is readable (pid 1 is not: it is the daemon's fork,
    non-dumpable): its environ has the placeholder and never the value."""
    py = ("import os, sys\n"
          "v = sys.argv[1].encode()\n"
          "ph = os.environ['TOKEN'].encode()\n"
          "seen = leaked = 0\n"
          "for p in os.listdir('/proc'):\n"
          "    if not p.isdigit(): continue\n"
          "    try: e = open(f'/proc/{p}/environ', 'rb').read()\n"
          "    except OSError: continue\n"
          "    seen += ph in e\n"
          "    leaked += v in e\n"
          "print(seen, leaked)\n")
    out = run_ok(daemon, sid, f"sleep 30 & cat > /tmp/env.py; python3 /tmp/env.py {UNREV}; kill %1", stdin=py.encode())
    seen, leaked = map(int, out.split())
    assert seen >= 2 and leaked == 0, out


def test_no_process_memory_holds_the_value(daemon, sid, https):
    """A process that held the placeholder and sent it through the proxy: its core dump (where
    the host's core_pattern writes one into the working directory) or else its memory read
    through /proc/PID/mem from its parent holds the placeholder, never the value."""
    py = ("import os, re, signal, subprocess, sys, time\n"
          "v = sys.argv[1].encode(); ph = os.environ['TOKEN'].encode()\n"
          f"cmd = 'X=\"Bearer $TOKEN\"; curl -sS -m 20 -o /dev/null -H \"Authorization: $X\" https://api.secret.test:{https}/mem; "
          "echo sent; exec sleep 60'\n"
          "p = subprocess.Popen(['bash', '-c', cmd], stdout=subprocess.PIPE, cwd='/tmp/cores')\n"
          "assert p.stdout.readline() == b'sent\\n'\n"
          "time.sleep(0.2)\n"
          "mem = b''\n"
          "with open(f'/proc/{p.pid}/maps') as maps, open(f'/proc/{p.pid}/mem', 'rb', 0) as m:\n"
          "    for line in maps:\n"
          "        a, b = (int(x, 16) for x in line.split()[0].split('-'))\n"
          "        try:\n"
          "            m.seek(a); mem += m.read(b - a)\n"
          "        except (OSError, OverflowError, ValueError):\n"
          "            pass\n"
          "p.send_signal(signal.SIGSEGV); p.wait()\n"
          "cores = [os.path.join('/tmp/cores', f) for f in os.listdir('/tmp/cores')]\n"
          "core = open(cores[0], 'rb').read() if cores else b''\n"
          "print('mem', len(mem) > 0, ph in mem, v in mem)\n"
          "print('core', len(core) > 0, ph in core, v in core)\n")
    r = daemon.run(sid, f"mkdir -p /tmp/cores; ulimit -c unlimited 2>/dev/null; cat > /tmp/mem.py; "
                        f"python3 /tmp/mem.py {UNREV}; rc=$?; rm -rf /tmp/cores; exit $rc", stdin=py.encode())
    out = r["stdout"]
    lines = out.strip().split("\n")
    assert len(lines) == 2, r
    mem, core = (line.split() for line in lines)
    assert last("/mem")["auth"] == "Bearer " + VALUE
    assert mem == ["mem", "True", "True", "False"], out
    # A core is made only where the host's core_pattern allows: when there is one, the same.
    assert core in (["core", "True", "True", "False"], ["core", "False", "False", "False"]), out


# ------------------------------------------------------------------ bad params

@pytest.mark.parametrize("params,words", [
    ({"secrets": {"T": {"value": "v", "hosts": ["a.test"]}}}, 'need network "allowlist"'),
    ({"network": "host", "secrets": {"T": {"value": "v", "hosts": ["a.test"]}}}, 'need network "allowlist"'),
    ({"network": "allowlist", "networkAllow": [], "secrets": {"T": {"value": "v", "mode": "proxy"}}}, "needs hosts"),
    ({"network": "allowlist", "secrets": {"T": {"value": "v", "hosts": []}}}, "1-64 host patterns"),
    ({"network": "allowlist", "secrets": {"T": {"value": "v", "hosts": "a.test"}}}, "must be an array"),
    ({"network": "allowlist", "secrets": {"T": {"value": "v", "hosts": [3]}}}, "hosts[0] must be a string"),
    ({"network": "allowlist", "secrets": {"T": {"value": "v", "hosts": ["*.com"]}}}, "secret T: hosts:"),
    ({"network": "allowlist", "secrets": {"T": {"value": "v", "hosts": ["a.test"], "mode": "env"}}},
     'hosts are for mode "proxy"'),
    ({"network": "allowlist", "secrets": {"T": {"value": "v", "hosts": ["a.test"], "mode": "x"}}},
     'must be "env" or "proxy"'),
    ({"network": "allowlist", "secrets": {"T": {"value": "", "hosts": ["a.test"]}}}, "the value must be 1-"),
    ({"network": "allowlist", "secrets": {"T": {"value": "v", "hosts": ["a.test"], "x": 1}}}, "unknown key"),
    ({"network": "allowlist", "secrets": {"T": {"value": "a\r\nX-Evil: 1", "hosts": ["a.test"]}}}, "without CR or LF"),
    ({"network": "allowlist", "env": {"T": "x"}, "secrets": {"T": {"value": "v", "hosts": ["a.test"]}}},
     "given twice"),
])
def test_bad_params_are_refused(daemon, sid, params, words):
    msg = daemon.call("sandbox.create", params)
    assert msg.get("error", {}).get("code") == -32602, msg
    assert words in msg["error"]["message"], msg
    assert "sk-live" not in json.dumps(msg)
    # The daemon and the sandbox go on.
    assert PH.match(run_ok(daemon, sid, "echo $TOKEN").strip())


# ------------------------------------------------------------------ forks, the CLI, rootless

def test_a_fork_keeps_the_placeholder_and_gets_its_own_ca(daemon, sid, https):
    child = daemon.ok("sandbox.fork", {"sandboxId": sid})["sandboxId"]
    try:
        a = run_ok(daemon, sid, "echo $TOKEN; sha256sum < /etc/sbx/sandbox-ca.crt")
        b = run_ok(daemon, child, f'echo $TOKEN; sha256sum < /etc/sbx/sandbox-ca.crt; curl -sS -m 20 '
                                  f'-H "Authorization: Bearer $TOKEN" https://api.secret.test:{https}/fork')
        assert a.split("\n")[0] == b.split("\n")[0]
        assert a.split("\n")[1] != b.split("\n")[1]  # each sandbox's CA is its own
        assert b.endswith("ok") and last("/fork")["auth"] == "Bearer " + VALUE
    finally:
        daemon.ok("sandbox.destroy", {"sandboxId": child})


def test_serve_refuses_a_bad_ca_file(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    for f, words in ((bad, "no PEM certificate"), (tmp_path / "none.pem", "No such file")):
        p = subprocess.run([SBX, "serve", "--stdio", "--egress-ca", str(f)],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and words in p.stderr, p.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to prepare a delegated cgroup, and setpriv")
def test_rootless_secret_proxy(certs, https):
    """A daemon of uid 65534: the CA, the trust store and the injection need no privilege."""
    d = Delegation("sbx-test-secproxy")
    hd = Path(tempfile.mkdtemp(prefix="sbx-secproxy-"))
    hd.chmod(0o755)
    for f in ("hosts", "cert.pem"):
        shutil.copy(certs / f, hd / f)
        (hd / f).chmod(0o644)
    dm = Daemon("--egress-hosts", str(hd / "hosts"), "--egress-allow-private", "127.0.0.1/32",
                "--egress-ca", str(hd / "cert.pem"),
                argv_prefix=Delegation.argv, env=d.env(), preexec_fn=d.enter)
    try:
        sid = dm.create(network="allowlist", secrets={"TOKEN": {"value": VALUE, "hosts": ["api.secret.test:*"]}})
        r = dm.run(sid, f'id -u; curl -sS -m 20 -H "Authorization: Bearer $TOKEN" https://api.secret.test:{https}/rootless')
        assert r["stdout"] == "1000\nok", r
        assert last("/rootless")["auth"] == "Bearer " + VALUE
    finally:
        dm.close()
        shutil.rmtree(hd, ignore_errors=True)
        d.remove()
