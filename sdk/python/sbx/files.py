"""``sandbox.files``: the sandbox's filesystem from outside (E2B's method names).

Paths are as the sandbox sees them; relative ones start at /home/user. The server jails every
path in the sandbox's root and acts with the sandbox user's permissions, so read-only system
directories raise ``SbxError(1, "EROFS: ...")`` and the sandbox's size limits apply.
"""
from __future__ import annotations

import base64
import contextlib
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from ._client import Client, SbxError

__all__ = ["Files", "EntryInfo"]

#: Bytes moved per request: the server reads at most 4 MiB per call, and a base64 request
#: must stay under the 8 MiB line limit.
CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class EntryInfo:
    """One file system entry."""

    name: str
    path: str
    type: str  #: "file", "dir", "symlink" or "other"
    size: int
    mode: int
    mtime: str  #: ISO 8601, UTC
    target: Optional[str] = None  #: where a symlink points

    @classmethod
    def _from(cls, d: Dict[str, Any]) -> "EntryInfo":
        return cls(name=str(d["name"]), path=str(d["path"]), type=str(d["type"]), size=int(d["size"]),
                   mode=int(d["mode"]), mtime=str(d["mtime"]), target=d.get("target"))


class Files:
    """``sandbox.files``: read, write, list, stat, make_dir, remove, rename, exists."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def _call(self, method: str, **params: Any) -> Dict[str, Any]:
        params["sandboxId"] = self._sandbox_id
        result: Dict[str, Any] = self._client.request(method, params)
        return result

    def read_bytes(self, path: str) -> bytes:
        """The whole file, fetched in 4 MiB chunks."""
        out = bytearray()
        while True:
            r = self._call("files.read", path=path, offset=len(out), length=CHUNK)
            out += base64.b64decode(r["data"])
            if len(out) >= int(r["size"]) or not r["length"]:
                return bytes(out)

    def read(self, path: str, *, format: str = "text") -> Union[str, bytes]:
        """The file's content: ``format="text"`` (UTF-8, errors replaced) or ``"bytes"``."""
        data = self.read_bytes(path)
        return data if format == "bytes" else data.decode("utf-8", errors="replace")

    def write(self, path: str, data: Union[str, bytes], *, mode: Optional[int] = None) -> None:
        """Writes a file, creating missing parent directories, all or nothing: no reader ever
        sees half of it, and a write that fails leaves no file and no temp file behind, and
        the sandbox's space as it was. A full filesystem raises ``SbxError(1, "ENOSPC: the
        sandbox's filesystem is full (its limit, fsLimitBytes, is ...): PATH ...")``. Data
        over 4 MiB is sent in 4 MiB parts as an upload, which the server renames into place
        with the last part."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        first: Dict[str, Any] = {"path": path, "data": base64.b64encode(raw[:CHUNK]).decode()}
        if mode is not None:
            first["mode"] = mode
        if len(raw) <= CHUNK:
            self._call("files.write", **first)
            return
        upload_id = self._call("files.write", upload="begin", **first)["uploadId"]
        try:
            for off in range(CHUNK, len(raw), CHUNK):
                step = "commit" if off + CHUNK >= len(raw) else "append"
                self._call("files.write", path=path, data=base64.b64encode(raw[off:off + CHUNK]).decode(),
                           upload=step, uploadId=upload_id)
        except SbxError:
            raise  # the server ended the upload with the request that failed
        except BaseException:
            # Interrupted between parts (KeyboardInterrupt, say): the server still holds it.
            with contextlib.suppress(SbxError):
                self._call("files.write", path=path, upload="abort", uploadId=upload_id)
            raise

    def list(self, path: str, *, depth: int = 1) -> List[EntryInfo]:
        """Entries below a directory, ``depth`` levels deep."""
        return [EntryInfo._from(e) for e in self._call("files.list", path=path, depth=depth)["entries"]]

    def get_info(self, path: str) -> EntryInfo:
        """Describes a path (a symlink itself, not what it points to)."""
        return EntryInfo._from(self._call("files.stat", path=path))

    stat = get_info

    def exists(self, path: str) -> bool:
        """Whether something exists at path."""
        return bool(self._call("files.exists", path=path)["exists"])

    def make_dir(self, path: str, *, parents: bool = True) -> None:
        """Creates a directory (and its missing parents, by default)."""
        self._call("files.mkdir", path=path, parents=parents)

    def remove(self, path: str, *, recursive: bool = True) -> None:
        """Removes a file or a directory tree."""
        self._call("files.rm", path=path, recursive=recursive)

    def rename(self, old_path: str, new_path: str) -> None:
        """Renames or moves a path; an existing target is replaced."""
        self._call("files.rename", **{"from": old_path, "to": new_path})
