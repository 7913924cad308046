"""OCI images as sandbox roots (issue 24): import from an OCI layout, an OCI archive and a
docker save tar (all made offline by ocitool.py from the host's own bash and tools), layers
shared, sandboxes made from an image, fork/snapshot/export of one, removal, and hostile
images refused or neutralised with nothing written outside the store."""
import base64
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

import ocitool
from conftest import SPAWNED, Peer, stop_daemon, wait_until

REPO = Path(__file__).resolve().parents[2]
SBX = os.environ.get("SBX_BIN") or str(REPO / "build" / "src" / "cli" / "sbx")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root here"),
    pytest.mark.skipif(not os.path.exists(SBX), reason=f"{SBX} not built"),
]

INVALID_PARAMS = -32602


class Server:
    def __init__(self, store, *args):
        self.errf = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([SBX, "serve", "--stdio", "--image-store", str(store), *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errf)
        SPAWNED.append(self.proc.pid)
        self.peer = Peer(self.proc.stdout, self.proc.stdin)

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def stderr(self):
        self.errf.seek(0)
        return self.errf.read().decode(errors="replace")

    def result(self, m, p=None, timeout=60):
        return self.peer.result(m, p, timeout)

    def error(self, m, p=None, timeout=60):
        return self.peer.error(m, p, timeout)

    def run(self, sid, command):
        return self.result("run", {"sandboxId": sid, "command": command})


@pytest.fixture(scope="module")
def base_layer(tmp_path_factory):
    root = ocitool.host_root(str(tmp_path_factory.mktemp("root") / "root"))
    return ocitool.tar_of_dir(root)


def new_store():
    """A store sandboxes can reach: pytest's tmp_path is under a directory only root may enter."""
    d = tempfile.mkdtemp(prefix="sbx-test-store-", dir="/var/tmp")
    os.chmod(d, 0o755)
    return Path(d) / "store"


@pytest.fixture
def store():
    s = new_store()
    yield s
    shutil.rmtree(s.parent, ignore_errors=True)


@pytest.fixture
def server(store):
    s = Server(store)
    yield s
    s.stop()


def second_layer():
    return ocitool.tar_of_entries([
        ocitool.entry("opt/app/extra.txt", data=b"second layer\n"),
        ocitool.entry("etc/.wh.image-marker", data=b""),
    ])


def layer_dirs(store):
    d = store / "layers"
    return sorted(os.listdir(d)) if d.exists() else []


# ---------------------------------------------------------------- the three formats

def test_oci_layout_import_and_a_sandbox_of_it(server, store, base_layer, tmp_path):
    iid = ocitool.write_oci_layout(str(tmp_path / "layout"), [base_layer, second_layer()], name="test/app:1")
    img = server.result("image.import", {"path": str(tmp_path / "layout")})["image"]
    assert img["id"] == iid and img["names"] == ["test/app:1"] and img["source"] == "oci-layout"
    assert img["bash"] is True and img["newLayers"] == 2 and len(img["layers"]) == 2
    assert img["config"]["env"] == ["PATH=/usr/bin:/bin", "IMAGE_VAR=from-image"]
    assert img["config"]["startCommand"] == "'/bin/bash'" and img["config"]["cmd"] == ["/bin/bash"]
    assert len(layer_dirs(store)) == 2
    sid = server.result("sandbox.create", {"image": "test/app:1"})["sandboxId"]
    r = server.run(sid, "cat /opt/app/hello.txt /opt/app/extra.txt; echo $IMAGE_VAR; id -u; "
                        "test -e /etc/image-marker && echo marker-visible; test -e /etc/debian_version && echo host-etc; true")
    assert r["exitCode"] == 0, r
    assert r["stdout"] == "hello from the image\nsecond layer\nfrom-image\n1000\n", r
    # The image's tree is read-only; the sandbox's own directories are writable.
    r = server.run(sid, "touch /opt/app/x 2>&1; echo hi > /tmp/t && cat /tmp/t; echo ok > ~/h && cat ~/h; echo /*")
    assert "Read-only file system" in r["stdout"] and "hi\nok\n" in r["stdout"], r
    for d in ["usr", "opt", "tmp", "home", "proc", "dev", "etc"]:
        assert "/" + d in r["stdout"].split("\n")[-2].split(), r
    info = server.result("image.inspect", {"image": iid[7:19]})
    assert info["id"] == iid and info["sandboxes"] == 1


def test_oci_archive_and_docker_save_share_layers(server, store, base_layer, tmp_path):
    ocitool.write_oci_layout(str(tmp_path / "layout"), [base_layer], name="test/one:1")
    archive = ocitool.tar_dir(str(tmp_path / "layout"), str(tmp_path / "one.oci.tar"))
    one = server.result("image.import", {"path": archive})["image"]
    assert one["source"] == "oci-archive" and one["names"] == ["test/one:1"] and one["newLayers"] == 1
    # A docker save of an image with the same base layer and one more: the base is not read again.
    two_layers = [base_layer, second_layer()]
    did = ocitool.write_docker_archive(str(tmp_path / "two.tar"), two_layers, tags=("docker.io/library/two:latest",))
    two = server.result("image.import", {"path": str(tmp_path / "two.tar")})["image"]
    assert two["id"] == did and two["source"] == "docker-archive" and two["names"] == ["two:latest"]
    assert two["newLayers"] == 1
    assert two["layers"][0]["diffId"] == one["layers"][0]["diffId"]
    assert len(layer_dirs(store)) == 2
    # Again: nothing new at all.
    again = server.result("image.import", {"path": str(tmp_path / "two.tar")})["image"]
    assert again["newLayers"] == 0 and again["id"] == did
    listed = server.result("image.list")
    assert sorted(i["id"] for i in listed["images"]) == sorted([one["id"], did])
    assert listed["storeBytes"] == one["bytes"] + two["layers"][1]["bytes"]
    for name in ["two", "two:latest", "docker.io/library/two"]:
        sid = server.result("sandbox.create", {"image": name})["sandboxId"]
        assert server.run(sid, "cat /opt/app/extra.txt")["stdout"] == "second layer\n"
        server.result("sandbox.destroy", {"sandboxId": sid})


def test_import_by_name_and_name_moves(server, base_layer, tmp_path):
    ocitool.write_oci_layout(str(tmp_path / "a"), [base_layer], name="x/a:1")
    a = server.result("image.import", {"path": str(tmp_path / "a"), "name": "mine"})["image"]
    assert a["names"] == ["mine:latest"]
    cfg = ocitool.config_for([base_layer], env=["PATH=/usr/bin", "WHICH=b"])
    ocitool.write_oci_layout(str(tmp_path / "b"), [base_layer], config=cfg)
    b = server.result("image.import", {"path": str(tmp_path / "b"), "name": "mine:latest"})["image"]
    assert b["names"] == ["mine:latest"] and b["newLayers"] == 0
    imgs = {i["id"]: i for i in server.result("image.list")["images"]}
    assert imgs[a["id"]]["names"] == [] and imgs[b["id"]]["names"] == ["mine:latest"]
    sid = server.result("sandbox.create", {"image": "mine"})["sandboxId"]
    assert server.run(sid, "echo $WHICH")["stdout"] == "b\n"


# ---------------------------------------------------------------- sandboxes of an image

def test_two_sandboxes_share_the_image_not_their_writes(server, base_layer, tmp_path):
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer], name="t:1")
    server.result("image.import", {"path": str(tmp_path / "l")})
    a = server.result("sandbox.create", {"image": "t:1"})["sandboxId"]
    b = server.result("sandbox.create", {"image": "t:1"})["sandboxId"]
    assert server.run(a, "echo secret > /tmp/mine; echo x > ~/f")["exitCode"] == 0
    r = server.run(b, "ls -A /tmp ~; cat /opt/app/hello.txt")
    assert r["stdout"] == "/home/user:\n\n/tmp:\nhello from the image\n", r
    assert server.result("image.inspect", {"image": "t:1"})["sandboxes"] == 2


