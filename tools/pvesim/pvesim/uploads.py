# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""File uploads (``POST /nodes/{node}/storage/{storage}/upload``): received as Proxmox's HTTP server receives them,
then copied into the storage by a task (pve-storage API2/Storage/Status.pm ``upload``).

pve-http-server streams a multipart upload into a temporary file instead of applying its body limit: first the form
fields ``content``, ``checksum-algorithm`` and ``checksum`` (in that order, each optional), then the file part, whose
field must be named ``filename``. ``receive_multipart`` follows the same phases on a bounded buffer, so the simulator
never holds an upload in memory. The handler gets the temporary file as ``tmpfilename`` (the schema's
``/var/tmp/pveupload-<hex>`` name, mapped to the real file here).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import struct
import typing as t
import urllib.parse

from .api.core import ApiError, Call, Sim, param_error, route
from .api.qemu_volumes import enabled_storage
from .imagebuild import file_digest, files_dir, import_files, normalize_filename
from .schema import Schema
from .state import FILE_STORAGE_TYPES
from .tasks import Task, TaskFailed

UPLOAD_PATH_RE = re.compile(r"/nodes/([^/]+)/storage/([^/]+)/upload")
_CHUNK = 1 << 16
_MAX_HEAD = 16 * 1024  # the form fields before the file part (PVE: 2048 bytes of headers plus the boundary)
_FORM_FIELDS = ("content", "checksum-algorithm", "checksum")
_EXTENSIONS = {
    "iso": (re.compile(r"[^/]+\.(?:iso|img)", re.I), "wrong file extension"),
    "vztmpl": (re.compile(r"[^/]+\.(?:tar|tar\.(?:gz|xz|zst|bz2))", re.I), "wrong file extension"),
    "import": (re.compile(r"[a-zA-Z0-9\-.+=_]+\.(ova|qcow2|raw|vmdk)"), "invalid filename or wrong extension"),
}


class UploadError(Exception):
    """The multipart body is not what Proxmox's HTTP server accepts (it answers 500 with this message)."""


def _uploads(sim: Sim) -> dict[str, str]:
    """The schema's ``tmpfilename`` -> the real temporary file."""
    uploads: dict[str, str] = sim.__dict__.setdefault("upload_files", {})
    return uploads


def new_upload_file(sim: Sim) -> tuple[str, str]:
    """(the ``tmpfilename`` the handler sees, the real path the body is written to)."""
    name = "pveupload-" + hashlib.md5(secrets.token_bytes(16)).hexdigest()  # noqa: S324 - a name, as PVE's
    path = os.path.join(files_dir(sim), name)
    _uploads(sim)["/var/tmp/" + name] = path
    return "/var/tmp/" + name, path


def receive_multipart(read: t.Callable[[int], bytes], length: int, boundary: str, out: t.BinaryIO) -> dict[str, str]:
    """Read ``length`` bytes of a multipart body with ``read``; write the file part to ``out``; return the fields."""
    delim = re.compile(rb"--" + re.escape(boundary.encode()) + rb"\r?\n")
    close = re.compile(rb"\r?\n?--" + re.escape(boundary.encode()) + rb"--")
    keep = len(boundary) + 8  # PVE's boundlen: a closing delimiter may straddle two reads
    params: dict[str, str] = {}
    buf = b""
    remaining = length
    phase = 0
    while True:
        if remaining > 0:
            chunk = read(min(_CHUNK, remaining))
            if not chunk:
                raise UploadError("upload failed")
            remaining -= len(chunk)
            buf += chunk
        if phase == 0:
            m = delim.search(buf)
            if m:
                buf, phase = buf[m.start() :], 1
        if phase == 1:
            buf, phase = _form_fields(buf, delim, params)
            if phase == 1 and len(buf) > _MAX_HEAD:
                raise UploadError("upload failed")
        if phase == 2:
            m = close.search(buf)
            if m:
                out.write(buf[: m.start()])
                return params
            if len(buf) > keep:
                out.write(buf[: len(buf) - keep])
                buf = buf[len(buf) - keep :]
        if remaining <= 0:
            raise UploadError("upload failed")


