"""The export formats: each a writer of a kernel table into a folder, looked up by its ``--format`` name.

A new format is a module of this package with a function ``(table, out) -> files written`` and one
:class:`Writer` in :data:`WRITERS`. A writer that embeds cubins gets a compiled table
(:func:`autotune.export.compile.compile_table`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import InputError

if TYPE_CHECKING:  # the writers load the table model, NVRTC and Jinja only when one runs: the CLI lists them at start
    from autotune.select.kernel_table import KernelTable


@dataclasses.dataclass(frozen=True)
class Writer:
    """One export format."""

    name: str  # the --format value
    writes: str  # what it writes, for --help
    compiles: bool  # whether it embeds cubins (the table is compiled before it is written)
    write: Callable[[KernelTable, Path], list[Path]]  # (table, out folder) -> the files written


def _cuda(table: KernelTable, out: Path) -> list[Path]:
    from autotune.export.cuda import write_library

    return write_library(table, out)


def _python(table: KernelTable, out: Path) -> list[Path]:
    from autotune.export.table_file import write_table_file

    return write_table_file(table, out, with_cubins=True)


def _json(table: KernelTable, out: Path) -> list[Path]:
    from autotune.export.table_file import write_table_file

    return write_table_file(table, out, with_cubins=False)


WRITERS: dict[str, Writer] = {writer.name: writer for writer in (
    Writer("cuda", "a CMake project of a C library with the kernels' cubins embedded", True, _cuda),
    Writer("python", "the table with each kernel's cubin, as JSON that autotune.load and AUTOTUNE_TABLE read "
                     "(autotune_table_SCOPE_with_cubins.json)", True, _python),
    Writer("json", "the table alone: launch contracts and measured quality, no cubins (autotune_table_SCOPE.json)",
           False, _json),
)}


def writer(name: str) -> Writer:
    """The writer of format ``name``; InputError naming the formats otherwise."""
    if name not in WRITERS:
        raise InputError("--format", name, ", ".join(WRITERS))
    return WRITERS[name]