def test_an_image_sandbox_execs_the_images_bash(server, base_layer, tmp_path):
    # A host-rooted sandbox's shell goes on as the spawner's bash (test_zygote.py); an image's
    # has a bash of its own, which it must exec.
    from test_zygote import SO, maps_text, shell_of
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer], name="t:own")
    server.result("image.import", {"path": str(tmp_path / "l")})
    host = server.result("sandbox.create", {})["sandboxId"]
    host_shell = shell_of(server.proc.pid, host, int(server.run(host, "echo $$")["stdout"]))
    img = server.result("sandbox.create", {"image": "t:own"})["sandboxId"]
    assert server.run(img, "echo $0")["stdout"] == "bash\n"
    img_shell = shell_of(server.proc.pid, img, int(server.run(img, "echo $$")["stdout"]))
    assert "sbx-spawner.so" not in maps_text(img_shell)
    assert not os.path.samefile(f"/proc/{img_shell}/exe", "/bin/bash")
    if os.path.exists(SO):
        assert "sbx-spawner.so" in maps_text(host_shell)


def test_fork_snapshot_export_of_an_image_sandbox(server, base_layer, tmp_path):
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer, second_layer()], name="t:2")
    server.result("image.import", {"path": str(tmp_path / "l")})
    sid = server.result("sandbox.create", {"image": "t:2"})["sandboxId"]
    server.run(sid, "echo one > /tmp/state")
    fork = server.result("sandbox.fork", {"sandboxId": sid})["sandboxId"]
    r = server.run(fork, "cat /tmp/state /opt/app/extra.txt; echo $IMAGE_VAR")
    assert r["stdout"] == "one\nsecond layer\nfrom-image\n", r
    snap = server.result("snapshot.create", {"sandboxId": sid})["id"]
    server.run(sid, "echo two > /tmp/state")
    server.result("snapshot.restore", {"sandboxId": sid, "id": snap})
    assert server.run(sid, "cat /tmp/state")["stdout"] == "one\n"
    data = server.result("persistence.export", {"sandboxId": sid})["data"]
    other = server.result("sandbox.create", {"image": "t:2"})["sandboxId"]
    server.result("persistence.import", {"sandboxId": other, "data": data})
    assert server.run(other, "cat /tmp/state /opt/app/extra.txt")["stdout"] == "one\nsecond layer\n"
    assert server.result("image.inspect", {"image": "t:2"})["sandboxes"] == 3


