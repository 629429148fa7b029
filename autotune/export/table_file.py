"""``autotune export --format json`` and ``--format python``: the kernel table as a JSON file.

``json`` writes the table alone (launch contracts and measured quality, no
cubins): ``autotune_table_SCOPE.json``. ``python`` writes it with each kernel's
cubin, so ``autotune.load`` (or ``AUTOTUNE_TABLE``) runs it with no database and
no compiler: ``autotune_table_SCOPE_with_cubins.json``.
"""

from __future__ import annotations

from pathlib import Path

from autotune.export.files import write_files
from autotune.select.kernel_table import KernelTable


def table_file_name(scope: str, with_cubins: bool) -> str:
    """The name of a table file of ``scope`` (a GPU key or an architecture)."""
    return f"autotune_table_{scope}_with_cubins.json" if with_cubins else f"autotune_table_{scope}.json"


def write_table_file(table: KernelTable, out: Path, with_cubins: bool) -> list[Path]:
    """Write ``table`` (with its cubins, which it must have, if ``with_cubins``) into the folder ``out``."""
    return write_files(out, {table_file_name(table.scope, with_cubins): table.to_json(with_cubins)})
