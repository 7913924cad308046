"""OCI images through the Python SDK, threaded and asyncio, against a real socket daemon with
its own store: images.import_image of an OCI layout made offline by ocitool.py, a sandbox
whose root is that image (connect(image=...), sandboxes.create(image=...)), images.list and
inspect, remove refused while a sandbox of the image lives and done once it is gone; the
image option of a spawned server's create reaches the daemon."""
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python"))

from sbx import INVALID_PARAMS, AsyncSandbox, Sandbox, SbxError  # noqa: E402

import ocitool  # noqa: E402
from conftest import SBX_BIN, SPAWNED, wait_until  # noqa: E402

HELLO = "hello from the image\n"


class Daemon:
    """`sbx serve --socket PATH --image-store DIR --pool 0`, its store under /var/tmp (the
    store and its parents must be o+x for sandboxes to reach it)."""

    def __init__(self):
        self.top = tempfile.mkdtemp(prefix="sbx-sdk-images-", dir="/var/tmp")
        os.chmod(self.top, 0o755)
        self.store = os.path.join(self.top, "store")
        self.path = os.path.join(self.top, "sbx.sock")
        self.proc = subprocess.Popen([SBX_BIN, "serve", "--socket", self.path, "--image-store", self.store,
                                      "--pool", "0"], stderr=subprocess.PIPE)
        SPAWNED.append(self.proc.pid)
        assert wait_until(lambda: os.path.exists(self.path) or self.proc.poll() is not None, timeout=10)
        assert self.proc.poll() is None, self.proc.stderr.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.top, ignore_errors=True)


@pytest.fixture
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """An OCI layout of the host's bash and tools, /opt/app/hello.txt in it; (path, image id)."""
    base = tmp_path_factory.mktemp("sdk-image")
    root = ocitool.host_root(str(base / "root"))
    path = base / "layout"
    image_id = ocitool.write_oci_layout(str(path), [ocitool.tar_of_dir(root)])
    return path, image_id


def refused(fn, code=None):
    with pytest.raises(SbxError) as ei:
        fn()
    if code is not None:
        assert ei.value.code == code, ei.value
    return ei.value


def test_images_threaded(daemon, layout):
    path, image_id = layout
    admin = Sandbox.connect(daemon.path)
    try:
        assert admin.images.list() == []
        img = admin.images.import_image(path, name="sdk/app:1")  # a Path is taken
        assert img["id"] == image_id and img["names"] == ["sdk/app:1"], img
        assert img["bash"] is True and img["newLayers"] == 1 and img["sandboxes"] == 0, img
        assert img["config"]["env"] == ["PATH=/usr/bin:/bin", "IMAGE_VAR=from-image"], img
        assert [i["id"] for i in admin.images.list()] == [image_id]

        sb = Sandbox.connect(daemon.path, image="sdk/app:1")
        try:
            r = sb.commands.run("cat /opt/app/hello.txt")
            assert (r.exit_code, r.stdout) == (0, HELLO), r
            assert sb.commands.run("echo $IMAGE_VAR").stdout == "from-image\n"
            child = admin.sandboxes.create(image=image_id[7:19], label="of-the-image")
            assert child.commands.run("cat /opt/app/hello.txt").stdout == HELLO
            # The admin's own sandbox is the host's root, not the image's.
            assert admin.commands.run("test -e /opt/app/hello.txt || echo absent").stdout == "absent\n"
            info = admin.images.inspect(image_id[7:19])
            assert info["id"] == image_id and info["sandboxes"] == 2, info
            assert admin.images.inspect("sdk/app:1")["id"] == image_id
            refused(lambda: admin.images.remove(image_id))
            child.destroy()
            assert admin.images.inspect(image_id)["sandboxes"] == 1
            refused(lambda: admin.images.remove("sdk/app:1"))
            assert [i["id"] for i in admin.images.list()] == [image_id]
        finally:
            sb.kill()
        # The connection's end destroys its sandbox; then the image may go.
        assert wait_until(lambda: admin.images.inspect(image_id)["sandboxes"] == 0, timeout=10)
        admin.images.remove(image_id)
        assert admin.images.list() == []
        refused(lambda: admin.images.inspect(image_id), INVALID_PARAMS)
        e = refused(lambda: admin.sandboxes.create(image="sdk/app:1"), INVALID_PARAMS)
        assert "sdk/app:1" in e.message, e
    finally:
        admin.kill()


def test_images_refusals_threaded(daemon, tmp_path):
    with Sandbox.connect(daemon.path) as sb:
        e = refused(lambda: sb.images.import_image(tmp_path / "nothing-here"))
        assert "nothing-here" in e.message, e
        refused(lambda: sb.images.inspect("no/such:1"), INVALID_PARAMS)
        refused(lambda: sb.images.remove("no/such:1"))
        assert sb.images.list() == []
    # A spawned server's create takes the image too (a name no store has: refused, by name).
    e = refused(lambda: Sandbox(binary=SBX_BIN, image="sdk-test-nosuch:1"), INVALID_PARAMS)
    assert "sdk-test-nosuch:1" in e.message, e
    e = refused(lambda: Sandbox.create(binary=SBX_BIN, image="sdk-test-nosuch:2"), INVALID_PARAMS)
    assert "sdk-test-nosuch:2" in e.message, e


def test_images_async(daemon, layout):
    path, image_id = layout

    async def main():
        admin = await AsyncSandbox.connect(daemon.path)
        try:
            assert await admin.images.list() == []
            img = await admin.images.import_image(str(path), name="sdk/async:2")
            assert img["id"] == image_id and img["names"] == ["sdk/async:2"], img
            sb = await AsyncSandbox.connect(daemon.path, image="sdk/async:2")
            try:
                r = await sb.commands.run("cat /opt/app/hello.txt")
                assert (r.exit_code, r.stdout) == (0, HELLO), r
                child = await admin.sandboxes.create(image=image_id)
                assert (await child.commands.run("echo $IMAGE_VAR")).stdout == "from-image\n"
                assert [i["id"] for i in await admin.images.list()] == [image_id]
                assert (await admin.images.inspect("sdk/async:2"))["sandboxes"] == 2
                with pytest.raises(SbxError):
                    await admin.images.remove(image_id)
                await child.destroy()
            finally:
                await sb.kill()
            for _ in range(200):
                if (await admin.images.inspect(image_id))["sandboxes"] == 0:
                    break
                await asyncio.sleep(0.05)
            await admin.images.remove(image_id)
            assert await admin.images.list() == []
            with pytest.raises(SbxError) as ei:
                await admin.images.inspect(image_id)
            assert ei.value.code == INVALID_PARAMS
        finally:
            await admin.kill()
        with pytest.raises(SbxError) as ei:
            await AsyncSandbox.create(binary=SBX_BIN, image="sdk-test-nosuch:3")
        assert ei.value.code == INVALID_PARAMS and "sdk-test-nosuch:3" in ei.value.message

    asyncio.run(asyncio.wait_for(main(), 120))