def test_workdir_and_the_images_own_python(server, tmp_path):
    """A Python script runs with the image's interpreter and standard library (a module the
    host's Python has not), its sessions start in the image's WorkingDir."""
    root = ocitool.python_root(str(tmp_path / "py"))
    layer = ocitool.tar_of_dir(root)
    cfg = ocitool.config_for([layer], env=["PATH=/usr/local/bin:/usr/bin:/bin"], workdir="/opt/app")
    ocitool.write_oci_layout(str(tmp_path / "l"), [layer], name="py:1", config=cfg)
    server.result("image.import", {"path": str(tmp_path / "l")})
    sid = server.result("sandbox.create", {"image": "py:1"})["sandboxId"]
    script = "import imagemarker, sys\nprint(imagemarker.WHERE, sys.prefix, sys.executable)\n"
    server.result("files.write", {"sandboxId": sid, "path": "/tmp/s.py", "data": base64.b64encode(script.encode()).decode()})
    r = server.run(sid, "pwd; python3 /tmp/s.py")
    assert r["stdout"] == "/opt/app\nthe image /usr/local /usr/local/bin/python3\n", r
    host = subprocess.run(["/usr/bin/python3", "-c", "import imagemarker"], capture_output=True)
    assert host.returncode != 0
    # A WorkingDir the image does not have: sessions start at home.
    cfg = ocitool.config_for([layer], workdir="/nowhere")
    ocitool.write_oci_layout(str(tmp_path / "m"), [layer], name="py:2", config=cfg)
    server.result("image.import", {"path": str(tmp_path / "m")})
    sid = server.result("sandbox.create", {"image": "py:2"})["sandboxId"]
    assert server.run(sid, "pwd")["stdout"] == "/home/user\n"


def test_image_without_bash_is_refused_by_name(server, tmp_path):
    layer = ocitool.tar_of_entries([ocitool.entry("bin/sh", data=b"#!nothing\n", mode=0o755)])
    ocitool.write_oci_layout(str(tmp_path / "l"), [layer], name="nobash:1")
    img = server.result("image.import", {"path": str(tmp_path / "l")})["image"]
    assert img["bash"] is False
    e = server.error("sandbox.create", {"image": "nobash:1"})
    assert e["code"] == INVALID_PARAMS and "nobash:1 has no /bin/bash" in e["message"], e


def test_remove_refused_in_use_then_removed_with_its_own_layers(server, store, base_layer, tmp_path):
    ocitool.write_oci_layout(str(tmp_path / "a"), [base_layer], name="keep:1")
    ocitool.write_oci_layout(str(tmp_path / "b"), [base_layer, second_layer()], name="gone:1")
    server.result("image.import", {"path": str(tmp_path / "a")})
    gone = server.result("image.import", {"path": str(tmp_path / "b")})["image"]
    server.result("image.import", {"path": str(tmp_path / "b"), "name": "alias:1"})
    assert len(layer_dirs(store)) == 2
    sid = server.result("sandbox.create", {"image": "gone:1"})["sandboxId"]
    # A name off an image that keeps another: fine while in use.
    assert server.result("image.remove", {"image": "alias:1"}) == {"ok": True}
    e = server.error("image.remove", {"image": "gone:1"})
    assert "in use by 1 sandbox" in e["message"], e
    server.result("sandbox.destroy", {"sandboxId": sid})
    assert server.result("image.remove", {"image": gone["id"]}) == {"ok": True}
    assert [i["names"] for i in server.result("image.list")["images"]] == [["keep:1"]]
    # Its own layer is gone, the shared base stays.
    assert layer_dirs(store) == [gone["layers"][0]["diffId"][7:]]
    assert not (store / "images" / (gone["id"][7:] + ".json")).exists()
    assert os.listdir(store / "tmp") == []
    e = server.error("sandbox.create", {"image": "gone:1"})
    assert "no image 'gone:1'" in e["message"]


def test_the_store_outlives_the_daemon(store, base_layer, tmp_path):
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer], name="persist:1")
    s = Server(store)
    try:
        iid = s.result("image.import", {"path": str(tmp_path / "l")})["image"]["id"]
    finally:
        s.stop()
    # A layer no record names (an import a crash cut short) is set aside and swept.
    (store / "layers" / ("0" * 64)).mkdir()
    (store / "layers" / ("0" * 64) / "f").write_text("x")
    s = Server(store)
    try:
        assert [i["id"] for i in s.result("image.list")["images"]] == [iid]
        sid = s.result("sandbox.create", {"image": "persist:1"})["sandboxId"]
        assert s.run(sid, "cat /opt/app/hello.txt")["stdout"] == "hello from the image\n"
        assert wait_until(lambda: ("0" * 64) not in os.listdir(store / "layers") and os.listdir(store / "tmp") == [])
    finally:
        s.stop()


# ---------------------------------------------------------------- bad input

def test_store_out_of_the_sandboxes_reach_is_refused(tmp_path):
    s = Server(tmp_path / "store")
    try:
        assert s.proc.wait(15) == 1
        assert "out of the sandboxes' reach" in s.stderr()
    finally:
        s.stop()


