"""Measured ceilings saved per GPU UUID, for the monitor and the analyzer to read
without measuring again (stdlib only).

One JSON file per GPU in ``$XDG_CACHE_HOME/gputui/ceilings/`` (else
``~/.cache/gputui/ceilings/``): the directory 0700, the files 0600, written to a
temporary file and renamed so a reader never sees half a file.  Reading never
raises: a missing, foreign, oversized or malformed file is "no ceilings".
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from gputui.analysis.roof import Roof
from gputui.ceilings.datasheet import datasheet_for
from gputui.ceilings.measured import Ceilings
from gputui.errors import GputuiError

FORMAT = "gputui-ceilings"
VERSION = 1
MAX_BYTES = 256 * 1024

_UUID = re.compile(r"^(GPU-|MIG-)?([0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})$")
_MIG_OTHER = re.compile(r"^MIG-[A-Za-z0-9/-]{1,120}$")


def normalize_uuid(uuid: object) -> str | None:
    """A GPU's UUID as NVML spells it ("GPU-1a2b..."): torch's ``uuid`` property
    has no prefix.  None for anything that is not a UUID (it names a file)."""
    text = str(uuid).strip() if uuid is not None else ""
    m = _UUID.match(text)
    if m:
        return f"{m.group(1) or 'GPU-'}{m.group(2).lower()}"
    if _MIG_OTHER.match(text) and ".." not in text:
        return text.replace("/", "_")
    return None


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gputui" / "ceilings"


def _path(uuid: str, directory: Path | None) -> Path | None:
    name = normalize_uuid(uuid)
    if name is None:
        return None
    return (directory or cache_dir()) / f"{name}.json"


def _private_dir(directory: Path) -> None:
    """Create ``directory`` 0700, or refuse one that is not ours or not private."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise GputuiError(f"gputui bench: {directory} is not a directory of this user")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(directory, 0o700)


def save(document: dict[str, Any], uuid: str, directory: Path | None = None) -> Path:
    """Write ``document`` (the ``gputui bench --json`` object) as ``uuid``'s ceilings."""
    path = _path(uuid, directory)
    if path is None:
        raise GputuiError(f"gputui bench: not a GPU UUID: {uuid!r}")
    _private_dir(path.parent)
    data = {"format": FORMAT, "version": VERSION, **document}
    text = json.dumps(data, indent=1, sort_keys=True)
    if len(text) > MAX_BYTES:
        raise GputuiError("gputui bench: the results are too large to save")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def read_document(path: Path) -> dict[str, Any] | None:
    """A saved document, or None if it cannot be trusted or parsed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return None
        if info.st_uid != os.getuid() or info.st_mode & 0o022:
            return None  # someone else could have written it
        raw = os.read(fd, MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    if data.get("version") != VERSION:
        return None
    return data


def load_ceilings(uuid: str, directory: Path | None = None) -> Ceilings | None:
    """The ceilings last measured on the GPU ``uuid`` (NVML's "GPU-..." or torch's
    form), or None when it was never measured or the file is unusable.  Never
    raises and never imports torch: the monitor calls it."""
    try:
        path = _path(uuid, directory)
        if path is None:
            return None
        data = read_document(path)
        if data is None:
            return None
        found = Ceilings.from_dict(data.get("ceilings"))
        if found is None or normalize_uuid(found.gpu_uuid) != normalize_uuid(uuid):
            return None
        return found
    except Exception:
        return None


def cached_documents(directory: Path | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every saved document, oldest measurement first."""
    folder = directory or cache_dir()
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    found = []
    for name in names[:1000]:
        if not name.endswith(".json") or name.startswith("."):
            continue
        data = read_document(folder / name)
        found_c = Ceilings.from_dict(data.get("ceilings")) if data is not None else None
        # the file must be the one its GPU's results are saved to
        if data is not None and found_c and f"{normalize_uuid(found_c.gpu_uuid)}.json" == name:
            found.append((folder / name, data))
    found.sort(key=lambda pd: str(pd[1]["ceilings"].get("measured_at", "")))
    return found


def roof_for(uuid: str | None, gpu_name: str | None, directory: Path | None = None) -> Roof | None:
    """The roofline of a GPU: its ceilings measured by ``gputui bench`` when they are
    cached for ``uuid`` (or, with no UUID -- a trace --, the newest measurement of a
    GPU of the same name), else the datasheet of ``gpu_name``, else None (a GPU
    neither measured nor in the datasheet table).  Reads files: keep it off the UI
    thread."""
    measured = load_ceilings(uuid, directory) if uuid else None
    if measured is None and not uuid and gpu_name:
        for _, data in reversed(cached_documents(directory)):
            found = Ceilings.from_dict(data.get("ceilings"))
            if found is not None and found.gpu_name == gpu_name:
                measured = found
                break
    roof = measured.roof() if measured is not None else None
    if roof is not None:
        return roof
    sheet = datasheet_for(gpu_name)
    return sheet.roof() if sheet is not None else None
