"""The SDK's PEP 517 build backend: standard library only, so `pip install sdk/python` needs
nothing from a package index (it works offline, build isolation included) and writes nothing
into the source tree (no build/, no *.egg-info): the wheel is zipped straight from sbx/ into
the directory pip names.

It builds pure-Python wheels (py3-none-any), editable wheels (PEP 660: a .pth file naming
this directory) and sdists, from the [project] table of pyproject.toml (tomllib: Python
3.11+; older ones get tomli through build-system.requires).
"""
import base64
import hashlib
import io
import os
import tarfile
import time
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Fixed timestamps (SOURCE_DATE_EPOCH if set): the same tree gives the same wheel.
EPOCH = max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        meta = tomllib.load(f)["project"]
    packages = [meta["name"]]
    return meta, packages


def _dist_name(meta):
    return meta["name"].replace("-", "_")


def _metadata(meta):
    lines = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {meta['version']}"]
    if meta.get("description"):
        lines.append(f"Summary: {meta['description']}")
    if meta.get("requires-python"):
        lines.append(f"Requires-Python: {meta['requires-python']}")
    lic = meta.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append(f"License: {lic['text']}")
    for c in meta.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    for d in meta.get("dependencies", []):
        lines.append(f"Requires-Dist: {d}")
    body = ""
    readme = meta.get("readme")
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _package_files(packages):
    """(path in the wheel, path on disk) of every file of the packages, sorted."""
    out = []
    for pkg in packages:
        top = os.path.join(ROOT, pkg)
        for d, dirs, files in os.walk(top):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                disk = os.path.join(d, name)
                out.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    return out


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, time.gmtime(EPOCH)[:6])
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self, record_name):
        self.record.append(f"{record_name},,")
        info = zipfile.ZipInfo(record_name, time.gmtime(EPOCH)[:6])
        info.external_attr = (0o100000 | 0o644) << 16
        self.zip.writestr(info, "\n".join(self.record) + "\n", zipfile.ZIP_DEFLATED)
        self.zip.close()


def _build(wheel_directory, editable):
    meta, packages = _project()
    dist = f"{_dist_name(meta)}-{meta['version']}"
    name = f"{dist}-py3-none-any.whl"
    info = f"{dist}.dist-info"
    w = _Wheel(os.path.join(wheel_directory, name))
    try:
        if editable:
            w.add(f"_{_dist_name(meta)}_editable.pth", (ROOT + "\n").encode())
        else:
            for arc, disk in _package_files(packages):
                with open(disk, "rb") as f:
                    w.add(arc, f.read())
        w.add(f"{info}/METADATA", _metadata(meta))
        w.add(f"{info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: {__name__}\n"
                                "Root-Is-Purelib: true\nTag: py3-none-any\n").encode())
    finally:
        w.close(f"{info}/RECORD")
    return name


# ---- PEP 517 / PEP 660 hooks


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, editable=False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    meta, packages = _project()
    dist = f"{_dist_name(meta)}-{meta['version']}"
    name = f"{dist}.tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml"))]
    if meta.get("readme"):
        files.append((meta["readme"], os.path.join(ROOT, meta["readme"])))
    files.append(("_backend/sbx_backend.py", os.path.abspath(__file__)))
    files += _package_files(packages)

    def add(tar, arcname, data):
        ti = tarfile.TarInfo(f"{dist}/{arcname}")
        ti.size, ti.mtime, ti.mode = len(data), EPOCH, 0o644
        tar.addfile(ti, io.BytesIO(data))

    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "PKG-INFO", _metadata(meta))
        for arc, disk in files:
            with open(disk, "rb") as f:
                add(tar, arc, f.read())
    return name