def test_bad_input_is_said_and_loses_nothing(server, base_layer, tmp_path):
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer], name="ok:1")
    server.result("image.import", {"path": str(tmp_path / "l")})
    (tmp_path / "junk").write_bytes(b"not a tar at all" * 100)
    (tmp_path / "empty").mkdir()
    cases = [
        ({"path": "relative/path"}, "must be absolute"),
        ({"path": str(tmp_path / "missing")}, "cannot open"),
        ({"path": str(tmp_path / "junk")}, "no tar"),
        ({"path": str(tmp_path / "empty")}, "neither index.json"),
        ({"path": str(tmp_path / "l"), "name": "Bad Name"}, "may not be in a repository"),
    ]
    for params, words in cases:
        e = server.error("image.import", params)
        assert words in e["message"], (params, e)
    assert server.error("image.inspect", {"image": "nope"})["code"] == INVALID_PARAMS
    assert "no image 'nope'" in server.error("image.remove", {"image": "nope"})["message"]
    e = server.error("sandbox.create", {"image": "nope"})
    assert e["code"] == INVALID_PARAMS and "no image 'nope'" in e["message"]
    assert [i["names"] for i in server.result("image.list")["images"]] == [["ok:1"]]
    sid = server.result("sandbox.create", {"image": "ok:1"})["sandboxId"]
    assert server.run(sid, "echo fine")["stdout"] == "fine\n"


# ---------------------------------------------------------------- hostile images

def hostile(server, store, tmp_path, entries, words, name="evil:1", **kw):
    """Imports a layer of entries over the base; expects a refusal naming words (or, with
    words None, success); then checks nothing of it is listed or left in the store's tmp/."""
    layer = ocitool.tar_of_entries(entries)
    path = str(tmp_path / ("h-" + os.urandom(4).hex()))
    ocitool.write_oci_layout(path, [layer], name=name, **kw)
    if words is None:
        return server.result("image.import", {"path": path})["image"]
    e = server.error("image.import", {"path": path})
    assert words in e["message"], e
    assert all(name not in i["names"] for i in server.result("image.list")["images"])
    assert wait_until(lambda: os.listdir(store / "tmp") == [])
    return e


def test_hostile_paths_and_links(server, store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    hostile(server, store, tmp_path, [ocitool.entry("../../outside/x", data=b"x")], "climbs out of the layer")
    hostile(server, store, tmp_path, [ocitool.entry("a/../../x", data=b"x")], "climbs out of the layer")
    # A symlink to the host and a file written through it.
    hostile(server, store, tmp_path, [ocitool.entry("bin/bash", data=b"#!\n", mode=0o755),
                                      ocitool.entry("esc", "symlink", link=str(outside)),
                                      ocitool.entry("esc/x", data=b"x")], "a path through a symlink")
    hostile(server, store, tmp_path, [ocitool.entry("h", "hardlink", link="/etc/passwd")], "no file of this layer")
    hostile(server, store, tmp_path, [ocitool.entry("h", "hardlink", link="../../etc/passwd")], "out of the layer")
    assert os.listdir(outside) == []
    # Absolute names and links are the sandbox's: kept inside the layer.
    img = hostile(server, store, tmp_path, [ocitool.entry("/abs/file", data=b"abs\n"),
                                            ocitool.entry("link", "symlink", link="/etc/passwd")], None, name="abs:1")
    layer = store / "layers" / img["layers"][0]["diffId"][7:]
    assert (layer / "abs" / "file").read_text() == "abs\n"
    assert os.readlink(layer / "link") == "/etc/passwd"


def test_hostile_bits_are_taken_off(server, store, tmp_path):
    xattr = ocitool.entry("cap", data=b"x", mode=0o755)
    xattr[0].pax_headers = {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\xff\xff\xff\xff"}
    img = hostile(server, store, tmp_path, [
        ocitool.entry("suid", data=b"x", mode=0o4755), ocitool.entry("sgid", data=b"x", mode=0o2755),
        ocitool.entry("null", "char", devmajor=1, devminor=3), ocitool.entry("sda", "block", devmajor=8, devminor=0),
        ocitool.entry("fifo", "fifo"), xattr], None, name="bits:1")
    assert img["layers"][0]["dropped"] == 2 and img["layers"][0]["stripped"] == 2
    layer = store / "layers" / img["layers"][0]["diffId"][7:]
    assert os.stat(layer / "suid").st_mode & 0o7777 == 0o755
    assert os.stat(layer / "sgid").st_mode & 0o7777 == 0o755
    assert not (layer / "null").exists() and not (layer / "sda").exists()
    assert os.listxattr(layer / "cap") == []


def test_hostile_digests_and_nesting(server, store, base_layer, tmp_path):
    # A layer whose bytes are not what the config says.
    cfg = ocitool.config_for([base_layer], diff_ids=["sha256:" + "1" * 64])
    path = str(tmp_path / "bad-diff")
    ocitool.write_oci_layout(path, [base_layer], name="bad:1", config=cfg)
    assert "does not match its diff id" in server.error("image.import", {"path": path})["message"]
    # A blob changed after the manifest was written.
    path = str(tmp_path / "bad-blob")
    ocitool.write_oci_layout(path, [ocitool.tar_of_entries([ocitool.entry("f", data=b"a")])], name="bad:2")
    blobs = Path(path) / "blobs" / "sha256"
    manifest = json.loads((Path(path) / "index.json").read_text())["manifests"][0]["digest"][7:]
    mdoc = json.loads((blobs / manifest).read_text())
    layer_blob = blobs / mdoc["layers"][0]["digest"][7:]
    import gzip
    layer_blob.write_bytes(gzip.compress(ocitool.tar_of_entries([ocitool.entry("f", data=b"b")])))
    assert "does not match" in server.error("image.import", {"path": path})["message"]
    # Indexes nested past the bound.
    path = Path(tmp_path / "deep")
    ocitool.write_oci_layout(str(path), [base_layer], name="deep:1")
    desc = json.loads((path / "index.json").read_text())["manifests"][0]
    for _ in range(5):
        body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                           "manifests": [desc]}).encode()
        d = ocitool._blob(str(path), body)
        desc = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": "sha256:" + d, "size": len(body)}
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    assert "nested more than 4 deep" in server.error("image.import", {"path": str(path)})["message"]
    # Another architecture.
    cfg = ocitool.config_for([base_layer], arch="s390x")
    ocitool.write_oci_layout(str(tmp_path / "arch"), [base_layer], name="arch:1", config=cfg)
    assert "this machine runs" in server.error("image.import", {"path": str(tmp_path / "arch")})["message"]
    assert server.result("image.list")["images"] == []
    assert layer_dirs(store) == [] and os.listdir(store / "tmp") == []


