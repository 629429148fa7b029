"""``autotune export --format cuda``: the kernels of a kernel table as a self-contained C library.

:func:`write_library` writes a CMake project: ``include/autotune_gemm.h`` (a C
API, no CUDA header needed), ``src/`` (the cubins as byte arrays, each kernel's
launch contract, the selection rules ported from :meth:`DtypeTable.pick`, and
the launcher, which loads the CUDA driver at run time, and cuBLAS where the
table picks it and it is installed), ``CMakeLists.txt``
with an installable, ``find_package``-able target ``autotune::autotune_gemm``,
an example and a README. The files are in ``cuda_library/`` beside this
module: those ending in ``.j2`` are rendered with the table, the rest copied.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import jinja2

from autotune import __version__
from autotune.export.compile import compile_table
from autotune.export.files import check_destination, write_files
from autotune.kernel.cubin import parameter_sizes
from autotune.kernel_abi import SWIZZLES, argument_bytes
from autotune.problem import ELEMENTS
from autotune.select.kernel_table import DtypeTable, KernelTable, TableError, TableKernel, TableRule

LIBRARY_FILES = Path(__file__).resolve().parent / "cuda_library"
FUNCTIONS = {"f32": "autotune_sgemm", "f16": "autotune_hgemm", "bf16": "autotune_bgemm"}
MAX_TENSOR_MAPS = 8  # src/launch.c
_ARCH = re.compile(r"^sm_(\d+)(\d)$")
_BYTES_PER_LINE = 24


def write_library(table: KernelTable, out: Path) -> list[Path]:
    """Write the C library of ``table`` (compiled first where a kernel has no cubin) into ``out``.

    Returns the files written. Raises InputError for an ``out`` that is not a
    directory autotune can write into (or has a symbolic link where a file or
    folder of the library goes, :mod:`autotune.export.files`) and TableError for
    a table the library cannot hold (no dtype with rules, an architecture that
    is not ``sm_XY``, a cubin whose parameters are not what the launcher passes).
    Both are checked before anything is compiled.
    """
    check_destination(Path(out))
    _check_table(table)
    if any(kernel.cubin is None for _, _, dtype in table.dtype_tables() for kernel in dtype.kernels):
        table = compile_table(table)
    context = library_context(table)
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(LIBRARY_FILES), keep_trailing_newline=True,
                                     trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
                                     autoescape=False)
    files = {}
    for source in sorted(path for path in LIBRARY_FILES.rglob("*") if path.is_file()):
        relative = source.relative_to(LIBRARY_FILES)
        if source.suffix == ".j2":
            files[relative.with_suffix("").as_posix()] = environment.get_template(relative.as_posix()).render(context)
        else:
            files[relative.as_posix()] = source.read_text()
    return write_files(Path(out), files)


def library_context(table: KernelTable) -> dict[str, Any]:
    """What the templates are rendered with: the table's kernels (each once, in a fixed order) and,
    per dtype, its rules pointing at them (``dtypes``), and those of its table for B stored N x K
    (``nt_dtypes``, the dtypes with one: ``nt_names``)."""
    match = _check_table(table)
    kernels: list[TableKernel] = []
    for _, _, dtype in table.dtype_tables():
        kernels += [kernel for kernel in dtype.kernels if kernel.name not in {k.name for k in kernels}]
    index = {kernel.name: i for i, kernel in enumerate(kernels)}
    dtypes = [_dtype_context(name, table.dtypes.get(name), index) for name in FUNCTIONS]
    transposed = table.for_layout("nt")
    nt_names = [name for name in FUNCTIONS if transposed.get(name) is not None and transposed[name].rules]
    nt_dtypes = [_dtype_context(name, transposed[name], index) for name in nt_names]
    return {
        "scope": table.scope, "arch": table.arch, "arch_major": int(match.group(1)), "arch_minor": int(match.group(2)),
        "version": __version__, "created_at": _comment_text(table.created_at), "source": _comment_text(table.source),
        "measured_on": _comment_text(", ".join(table.measured_on)),
        **{f"has_{dtype['name']}": bool(dtype["rules"]) or dtype["name"] in nt_names for dtype in dtypes},
        "kernels": [_kernel_context(kernel, index) for kernel in kernels], "dtypes": dtypes,
        "nt_dtypes": nt_dtypes, "nt_names": nt_names,
    }


def _check_table(table: KernelTable) -> re.Match:
    """TableError for a table the library cannot hold; the match of its architecture."""
    match = _ARCH.match(table.arch)
    if not match:
        raise TableError(f"architecture {table.arch!r}: expected sm_ and its compute capability, like sm_90")
    unknown = sorted({dtype for _, dtype, _ in table.dtype_tables()} - set(FUNCTIONS))
    if unknown:
        raise TableError(f"dtype {unknown[0]!r}: the C library has functions for {', '.join(FUNCTIONS)} only")
    if not any(dtype.rules for _, _, dtype in table.dtype_tables()):
        raise TableError(f"the table of {table.scope} has no tuned shapes: nothing to export")
    return match


def _dtype_context(name: str, dtype: DtypeTable | None, index: dict[str, int]) -> dict[str, Any]:
    volumes = sorted({rule.m * rule.n * rule.k for rule in dtype.rules}) if dtype else []
    rules = [_rule_context(rule, dtype.goes_to_cublas(rule), volumes, index) for rule in dtype.rules] if dtype else []
    ranges = dtype.served_sizes().values() if rules else []
    element = ELEMENTS[name]
    return {"name": name, "function": FUNCTIONS[name], "element_bytes": element.itemsize,
            "cuda_data_type": element.cuda_data_type,
            "sms": dtype.sms if dtype else 1, "ridge": repr(dtype.ridge if dtype else 0.0), "rules": rules,
            "tuned_range": [{"axis": axis, "low": low, "high": high} for axis, (low, high) in zip("mnk", ranges)]}


def _rule_context(rule: TableRule, cublas: bool, volumes: list[int], index: dict[str, int]) -> dict[str, Any]:
    ratio = f", {rule.ratio_to_cublas:.3f}x cuBLAS" if rule.ratio_to_cublas else ""
    goes = ": cuBLAS runs here where it loads" if cublas else ""
    return {"m": rule.m, "n": rule.n, "k": rule.k, "volume_rank": volumes.index(rule.m * rule.n * rule.k),
            "times": [{"kernel": index[kernel], "ms": repr(float(ms))} for kernel, ms in rule.times],
            "cublas_ms": repr(float(rule.cublas_ms)) if rule.cublas_ms else "0.0", "cublas": cublas,
            "kernel_name": rule.kernel, "note": _comment_text(f"{rule.ms:.4g} ms{ratio} on {rule.measured_on}{goes}")}


def _comment_text(text: str) -> str:
    """Text from a table file or database made safe inside C and CMake comments: one line of printable
    characters, no comment end."""
    text = "".join(c if c.isprintable() else " " for c in str(text))
    return text.replace("*/", "* /")


def _kernel_context(kernel: TableKernel, index: dict[str, int]) -> dict[str, Any]:
    launch = kernel.launch
    if not launch.entry.isidentifier() or not kernel.name.isidentifier():
        raise TableError(f"kernel {kernel.name!r} (entry {launch.entry!r}) is not a C identifier")
    if len(launch.tensor_maps) > MAX_TENSOR_MAPS:
        raise TableError(f"{kernel.name} takes {len(launch.tensor_maps)} tensor maps; the library passes at most "
                         f"{MAX_TENSOR_MAPS}")
    taken = parameter_sizes(kernel.cubin, launch.entry)
    passed = argument_bytes(launch.tensor_maps, launch.workspace > 0)
    if taken and taken != passed:
        raise TableError(f"{kernel.name} takes parameters of {list(taken)} bytes, but the library passes "
                         f"{list(passed)}")
    expressions = launch.expressions
    return {
        **dataclasses.asdict(launch), "name": kernel.name, "family": kernel.family,
        "grid": [side.to_c() for side in expressions.grid], "k_tiles": expressions.k_tiles.to_c(),
        "opt_in": int(launch.opt_in), "serves": expressions.serves.to_c(),
        "any_shape": index[kernel.any_shape] if kernel.any_shape else -1,
        "b_transposed": int(kernel.layout == "nt"), "reads_c_slowly": int(kernel.reads_c_slowly),
        "tensor_maps": [{"name": spec.name, "operand": spec.operand, "box": spec.box,
                         "swizzle": SWIZZLES[spec.swizzle], "swizzle_bytes": spec.swizzle}
                        for spec in launch.tensor_maps],
        "cubin_bytes": len(kernel.cubin), "cubin_text": _byte_lines(kernel.cubin),
    }


def _byte_lines(data: bytes) -> str:
    """``data`` as the body of a C array initializer."""
    return "\n".join("    " + ",".join(f"0x{byte:02x}" for byte in data[start:start + _BYTES_PER_LINE]) + ","
                     for start in range(0, len(data), _BYTES_PER_LINE))
