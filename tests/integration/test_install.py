"""What `meson install` (run by ./build.sh as root) gives an embedder: the public header,
libsbx.so exporting the C API and nothing else, and a pkg-config file `sbx` with which a
program builds and runs a real sandboxed command, as the README says:
`cc app.c $(pkg-config --cflags --libs sbx)`.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FRESH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV = {"PATH": FRESH_PATH, "LANG": "C.UTF-8"}
# The public headers: sbx/sbx.h and what it includes (sbx/port.h).
HEADERS = sorted((REPO / "include" / "sbx").glob("*.h"))


def pkg_config(*args):
    return subprocess.run(["pkg-config", *args, "sbx"], env=ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=30)


def _installed():
    if not shutil.which("pkg-config", path=FRESH_PATH) or not shutil.which("cc", path=FRESH_PATH):
        return False
    return pkg_config("--exists").returncode == 0


pytestmark = [
    pytest.mark.skipif(not _installed(), reason="sbx is not installed (./build.sh installs it when "
                       "run as root; or: meson install -C build): no pkg-config file `sbx`"),
    pytest.mark.skipif(os.environ.get("SBX_SANITIZED") == "1",
                       reason="checks the installed build, once, in the plain pass"),
]

APP = r"""
#include <stdio.h>
#include <string.h>
#include <sbx/sbx.h>

static int run(SbxSession *s, const char *cmd, SbxResult *r) {
        SbxRunOptions o = { .command = cmd, .command_len = strlen(cmd) };
        return sbx_session_run_sync(s, &o, NULL, NULL, r);
}

int main(void) {
        SbxContext *ctx;
        SbxSandbox *sb;
        SbxSession *s;
        SbxSandboxOptions so;
        SbxResult r;
        int rc = sbx_context_new(&ctx);
        if (rc < 0) {
                fprintf(stderr, "sbx_context_new: %s\n", strerror(-rc));
                return 2;
        }
        sbx_sandbox_options_init(&so);
        rc = sbx_sandbox_new(ctx, &so, &sb);
        if (rc < 0) {
                fprintf(stderr, "sbx_sandbox_new: %s: %s\n", strerror(-rc), sbx_context_last_error(ctx));
                return 2;
        }
        if (sbx_session_get(sb, NULL, &s) < 0 || run(s, "cd /tmp; x=42", &r) < 0)
                return 3;
        sbx_result_clear(&r);
        if (run(s, "echo \"$x in $PWD as $(id -un)\"", &r) < 0)
                return 4;
        printf("%s %d %.*s", sbx_version(), r.exit_code, (int)r.stdout_len, (const char *)r.stdout_data);
        sbx_result_clear(&r);
        sbx_context_free(ctx);
        return 0;
}
"""


def project_version():
    m = re.search(r"version\s*:\s*'([^']+)'", (REPO / "meson.build").read_text())
    return m.group(1)


def test_pkg_config_names_the_installed_header_and_library():
    mv = pkg_config("--modversion")
    assert mv.stdout.decode().strip() == project_version(), mv
    incdir = Path(pkg_config("--variable=includedir").stdout.decode().strip())
    for h in HEADERS:
        header = incdir / "sbx" / h.name
        assert header.is_file(), f"no {header}"
        assert header.read_bytes() == h.read_bytes(), \
            f"{header} is not this checkout's include/sbx/{h.name}: run ./build.sh"
    libdir = Path(pkg_config("--variable=libdir").stdout.decode().strip())
    assert (libdir / "libsbx.so").exists(), f"no libsbx.so in {libdir}"


def test_library_exports_only_the_c_api():
    libdir = Path(pkg_config("--variable=libdir").stdout.decode().strip())
    nm = subprocess.run(["nm", "-D", "--defined-only", str(libdir / "libsbx.so")], env=ENV,
                        stdout=subprocess.PIPE, timeout=30, check=True).stdout.decode()
    names = [l.split()[-1] for l in nm.splitlines() if len(l.split()) == 3]
    api = {name for h in HEADERS for name in re.findall(r"^SBX_API .*?\b(sbx_\w+)\(", h.read_text(), re.M)}
    assert len(api) > 30, "the header's SBX_API functions were not found"
    assert set(names) == api, (f"not in the header: {sorted(set(names) - api)}; "
                               f"not exported: {sorted(api - set(names))}")


def test_embedder_builds_with_pkg_config_and_runs_a_command(tmp_path):
    (tmp_path / "app.c").write_text(APP)
    cc = subprocess.run(["/bin/sh", "-c", "cc -Wall -Werror -o app app.c $(pkg-config --cflags --libs sbx)"],
                        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        timeout=120)
    assert cc.returncode == 0, cc.stderr.decode()
    app = subprocess.run([str(tmp_path / "app")], cwd=tmp_path, env=ENV, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert app.returncode == 0, app.stderr.decode()
    assert app.stdout.decode() == f"{project_version()} 0 42 in /tmp as user\n", app