def test_tar_bomb_past_the_store_room(tmp_path, store):
    s = Server(store, "--image-store-max", "2M")
    try:
        big = ocitool.tar_of_entries([ocitool.entry(f"f{i}", data=b"\0" * (512 * 1024)) for i in range(8)])
        ocitool.write_oci_layout(str(tmp_path / "bomb"), [big], name="bomb:1")
        e = s.error("image.import", {"path": str(tmp_path / "bomb")})
        assert "larger than the room left in the image store" in e["message"], e
        assert s.result("image.list")["images"] == [] and layer_dirs(store) == []
        assert wait_until(lambda: os.listdir(store / "tmp") == [])
    finally:
        s.stop()


# ---------------------------------------------------------------- the CLI

def test_cli_import_ls_create_rm(tmp_path, base_layer, store):
    sock = str(tmp_path / "s.sock")
    d = subprocess.Popen([SBX, "serve", "--socket", sock, "--image-store", str(store), "--pool", "0"],
                         stderr=subprocess.PIPE)
    SPAWNED.append(d.pid)
    try:
        assert wait_until(lambda: os.path.exists(sock), timeout=10)
        ocitool.write_docker_archive(str(tmp_path / "img.tar"), [base_layer], tags=("cli/img:7",))
        env = dict(os.environ, SBX_SOCKET=sock)

        def sbx(*args, input=None):
            return subprocess.run([SBX, *args], capture_output=True, env=env, input=input, timeout=60)
        with open(tmp_path / "img.tar", "rb") as f:
            cp = sbx("image", "import", "-", input=f.read())
        assert cp.returncode == 0 and cp.stdout.decode().split()[1:] == ["cli/img:7"], cp
        cp = sbx("image", "ls")
        assert cp.returncode == 0 and "cli/img:7" in cp.stdout.decode(), cp
        cp = sbx("create", "--image", "cli/img:7")
        assert cp.returncode == 0, cp
        sid = cp.stdout.decode().strip()
        cp = sbx("exec", sid, "--", "cat /opt/app/hello.txt")
        assert cp.stdout.decode() == "hello from the image\n", cp
        cp = sbx("image", "rm", "cli/img:7")
        assert cp.returncode == 1 and "in use" in cp.stderr.decode(), cp
        assert sbx("rm", sid).returncode == 0
        assert sbx("image", "rm", "cli/img:7").returncode == 0
        assert json.loads(sbx("image", "ls", "--json").stdout)["images"] == []
        cp = sbx("image", "build", "-t", "x:1", str(tmp_path))
        if not shutil.which("buildah") and not shutil.which("podman"):
            assert cp.returncode == 1 and "apt-get install buildah" in cp.stderr.decode(), cp
    finally:
        stop_daemon(d)


def test_a_pool_of_an_image(store, base_layer, tmp_path):
    """--pool IMAGE=N: ready sandboxes of the image, waited for until it is imported, handed to a
    create of it, made again when the name moves to another image."""
    s = Server(store, "--pool", "pooled:1=2")
    try:
        ocitool.write_oci_layout(str(tmp_path / "a"), [base_layer], name="pooled:1")
        a = s.result("image.import", {"path": str(tmp_path / "a")})["image"]
        assert wait_until(lambda: s.result("image.inspect", {"image": "pooled:1"})["sandboxes"] == 2, timeout=15)
        sid = s.result("sandbox.create", {"image": "pooled:1"})["sandboxId"]
        assert s.run(sid, "cat /opt/app/hello.txt")["stdout"] == "hello from the image\n"
        assert wait_until(lambda: s.result("image.inspect", {"image": a["id"]})["sandboxes"] == 3, timeout=15)
        # Removal is refused while the pool holds it.
        assert "in use" in s.error("image.remove", {"image": a["id"]})["message"]
        cfg = ocitool.config_for([base_layer], env=["PATH=/usr/bin", "V=2"])
        ocitool.write_oci_layout(str(tmp_path / "b"), [base_layer], name="pooled:1", config=cfg)
        s.result("image.import", {"path": str(tmp_path / "b")})
        sid2 = s.result("sandbox.create", {"image": "pooled:1"})["sandboxId"]
        assert s.run(sid2, "echo $V")["stdout"] == "2\n"
        assert wait_until(lambda: s.result("image.inspect", {"image": "pooled:1"})["sandboxes"] == 3, timeout=15)
        assert s.result("image.inspect", {"image": a["id"]})["sandboxes"] == 1
    finally:
        s.stop()