def _form_fields(buf: bytes, delim: re.Pattern[bytes], params: dict[str, str]) -> tuple[bytes, int]:
    """Phase 1: the optional fields in their fixed order, then the file part's headers (phase 2 starts at its data)."""
    for name in _FORM_FIELDS:
        if name in params:
            continue
        pattern = rb"Content-Disposition: (.*?); name=\"" + re.escape(name.encode()) + rb"\"(.*?)\r?\n\r?\n(.*?)(?="
        m = re.match(delim.pattern + rb".*?" + pattern + delim.pattern + rb")", buf, re.S)
        if not m:
            continue  # each field is optional: PVE tries the next one at the same place
        if m.group(1) != b"form-data":
            raise UploadError(f"wrong Content-Disposition '{m.group(1).decode(errors='replace')}' in multipart")
        params[name] = m.group(3).decode(errors="replace").strip()
        buf = buf[m.end() :]
    m = re.match(
        delim.pattern + rb"Content-Disposition: (.*?); name=\"(.*?)\"; filename=\"([^\"]+)\".*?\r?\n\r?\n", buf, re.S
    )
    if not m:
        return buf, 1
    if m.group(1) != b"form-data":
        raise UploadError(f"wrong Content-Disposition '{m.group(1).decode(errors='replace')}' in multipart")
    if m.group(2) != b"filename":
        raise UploadError(
            f"wrong field name '{m.group(2).decode(errors='replace')}' for file upload, expected 'filename'"
        )
    params["filename"] = m.group(3).decode(errors="replace").strip()
    return buf[m.end() :], 2


def _check_image(path: str, tmpfilename: str, declared: str | None) -> None:
    """file_size_info on an untrusted image: no backing file; an import's format must match its extension."""
    with open(path, "rb") as handle:
        header = handle.read(16)
    is_qcow2 = header[:4] == b"QFI\xfb" and len(header) == 16
    if is_qcow2 and struct.unpack(">Q", header[8:16])[0]:
        raise TaskFailed(f"backing file not allowed for untrusted image '{tmpfilename}'!")
    detected = "qcow2" if is_qcow2 else "raw"
    if declared in ("qcow2", "raw") and declared != detected:
        raise TaskFailed(f"qemu-img bug: queried format does not match format in result '{declared} ne {detected}'")


class UploadReceiver:
    """The server side of an upload (mixed into the simulator's ``App``, which provides ``sim``, ``handle`` and
    ``_authenticate``)."""

    sim: Sim
    handle: t.Callable[..., t.Any]
    _authenticate: t.Callable[..., tuple[str | None, bool]]

    def handle_upload(
        self, raw_path: str, headers: t.Mapping[str, str], read: t.Callable[[int], bytes], length: int
    ) -> tuple[t.Any, bool]:
        """A file upload, received as pve-http-server receives one: authenticated and checked for
        ``Datastore.AllocateTemplate`` before a byte of the body is read, then streamed (multipart) into a temporary
        file, which the handler gets as ``tmpfilename``. Returns (reply, whether the whole body was read)."""
        url = urllib.parse.urlsplit(raw_path)
        rel = Schema.relative_path(urllib.parse.unquote(url.path))
        storage = UPLOAD_PATH_RE.fullmatch(rel)
        try:
            subject, _is_token = self._authenticate("POST", rel, headers, upload=True)
            with self.sim.state.lock:
                allowed = storage is not None and self.sim.has(
                    str(subject), f"/storage/{storage.group(2)}", ["Datastore.AllocateTemplate"]
                )
        except ApiError:
            allowed = False
        if not allowed:  # the usual 401 or 403 (with its request-log entry); the body stays unread
            return self.handle("POST", raw_path, headers, b""), False
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        ctype = headers.get("Content-Type") or ""
        boundary = re.search(r";\s*boundary\s*=\s*(\S+?)\s*(?:;|$)", ctype)
        if ctype.split(";")[0].strip() != "multipart/form-data" or not boundary:
            refusal = ApiError(501, f"upload 'Content-Type '{ctype}' not implemented")
            return self.handle("POST", raw_path, headers, b"", form=query, refusal=refusal), False
        if "tmpfilename" in query:
            refusal = ApiError(500, "'tmpfilename' query parameter is not allowed for file uploads")
            return self.handle("POST", raw_path, headers, b"", form=query, refusal=refusal), False
        tmpfilename, path = new_upload_file(self.sim)
        try:
            with open(path, "wb") as out:
                fields = receive_multipart(read, length, boundary.group(1).strip('"'), out)
        except UploadError as err:
            os.unlink(path)
            return self.handle("POST", raw_path, headers, b"", form=query, refusal=ApiError(500, str(err))), False
        except OSError:
            os.unlink(path)
            raise
        form = {**query, **fields, "tmpfilename": tmpfilename}
        return self.handle("POST", raw_path, headers, b"", form=form), True


