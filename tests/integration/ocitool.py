"""Images made offline for the image tests and benchmarks: a root of the host's own bash and
tools (their libraries found by ldd), written as an OCI layout, an OCI archive or a
`docker save` tar, with layers of any content (hostile ones included). No registry, no
docker: the formats are plain tar and JSON."""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

HOST_TOOLS = ["/bin/bash", "/bin/cat", "/bin/ls", "/bin/echo", "/bin/sh", "/usr/bin/env", "/usr/bin/id",
              "/usr/bin/stat", "/bin/rm", "/bin/mkdir", "/usr/bin/head", "/bin/sleep", "/usr/bin/touch"]


def _libs(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        for p in parts:
            if p.startswith("/") and os.path.exists(p):
                libs.append(p)
    return libs


def host_root(dest, tools=HOST_TOOLS, marker="sbx-test-image"):
    """A merged-/usr root with the host's tools and their libraries, and a marker in
    /etc/image-marker and /opt/app/hello.txt."""
    os.makedirs(dest, exist_ok=True)
    for d in ["usr/bin", "usr/lib", "usr/lib64", "etc", "opt/app", "tmp", "var/lib"]:
        os.makedirs(os.path.join(dest, d), exist_ok=True)
    for link, target in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/bin")]:
        p = os.path.join(dest, link)
        if not os.path.lexists(p):
            os.symlink(target, p)
    files = set()
    for t in tools:
        real = os.path.realpath(t)
        if os.path.exists(real):
            files.add((real, "usr/bin/" + os.path.basename(t)))
            for lib in _libs(real):
                files.add((lib, None))
    for src, dst in sorted(files, key=lambda x: x[0]):
        if dst is None:
            rel = os.path.relpath(src, "/")
            if rel.startswith("lib/") or rel.startswith("lib64/"):
                rel = "usr/" + rel
            dst = rel
        out = os.path.join(dest, dst)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copy2(os.path.realpath(src), out)
    with open(os.path.join(dest, "etc/image-marker"), "w") as f:
        f.write(marker + "\n")
    with open(os.path.join(dest, "opt/app/hello.txt"), "w") as f:
        f.write("hello from the image\n")
    return dest


def tar_of_dir(root):
    """An uncompressed tar (bytes) of root's contents, paths relative, owners root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                info = t.gettarinfo(full, arcname=rel)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                if info.isfile():
                    with open(full, "rb") as f:
                        t.addfile(info, f)
                else:
                    t.addfile(info)
    return buf.getvalue()


def tar_of_entries(entries):
    """An uncompressed tar of (TarInfo, data or None) pairs: for hostile layers."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                t.addfile(info)
    return buf.getvalue()


def entry(name, kind="file", data=b"", mode=0o644, link="", uid=0, gid=0, devmajor=0, devminor=0):
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.uid, info.gid = uid, gid
    info.mtime = 1700000000
    types = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
             "hardlink": tarfile.LNKTYPE, "char": tarfile.CHRTYPE, "block": tarfile.BLKTYPE,
             "fifo": tarfile.FIFOTYPE}
    info.type = types[kind]
    info.linkname = link
    info.devmajor, info.devminor = devmajor, devminor
    return (info, data if kind == "file" else None)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def config_for(layers, env=None, workdir="", user="", arch="amd64", diff_ids=None):
    return {
        "architecture": arch, "os": "linux", "created": "2026-11-28T00:00:00Z",
        "config": {"Env": env if env is not None else ["PATH=/usr/bin:/bin", "IMAGE_VAR=from-image"],
                   "WorkingDir": workdir, "User": user, "Cmd": ["/bin/bash"]},
        "rootfs": {"type": "layers",
                   "diff_ids": diff_ids if diff_ids is not None else ["sha256:" + sha(l) for l in layers]},
    }


def _blob(layout, data):
    d = sha(data)
    path = os.path.join(layout, "blobs", "sha256", d)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return d


def write_oci_layout(layout, layers, name=None, config=None, gzip_layers=True, manifest_hook=None):
    """layers: uncompressed tars, bottom first. Returns the config's digest (the image id)."""
    os.makedirs(layout, exist_ok=True)
    cfg = config or config_for(layers)
    cfg_bytes = json.dumps(cfg).encode()
    cfg_d = _blob(layout, cfg_bytes)
    descs = []
    for l in layers:
        data = gzip.compress(l, mtime=0) if gzip_layers else l
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzip_layers else ""),
                      "digest": "sha256:" + _blob(layout, data), "size": len(data)})
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": "sha256:" + cfg_d, "size": len(cfg_bytes)},
                "layers": descs}
    if manifest_hook:
        manifest_hook(manifest)
    mb = json.dumps(manifest).encode()
    md = _blob(layout, mb)
    desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + md, "size": len(mb)}
    if name:
        desc["annotations"] = {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.split(":")[-1]}
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [desc]}, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return "sha256:" + cfg_d


def tar_dir(src, out):
    """A tar file of a directory's contents (an OCI archive of a layout)."""
    with tarfile.open(out, "w") as t:
        for name in sorted(os.listdir(src)):
            t.add(os.path.join(src, name), arcname=name)
    return out


def write_docker_archive(out, layers, tags=("test/image:latest",), config=None):
    """A `docker save` tar: manifest.json, the config as <hex>.json, each layer <hex>/layer.tar."""
    cfg = config or config_for(layers)
    cfg_bytes = json.dumps(cfg).encode()
    cfg_d = sha(cfg_bytes)
    with tarfile.open(out, "w") as t:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1700000000
            t.addfile(info, io.BytesIO(data))
        paths = []
        for l in layers:
            p = sha(l) + "/layer.tar"
            add(p, l)
            paths.append(p)
        add(cfg_d + ".json", cfg_bytes)
        add("manifest.json", json.dumps([{"Config": cfg_d + ".json", "RepoTags": list(tags), "Layers": paths}]).encode())
    return "sha256:" + cfg_d


def python_root(dest, extra_module="imagemarker"):
    """host_root() plus an interpreter of the image's own at /usr/local/bin/python3: a copy of
    the host's CPython with the standard modules it needs under /usr/local/lib (its prefix,
    found from where the binary is), and a module the host does not have."""
    host_root(dest)
    ver = "python%d.%d" % tuple(int(x) for x in subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True, text=True).stdout.split())
    binary = os.path.realpath("/usr/bin/python3")
    os.makedirs(os.path.join(dest, "usr/local/bin"), exist_ok=True)
    shutil.copy2(binary, os.path.join(dest, "usr/local/bin/python3"))
    for lib in _libs(binary):
        rel = os.path.relpath(lib, "/")
        if rel.startswith("lib/") or rel.startswith("lib64/"):
            rel = "usr/" + rel
        out = os.path.join(dest, rel)
        if not os.path.exists(out):
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copy2(os.path.realpath(lib), out)
    stdlib = "/usr/lib/" + ver
    libdir = os.path.join(dest, "usr/local/lib", ver)
    skip = shutil.ignore_patterns("test", "tests", "site-packages", "dist-packages", "idlelib", "tkinter",
                                  "lib2to3", "ensurepip", "pydoc_data", "__pycache__", "config-*", "turtledemo")
    shutil.copytree(stdlib, libdir, ignore=skip, symlinks=True, dirs_exist_ok=True)
    with open(os.path.join(libdir, extra_module + ".py"), "w") as f:
        f.write("WHERE = 'the image'\n")
    return dest