# ---------------------------------------------------------------- what an adversarial review found

def test_remove_beside_an_import_that_shares_its_layer(server, store, base_layer, tmp_path):
    """A removal asked while an import that reuses its layer runs: the layer stays."""
    ocitool.write_oci_layout(str(tmp_path / "a"), [base_layer], name="a:1")
    server.result("image.import", {"path": str(tmp_path / "a")})
    big = ocitool.tar_of_entries([ocitool.entry(f"blob{i}", data=os.urandom(4 << 20)) for i in range(8)])
    ocitool.write_oci_layout(str(tmp_path / "b"), [base_layer, big], name="b:1", gzip_layers=False)
    imp = server.peer.send("image.import", {"path": str(tmp_path / "b")})
    rm = server.peer.send("image.remove", {"image": "a:1"})
    assert "result" in server.peer.wait(imp, 60) and server.peer.wait(rm, 60)["result"] == {"ok": True}
    sid = server.result("sandbox.create", {"image": "b:1"})["sandboxId"]
    assert server.run(sid, "cat /opt/app/hello.txt")["stdout"] == "hello from the image\n"
    assert len(layer_dirs(store)) == 2


def test_layers_are_no_host_users(server, store, tmp_path):
    """Owners of a layer's files are the store's, never the tar's (host users could change what
    every sandbox of the image runs); group and other write bits are off."""
    img = hostile(server, store, tmp_path, [
        ocitool.entry("var/tmp", "dir", mode=0o1777), ocitool.entry("opt/run.sh", data=b"echo ok\n", mode=0o777, uid=65534, gid=65534),
        ocitool.entry("home/node", "dir", mode=0o775, uid=1000, gid=1000)], None, name="owners:1")
    layer = store / "layers" / img["layers"][0]["diffId"][7:]
    for rel, mode in [("var/tmp", 0o1755), ("opt/run.sh", 0o755), ("home/node", 0o755)]:
        st = os.lstat(layer / rel)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, mode), (rel, st)
    assert os.stat(store / "layers").st_mode & 0o777 == 0o711
    assert os.stat(store / "images").st_mode & 0o777 == 0o700


def test_image_bundle_linked_to_a_host_file_is_not_read(server, base_layer, tmp_path):
    secret = tmp_path / "host-only"
    secret.write_text("HOST-ONLY-CONTENT\n")
    os.chmod(tmp_path, 0o755)
    layer = ocitool.tar_of_entries([ocitool.entry("etc/ssl/certs/ca-certificates.crt", "symlink", link=str(secret))])
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer, layer], name="bundle:1")
    server.result("image.import", {"path": str(tmp_path / "l")})
    sid = server.result("sandbox.create", {"image": "bundle:1", "network": "allowlist", "networkAllow": [],
                                           "secrets": {"T": {"value": "abcdefghij", "hosts": ["x.example"]}}})["sandboxId"]
    r = server.run(sid, "cat /etc/sbx/ca-certificates.crt")
    assert "HOST-ONLY" not in r["stdout"] and "BEGIN CERTIFICATE" in r["stdout"], r


def test_fifos_do_not_hold_the_store(server, base_layer, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    e = server.error("image.import", {"path": str(fifo)}, timeout=20)
    assert "neither a directory nor a file" in e["message"], e
    # An archive whose index.json is a FIFO.
    archive = tmp_path / "fifo.tar"
    with tarfile.open(archive, "w") as t:
        info = tarfile.TarInfo("index.json")
        info.type = tarfile.FIFOTYPE
        t.addfile(info)
    e = server.error("image.import", {"path": str(archive)}, timeout=20)
    assert "index.json" in e["message"] and "not a file" in e["message"], e
    ocitool.write_oci_layout(str(tmp_path / "ok"), [base_layer], name="after:1")
    assert server.result("image.import", {"path": str(tmp_path / "ok")}, timeout=20)["image"]["names"] == ["after:1"]


def test_compression_bombs(store, tmp_path):
    import gzip
    s = Server(store, "--image-store-max", "2M")
    try:
        zeros = gzip.compress(b"\0" * (64 << 20))
        twice = gzip.compress(zeros)
        for data, words in [(zeros, "larger than the room left"), (twice, "compressed more than once")]:
            path = tmp_path / ("l-" + os.urandom(3).hex())
            blobs = path / "blobs" / "sha256"
            blobs.mkdir(parents=True)
            d = ocitool.sha(data)
            (blobs / d).write_bytes(data)
            cfg = json.dumps(ocitool.config_for([], diff_ids=["sha256:" + "2" * 64])).encode()
            (blobs / ocitool.sha(cfg)).write_bytes(cfg)
            man = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:" + ocitool.sha(cfg), "size": len(cfg)},
                              "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                          "digest": "sha256:" + d, "size": len(data)}]}).encode()
            (blobs / ocitool.sha(man)).write_bytes(man)
            (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + ocitool.sha(man),
                 "size": len(man)}]}))
            e = s.error("image.import", {"path": str(path)}, timeout=60)
            assert words in e["message"], e
        assert layer_dirs(store) == []
    finally:
        s.stop()


