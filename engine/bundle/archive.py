"""The bundle container: a zip archive whose first member is ``manifest.json`` and whose zip
comment (the trailer) holds the sha256 of every byte before it.

Checks, in order, each naming what failed: the trailer digest; the manifest (format, schema
version); every member listed in it (present, readable, its local header agreeing with the
archive index, its sha256 and size); members the manifest does not list. A file that is not
a readable zip (a truncated copy) is walked member by member from the start, so the report
names the member it ends in and the members missing after it. Digests are for integrity, not
authenticity: whoever can rewrite a bundle can rewrite its digests too.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "mkb-bundle"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
TRAILER_PREFIX = b"mkb-bundle 1 sha256:"
TRAILER_LEN = len(TRAILER_PREFIX) + 64
FIXED_TIME = (2026, 1, 1, 0, 0, 0)  # every member's zip time: the same store gives the same bytes
_LOCAL = struct.Struct("<4s5HL2L2H")
_LOCAL_SIG = b"PK\x03\x04"
_CENTRAL_SIG = b"PK\x01\x02"
_READ_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    ValueError,
    RuntimeError,
    NotImplementedError,
    OSError,
    struct.error,
)


@dataclass(frozen=True)
class Problem:
    member: str  # the member's path, or "(archive)", "(trailer)", "(index)"
    message: str

    def __str__(self) -> str:
        return f"{self.member}: {self.message}"


class BundleError(Exception):
    """The bundle is refused; ``problems`` name each member that failed a check."""

    def __init__(self, path: str | Path, problems: list[Problem]) -> None:
        self.path = str(path)
        self.problems = problems
        listed = "; ".join(str(p) for p in problems[:8])
        more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        super().__init__(f"{path}: bundle refused: {listed}{more}")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_archive(
    path: str | os.PathLike[str], manifest: dict[str, Any], members: dict[str, bytes]
) -> str:
    """Write ``manifest.json`` then every member, and the trailer; returns the file's sha256.

    The manifest gains each member's sha256 and size. The file appears atomically.
    """
    manifest = {
        **manifest,
        "members": [
            {"path": name, "sha256": sha256(data), "bytes": len(data)}
            for name, data in members.items()
        ],
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        zf.comment = TRAILER_PREFIX + b"0" * 64
        for name, data in [(MANIFEST, _json_bytes(manifest)), *members.items()]:
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    raw = bytearray(buffer.getvalue())
    raw[-64:] = sha256(bytes(raw[:-TRAILER_LEN])).encode()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return sha256(bytes(raw))


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True, default=str) + "\n").encode()


def read_verified(path: str | Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and every member of a bundle that passes every check, else
    :class:`BundleError` naming what failed."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise BundleError(p, [Problem("(archive)", f"cannot read: {exc.strerror}")]) from exc
    problems: list[Problem] = []
    digest_ok = _trailer_ok(data, problems)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except _READ_ERRORS as exc:
        raise BundleError(p, problems + _walk_damaged(data, str(exc))) from None
    with zf:
        manifest = _manifest(zf, data, problems)
        if manifest is None:
            raise BundleError(p, problems)
        members = _check_members(zf, data, manifest, problems)
    if not digest_ok and not [q for q in problems if q.member != "(trailer)"]:
        problems.append(
            Problem(
                "(index)",
                "bytes outside every member were altered (the "
                "archive index or trailer); every member's content "
                "matches the manifest",
            )
        )
    if problems:
        raise BundleError(p, problems)
    return manifest, members


def _trailer_ok(data: bytes, problems: list[Problem]) -> bool:
    """Whether the trailer holds the sha256 of every byte before it."""
    trailer = data[-TRAILER_LEN:]
    if len(data) < TRAILER_LEN or not trailer.startswith(TRAILER_PREFIX):
        problems.append(
            Problem(
                "(trailer)",
                "missing or damaged: the file was cut short, "
                "altered at its end, or is not an mkb bundle",
            )
        )
        return False
    if trailer[len(TRAILER_PREFIX) :] != sha256(data[:-TRAILER_LEN]).encode():
        problems.append(
            Problem("(trailer)", "the archive's sha256 differs from the one written at export")
        )
        return False
    return True


def _manifest(zf: zipfile.ZipFile, data: bytes, problems: list[Problem]) -> dict[str, Any] | None:
    try:
        info = zf.getinfo(MANIFEST)
    except KeyError:
        problems.append(Problem(MANIFEST, "missing"))
        return None
    content = _member_bytes(data, info, problems)
    if content is None:
        return None
    try:
        manifest = json.loads(content)
    except ValueError as exc:
        problems.append(Problem(MANIFEST, f"unreadable ({exc})"))
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        problems.append(Problem(MANIFEST, f"not an {FORMAT} manifest"))
        return None
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        problems.append(
            Problem(
                MANIFEST,
                f"schema_version {version!r}: this mkb reads "
                f"schema {SCHEMA_VERSION} and older; upgrade it",
            )
        )
        return None
    if not isinstance(manifest.get("members"), list):
        problems.append(Problem(MANIFEST, "members: must be a list"))
        return None
    return manifest


def _check_members(
    zf: zipfile.ZipFile, data: bytes, manifest: dict[str, Any], problems: list[Problem]
) -> dict[str, bytes]:
    listed: dict[str, dict[str, Any]] = {}
    for entry in manifest["members"]:
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            listed[entry["path"]] = entry
        else:
            problems.append(Problem(MANIFEST, f"a members entry is malformed: {entry!r:.80}"))
    infos = {info.filename: info for info in zf.infolist()}
    out: dict[str, bytes] = {}
    for name, entry in listed.items():
        info = infos.get(name)
        if info is None:
            problems.append(Problem(name, "listed in the manifest but missing from the archive"))
            continue
        content = _member_bytes(data, info, problems)
        if content is None:
            continue
        if sha256(content) != entry.get("sha256") or len(content) != entry.get("bytes"):
            problems.append(Problem(name, "content differs from the manifest (sha256)"))
            continue
        out[name] = content
    for name in infos:
        if name != MANIFEST and name not in listed:
            problems.append(Problem(name, "in the archive but not in the manifest"))
    return out


def _member_bytes(data: bytes, info: zipfile.ZipInfo, problems: list[Problem]) -> bytes | None:
    """A member's content, read from its own header and compressed stream, which must agree
    with the archive index (name, version, method, time, CRC, sizes) and end exactly where
    the index says; a byte changed in either is caught and the member named."""
    start = info.header_offset
    inside = start >= 0 and start + _LOCAL.size <= len(data)
    fields = _LOCAL.unpack_from(data, start) if inside else None
    if fields is None or fields[0] != _LOCAL_SIG:
        problems.append(Problem(info.filename, "its header is missing or damaged"))
        return None
    _, version, flags, method, mtime, mdate, crc, csize, usize, name_len, extra_len = fields
    name = data[start + _LOCAL.size : start + _LOCAL.size + name_len]
    dt = info.date_time
    expect_time = (dt[3] << 11) | (dt[4] << 5) | (dt[5] // 2)
    expect_date = ((dt[0] - 1980) << 9) | (dt[1] << 5) | dt[2]
    if (
        name != info.filename.encode()
        or version != info.extract_version
        or method != info.compress_type
        or crc != info.CRC
        or flags != info.flag_bits
        or (mtime, mdate) != (expect_time, expect_date)
        or (csize, usize) != (info.compress_size, info.file_size)
    ):
        problems.append(Problem(info.filename, "its header disagrees with the archive index"))
        return None
    body = start + _LOCAL.size + name_len + extra_len
    raw = data[body : body + csize]
    content = _inflate(raw, method) if len(raw) == csize else None
    if content is None or len(content) != usize or zlib.crc32(content) != crc:
        problems.append(Problem(info.filename, "its compressed data is damaged"))
        return None
    return content


def _inflate(raw: bytes, method: int) -> bytes | None:
    """Stored or deflated bytes, None unless the stream ends exactly at the end of ``raw``."""
    if method == zipfile.ZIP_STORED:
        return raw
    if method != zipfile.ZIP_DEFLATED:
        return None
    inflater = zlib.decompressobj(-15)
    try:
        content = inflater.decompress(raw) + inflater.flush()
    except zlib.error:
        return None
    return content if inflater.eof and not inflater.unused_data else None


def _walk_damaged(data: bytes, why: str) -> list[Problem]:
    """A file zip cannot open (cut short, or its index damaged): walk the members from the
    start and name where it breaks and what is missing."""
    pos, seen, problems = 0, [], []
    manifest: dict[str, Any] | None = None
    while pos + _LOCAL.size <= len(data) and data[pos : pos + 4] == _LOCAL_SIG:
        fields = _LOCAL.unpack_from(data, pos)
        name_len, extra_len, csize = fields[9], fields[10], fields[7]
        name = data[pos + _LOCAL.size : pos + _LOCAL.size + name_len].decode("utf-8", "replace")
        body = pos + _LOCAL.size + name_len + extra_len
        if body + csize > len(data):
            problems.append(Problem(name, "the file ends inside this member (truncated)"))
            break
        if name == MANIFEST:
            manifest = _json_or_none(_inflate(data[body : body + csize], fields[3]))
        seen.append(name)
        pos = body + csize
    else:
        if data[pos : pos + 4] != _CENTRAL_SIG:
            where = f"after member {seen[-1]!r}" if seen else "at the start"
            problems.append(Problem("(archive)", f"unreadable bytes {where} (offset {pos})"))
    if manifest is not None:
        expected = [e.get("path") for e in manifest.get("members", []) if isinstance(e, dict)]
        missing = [str(n) for n in expected if n not in seen]
        for name in missing:
            if not problems or problems[0].member != name:
                problems.append(Problem(name, "missing (the archive is incomplete)"))
    if not problems:
        problems.append(Problem("(index)", f"the archive index is unreadable ({why})"))
    return problems


def _json_or_none(content: bytes | None) -> dict[str, Any] | None:
    try:
        value = json.loads(content) if content is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