@route("POST", "/nodes/{node}/storage/{storage}/upload")
def storage_upload(sim: Sim, call: Call) -> str:
    """Copy a received upload into the storage: ISO images, container templates and importable disk images."""
    st = sim.state
    node, sid = str(call.params["node"]), str(call.params["storage"])
    if node not in st.members:
        raise ApiError(500, f"no such cluster node '{node}'")
    if node != st.node:
        raise ApiError(500, "unable to proxy file uploads")
    storage = enabled_storage(sim, sid)
    if not storage.on_node(node):
        raise ApiError(500, f"storage '{sid}' is not available on node '{node}'")
    if storage.type not in FILE_STORAGE_TYPES:
        raise ApiError(500, f"can't upload to storage type '{storage.type}'")
    content = str(call.params["content"])
    tmpfilename = call.str("tmpfilename")
    if not tmpfilename:
        raise ApiError(500, "missing temporary file name")
    path = _uploads(sim).get(tmpfilename)
    if path is None or not os.path.exists(path):
        raise ApiError(500, f"temporary file '{tmpfilename}' does not exist")
    size = os.path.getsize(path)
    filename = normalize_filename(str(call.params["filename"]).rstrip("\n").replace("\\", "/").rsplit("/", 1)[-1])
    pattern, message = _EXTENSIONS[content]
    match = pattern.fullmatch(filename)
    if not match:
        raise param_error({"filename": message})
    declared = match.group(1) if content == "import" else None
    if content not in storage.content:
        raise ApiError(500, f"storage '{sid}' does not support '{content}' content")
    volid = f"{sid}:{content}/{filename}"
    checksum, algorithm = call.str("checksum"), call.str("checksum-algorithm")

    def body(task: Task) -> None:
        task.log(f"starting file import from: {tmpfilename}")
        try:
            if algorithm and checksum:
                got = file_digest(path, algorithm)
                if got.lower() != checksum.lower():
                    raise TaskFailed(f"checksum mismatch: got '{got}' != expect '{checksum}'")
                task.log("calculating checksum...OK, checksum verified")
            if content in ("iso", "import"):
                _check_image(path, tmpfilename, declared)
        except TaskFailed:
            os.unlink(path)
            raise
        task.log(f"target node: {node}")
        task.log(f"target file: /var/lib/vz/template/{content}/{filename}")
        task.log(f"file size is: {size}")
        sim.sleep("imgcopy")
        with st.lock:
            storage.volumes[volid] = size
            if content == "iso":
                os.unlink(path)  # an ISO's content is never read again: only its size is kept
            else:
                final = os.path.join(files_dir(sim), f"{content}-{filename}")
                shutil.move(path, final)
                import_files(sim)[volid] = final
            _uploads(sim).pop(tmpfilename, None)
        task.log("finished file import successfully")

    return sim.start_task(call, "imgcopy", "", body)