def test_failed_import_leaves_no_layer(server, store, base_layer, tmp_path):
    bad = ocitool.tar_of_entries([ocitool.entry("f", data=b"x")])
    cfg = ocitool.config_for([base_layer, bad], diff_ids=["sha256:" + ocitool.sha(base_layer), "sha256:" + "3" * 64])
    ocitool.write_oci_layout(str(tmp_path / "bad"), [base_layer, bad], name="half:1", config=cfg)
    assert "does not match its diff id" in server.error("image.import", {"path": str(tmp_path / "bad")})["message"]
    assert wait_until(lambda: layer_dirs(store) == [])
    ocitool.write_oci_layout(str(tmp_path / "good"), [base_layer], name="whole:1")
    assert server.result("image.import", {"path": str(tmp_path / "good")})["image"]["newLayers"] == 1


def test_long_lists_and_repeated_layers(server, base_layer, tmp_path):
    extra = second_layer()
    cfg = ocitool.config_for([base_layer, extra, base_layer])
    cfg["config"]["Cmd"] = ["x"] * 5000
    cfg["config"]["Entrypoint"] = ["/bin/echo", "it's"]
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer, extra, base_layer], name="rep:1", config=cfg)
    img = server.result("image.import", {"path": str(tmp_path / "l")})["image"]
    assert img["config"]["cmd"] is None and img["newLayers"] == 2
    assert img["config"]["startCommand"] == "'/bin/echo' 'it'\\''s'", img["config"]
    sid0 = server.result("sandbox.create", {"image": "rep:1"})["sandboxId"]
    assert server.run(sid0, img["config"]["startCommand"])["stdout"] == "it's\n"
    assert [l["diffId"] for l in img["layers"]] == ["sha256:" + ocitool.sha(x) for x in (base_layer, extra, base_layer)]
    assert img["bytes"] == img["layers"][0]["bytes"] + img["layers"][1]["bytes"]
    sid = server.result("sandbox.create", {"image": "rep:1"})["sandboxId"]
    # The top copy of the base brings back what the middle layer took away.
    assert server.run(sid, "cat /etc/image-marker /opt/app/extra.txt")["stdout"] == "sbx-test-image\nsecond layer\n"


def sandbox_memory(sid):
    """Bytes charged to a sandbox's memory cgroup (v2 memory.current, else v1
    memory.usage_in_bytes), found by its id in the hierarchies; None when there is none."""
    roots = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if parts[2] == "cgroup2" or (parts[2] == "cgroup" and "memory" in parts[3].split(",")):
                roots.append(parts[1])
    for root in roots:
        for dirpath, dirnames, _ in os.walk(root):
            if os.path.basename(dirpath) == sid:
                for name in ("memory.current", "memory.usage_in_bytes"):
                    if os.path.exists(os.path.join(dirpath, name)):
                        return int(open(os.path.join(dirpath, name)).read())
                dirnames[:] = []
    return None


def test_two_sandboxes_share_the_layers_pages(server, store, base_layer, tmp_path):
    """A file of the image read in one sandbox is charged to it once; the same file read in a
    second sandbox adds nothing there: both read the store's pages."""
    big = ocitool.tar_of_entries([ocitool.entry("opt/big.bin", data=os.urandom(64 << 20))])
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer, big], name="big:1", gzip_layers=False)
    img = server.result("image.import", {"path": str(tmp_path / "l")})["image"]
    # What the import wrote is in the page cache, charged to the daemon: out of it first.
    layer_file = store / "layers" / img["layers"][1]["diffId"][7:] / "opt" / "big.bin"
    fd = os.open(layer_file, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    a = server.result("sandbox.create", {"image": "big:1"})["sandboxId"]
    b = server.result("sandbox.create", {"image": "big:1"})["sandboxId"]
    server.run(a, "true")
    server.run(b, "true")
    if sandbox_memory(a) is None:
        pytest.skip("no memory cgroup of the sandbox found")
    a0, b0 = sandbox_memory(a), sandbox_memory(b)
    assert server.run(a, "cat /opt/big.bin > /dev/null")["exitCode"] == 0
    a1 = sandbox_memory(a)
    assert server.run(b, "cat /opt/big.bin > /dev/null")["exitCode"] == 0
    b1 = sandbox_memory(b)
    assert a1 - a0 >= 48 << 20, (a0, a1)
    assert b1 - b0 < 16 << 20, (b0, b1)


def test_import_says_where_it_is(server, base_layer, tmp_path):
    big = ocitool.tar_of_entries([ocitool.entry(f"opt/b{i}", data=os.urandom(8 << 20)) for i in range(5)])
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer, big], name="prog:1", gzip_layers=False)

    def progress_of(req):
        with server.peer.cond:
            return [(n["params"]["layer"], n["params"]["layers"], n["params"]["bytes"], n["params"]["done"],
                     n["params"]["have"]) for n in server.peer.notes
                    if n.get("method") == "image.progress" and n["params"]["requestId"] == req]

    req = server.peer.send("image.import", {"path": str(tmp_path / "l")})
    img = server.peer.wait(req, 60)["result"]["image"]
    notes = progress_of(req)
    assert notes[0] == (1, 2, 0, False, False) and notes[-1] == (2, 2, img["layers"][1]["bytes"], True, False), notes
    assert (1, 2, img["layers"][0]["bytes"], True, False) in notes
    # 40 MiB in the second layer: it said so on the way, bytes growing.
    middle = [n[2] for n in notes if n[0] == 2 and not n[3]]
    assert len(middle) >= 3 and middle == sorted(middle) and middle[-1] >= 32 << 20, notes
    req = server.peer.send("image.import", {"path": str(tmp_path / "l"), "name": "prog:2"})
    server.peer.wait(req, 60)
    assert [n for n in progress_of(req) if n[3]] == [(1, 2, img["layers"][0]["bytes"], True, True),
                                                    (2, 2, img["layers"][1]["bytes"], True, True)]


