"""Export files written into the user's ``--out`` folder: the folder is checked before any work, and no
file is ever written through a symbolic link.

Inside the folder, a subfolder that is a symbolic link is refused (one line); a file is written
beside its name and then renamed over it, so a link planted where an export file goes is replaced,
never followed, and a file another path hard-links to is left as it was.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from autotune.errors import InputError

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def check_destination(out: Path) -> None:
    """InputError unless ``out`` is a directory autotune can write into, or one it can create: said before
    the minutes a table's compiles take."""
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise InputError("--out", str(out), "a directory (it is a symbolic link to nothing)")
    if out.exists() and not out.is_dir():
        raise InputError("--out", str(out), "a directory (it is a file)")
    base = out
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise InputError("--out", str(out), f"a directory ({base} is a file, not a directory)")
    try:
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as error:
        raise InputError("--out", str(out), f"a directory autotune can write to ({base}: {error.strerror})") from None


def write_files(out: Path, files: Mapping[str, str | bytes]) -> list[Path]:
    """Write ``files`` (a path relative to ``out``, with ``/`` between folders -> its text or bytes) into
    ``out`` (created if missing); the paths written."""
    out = Path(out)
    check_destination(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    root = os.open(out, _DIRECTORY & ~getattr(os, "O_NOFOLLOW", 0))  # --out itself may be a link the user chose
    try:
        for relative, content in files.items():
            parts = PurePosixPath(relative).parts
            if not parts or any(part in ("", ".", "..") for part in parts) or PurePosixPath(relative).is_absolute():
                raise ValueError(f"{relative!r} is not a path inside the output folder")
            folder = _folder(root, out, parts[:-1])
            try:
                _replace(folder, parts[-1], content.encode() if isinstance(content, str) else content, out / relative)
            finally:
                if folder != root:
                    os.close(folder)
            written.append(out / relative)
    finally:
        os.close(root)
    return written


def _folder(root: int, out: Path, parts: tuple[str, ...]) -> int:
    """A descriptor of the folder ``out/parts...`` (created where missing), reached without following a link."""
    descriptor = root
    for depth, part in enumerate(parts):
        try:
            os.mkdir(part, dir_fd=descriptor)
        except FileExistsError:
            pass
        except OSError as error:
            _close(descriptor, root)
            raise InputError("--out", str(out), f"a directory autotune can write to ({error.strerror})") from None
        try:
            inner = os.open(part, _DIRECTORY, dir_fd=descriptor)
        except OSError:
            _close(descriptor, root)
            where = out.joinpath(*parts[:depth + 1])
            raise InputError("--out", str(out), f"a directory whose subfolder {where} is a folder, not a symbolic "
                                                "link or a file") from None
        _close(descriptor, root)
        descriptor = inner
    return descriptor


def _replace(folder: int, name: str, data: bytes, shown: Path) -> None:
    """Write ``data`` as ``name`` in ``folder``: into a new file beside it, then renamed over it."""
    partial = f".{name}.{os.getpid()}.partial"
    try:
        descriptor = os.open(partial, _NEW_FILE, 0o666, dir_fd=folder)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError as error:
        try:
            os.unlink(partial, dir_fd=folder)
        except OSError:
            pass
        raise InputError("--out", str(shown.parent), f"a directory autotune can write {shown.name} into "
                                                     f"({error.strerror})") from None


def _close(descriptor: int, root: int) -> None:
    if descriptor != root:
        os.close(descriptor)