def podman_works():
    if not shutil.which("podman"):
        return False
    return subprocess.run(["podman", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.skipif(not podman_works(), reason="podman is not installed or does not work here")
def test_import_from_podman_and_build_through_it(tmp_path, store, base_layer):
    """--from podman takes an image of podman's store through `podman save`; `sbx image build`
    hands a Dockerfile to podman (or buildah) and imports what it made."""
    sock = str(tmp_path / "s.sock")
    d = subprocess.Popen([SBX, "serve", "--socket", sock, "--image-store", str(store), "--pool", "0"],
                         stderr=subprocess.DEVNULL)
    SPAWNED.append(d.pid)
    tag = "localhost/sbx-test/pod:" + os.urandom(3).hex()
    try:
        assert wait_until(lambda: os.path.exists(sock), timeout=10)
        env = dict(os.environ, SBX_SOCKET=sock)
        ocitool.write_docker_archive(str(tmp_path / "p.tar"), [base_layer], tags=(tag,))
        assert subprocess.run(["podman", "load", "-i", str(tmp_path / "p.tar")], capture_output=True).returncode == 0
        cp = subprocess.run([SBX, "image", "import", "--from", "podman", tag], capture_output=True, env=env, timeout=120)
        assert cp.returncode == 0 and cp.stdout.decode().split()[1] == tag[len("localhost/"):], cp
        ctx = tmp_path / "ctx"
        ctx.mkdir()
        (ctx / "Dockerfile").write_text("FROM " + tag + "\nCOPY note.txt /opt/app/note.txt\n")
        (ctx / "note.txt").write_text("built by podman\n")
        cp = subprocess.run([SBX, "image", "build", "-t", "sbx-test/built:1", str(ctx)], capture_output=True, env=env,
                            timeout=300)
        assert cp.returncode == 0, cp
        cp = subprocess.run([SBX, "create", "--image", "sbx-test/built:1"], capture_output=True, env=env, timeout=60)
        sid = cp.stdout.decode().strip()
        cp = subprocess.run([SBX, "exec", sid, "--", "cat /opt/app/note.txt /opt/app/hello.txt"], capture_output=True,
                            env=env, timeout=60)
        assert cp.stdout.decode() == "built by podman\nhello from the image\n", cp
    finally:
        stop_daemon(d)
        subprocess.run(["podman", "rmi", "-f", tag, "localhost/sbx-test/built:1"], capture_output=True, timeout=120)


def test_a_bash_that_cannot_start_is_said_by_image(server, tmp_path):
    """An image whose /bin/bash cannot run here (its libraries missing, as a musl bash would
    miss glibc): runs are answered in words naming the image, not left to time out."""
    layer = ocitool.tar_of_entries([ocitool.entry("bin", "symlink", link="usr/bin"),
                                    ocitool.entry("usr/bin/bash", data=open("/bin/bash", "rb").read(), mode=0o755)])
    ocitool.write_oci_layout(str(tmp_path / "l"), [layer], name="badbash:1")
    assert server.result("image.import", {"path": str(tmp_path / "l")})["image"]["bash"] is True
    sid = server.result("sandbox.create", {"image": "badbash:1"})["sandboxId"]
    r = server.run(sid, "echo hi")
    assert r["exitCode"] == 127 and "image badbash:1 has a /bin/bash that cannot run here" in r["stderr"], r


def test_sbx_run_with_an_image(server, store, base_layer, tmp_path):
    """`sbx run --image` (no daemon of its own) reads the store a daemon has open."""
    ocitool.write_oci_layout(str(tmp_path / "l"), [base_layer, second_layer()], name="run:1")
    server.result("image.import", {"path": str(tmp_path / "l")})
    cp = subprocess.run([SBX, "run", "--image-store", str(store), "--image", "run:1", "--",
                         "cat /opt/app/extra.txt; echo $IMAGE_VAR"], capture_output=True, timeout=60)
    assert cp.returncode == 0 and cp.stdout == b"second layer\nfrom-image\n", cp
    cp = subprocess.run([SBX, "run", "--image-store", str(store), "--image", "none:1", "--", "true"],
                        capture_output=True, timeout=60)
    assert cp.returncode == 1 and b"no image 'none:1'" in cp.stderr, cp
