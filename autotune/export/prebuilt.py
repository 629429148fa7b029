"""The shipped tables, prebuilt: what the runtime would build from the shipped results, compiled, in the package.

For every GPU the shipped results hold (``h200``) and every architecture of those (``sm_90``: the table
of the other GPUs of it), ``tuned_db/`` holds the table autotune builds from the shipped results, with
its kernels compiled::

    tuned_db/<scope>.table.json     the table as ``autotune export --format json`` writes it, and a
                                    "prebuilt" record: what it was built from, and each cubin's SHA-256
    tuned_db/<arch>.cubins.tar.xz   the cubins of that architecture's tables: a tar compressed with xz,
                                    one member per cubin named by its SHA-256 (about a tenth of the
                                    base64 text ``--format python`` would hold)

so that a program's first ``autotune.gemm`` on such a GPU reads two files instead of building the table
(seconds) and compiling each kernel at its first launch. A prebuilt table is used only while it is
current: while what it was built from (:func:`inputs`: the shipped results' digest, every shipped
family's template hash, the GPU its kernels are rendered for, the selection rule, the table schema and
the kernel arguments) is what this autotune has; else it is passed over and the table is built from the
shipped results as before. That this autotune's selection builds the committed table from those inputs,
and NVRTC the committed cubins, is what ``tests/test_prebuilt.py`` checks.

Regenerate the files after changing ``tuned_db/*.jsonl``, a template, a search space or the selection::

    python -m autotune.cli.prebuilt
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import lzma
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from autotune.data_files import data_dir
from autotune.errors import AutotuneError, CompilerError
from autotune.export.shipped import SOURCE, results_digest, shipped_hold_out
from autotune.gpu_specs import GPUS
from autotune.kernel.cubin import check_cubin
from autotune.kernel_abi import KERNEL_ARGUMENTS
from autotune.problem import DTYPES
from autotune.progress import ProgressCallback, no_progress
from autotune.select.kernel_table import SCHEMA_VERSION, SELECTION_RULE, KernelTable, spec_for_arch

TABLE_SUFFIX = ".table.json"
CUBINS_SUFFIX = ".cubins.tar.xz"
RECORD = "prebuilt"  # the key of the table file's record of what it was built from
_MAX_CUBIN_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Prebuilt:
    """A current prebuilt table (its kernels with their cubins) and what its record says of the shipped results."""

    table: KernelTable
    gpus: tuple[str, ...]  # the GPU keys the shipped results hold (of any architecture)
    ignored: tuple[str, ...]  # results the table leaves out, one line each (as the build says them)
    nvrtc: str  # the NVRTC version that compiled its cubins


def folder() -> Path:
    """Where the prebuilt tables are: ``tuned_db/`` beside the shipped results."""
    return data_dir("tuned_db")


def table_path(scope: str, where: Path | None = None) -> Path:
    return (where or folder()) / f"{scope}{TABLE_SUFFIX}"


def cubins_path(arch: str, where: Path | None = None) -> Path:
    return (where or folder()) / f"{arch}{CUBINS_SUFFIX}"


def inputs(scope: str, arch: str, families: Iterable[str]) -> dict[str, Any]:
    """What the table of ``scope`` (a GPU key, or an architecture for every GPU of it) is built from, as this
    autotune would build it, ``families`` being those the shipped results measured (only their configs can
    enter a table): a prebuilt table whose record holds these is current."""
    from autotune.space.family import load_space

    spec = spec_for_arch(arch, scope)
    return json.loads(json.dumps({
        "shipped_results": results_digest(),
        "templates": {family: load_space(family).template_hash for family in sorted(families)},
        "gpu": dataclasses.asdict(spec),
        "selection": SELECTION_RULE,
        "held_out": shipped_hold_out(),
        "schema_version": SCHEMA_VERSION,
        "kernel_arguments": KERNEL_ARGUMENTS,
    }))


def tuned_dtypes(table: KernelTable) -> KernelTable:
    """``table`` with only the dtypes it has rules for: a prebuilt table holds the dtypes the shipped results
    tuned (bf16 once bf16 results ship), and a runtime asked for another says the table has none."""
    def ruled(tables: dict) -> dict:
        return {dtype: t for dtype, t in tables.items() if t.rules}

    return dataclasses.replace(table, dtypes=ruled(table.dtypes), other_layouts={
        layout: ruled(tables) for layout, tables in table.other_layouts.items() if ruled(tables)})


def read_prebuilt(scope: str, where: Path | None = None) -> Prebuilt | None:
    """The prebuilt table of ``scope`` with its cubins, or None where there is none, it is damaged, or it is
    not current (:func:`inputs`)."""
    path = table_path(scope, where)
    try:
        data = json.loads(path.read_text())
        record = data[RECORD]
        arch = GPUS[scope].sm if scope in GPUS else str(data["arch"])
        if record["inputs"] != inputs(scope, arch, record["inputs"]["templates"]):
            return None  # built from other results, templates or rules: not what this autotune would build
        table = KernelTable.from_dict(data, str(path))
        digests = {str(name): str(digest) for name, digest in record["cubin_sha256"].items()}
        cubins = read_cubins(cubins_path(table.arch, where), set(digests.values()))
        for name, digest in digests.items():
            check_cubin(cubins[digest], name, table.arch)  # as a table file's cubins are checked as it is read
        def with_cubins(tables: dict) -> dict:
            return {dtype: dataclasses.replace(t, kernels=tuple(
                        dataclasses.replace(kernel, cubin=cubins[digests[kernel.name]]) for kernel in t.kernels))
                    for dtype, t in tables.items()}

        table = dataclasses.replace(table, dtypes=with_cubins(table.dtypes), other_layouts={
            layout: with_cubins(tables) for layout, tables in table.other_layouts.items()})
        return Prebuilt(table, tuple(map(str, record["gpus"])),
                        tuple(map(str, record["ignored"])), str(record["nvrtc"]))
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, AutotuneError, tarfile.TarError,
            lzma.LZMAError):
        return None  # missing, damaged or from another autotune: the table is built from the shipped results


def shipped_table(key: str | None, arch: str) -> KernelTable | None:
    """The current prebuilt table the runtime takes on a GPU ``key`` (None: not a known one) of ``arch``:
    the GPU's own where the shipped results hold some of it, else its architecture's; None where that one
    is missing or not current (the table is then built from the shipped results)."""
    if key is not None:
        own = read_prebuilt(key)
        if own is not None and own.table.arch == arch:
            return own.table
    shared = read_prebuilt(arch)
    if shared is None or shared.table.arch != arch or key in shared.gpus:
        return None  # the shipped results have this GPU's own: its table, not the architecture's
    return shared.table


def read_cubins(path: Path, wanted: set[str]) -> dict[str, bytes]:
    """The cubins named ``wanted`` (their SHA-256) in the archive ``path``, each checked against its name;
    ValueError where one is missing or its bytes are not what its name says."""
    cubins = {}
    with tarfile.open(path, "r:xz") as archive:
        for member in archive:
            digest = member.name.removesuffix(".cubin")
            if digest not in wanted or not member.isfile() or member.size > _MAX_CUBIN_BYTES:
                continue
            data = archive.extractfile(member).read()  # type: ignore[union-attr]
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"{path}: {member.name} does not hold the cubin its name says")
            cubins[digest] = data
    missing = wanted - set(cubins)
    if missing:
        raise ValueError(f"{path} lacks the cubin {sorted(missing)[0]}")
    return cubins


def cubins_archive(cubins: list[bytes]) -> bytes:
    """An xz-compressed tar of ``cubins``, each named by its SHA-256: the same bytes for the same cubins."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for digest, data in sorted({hashlib.sha256(c).hexdigest(): c for c in cubins}.items()):
            member = tarfile.TarInfo(f"{digest}.cubin")
            member.size, member.mode, member.mtime = len(data), 0o644, 0
            archive.addfile(member, io.BytesIO(data))
    return lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME)


# -- building them (python -m autotune.cli.prebuilt) -----------------------------------------------------------


def scopes(store) -> list[tuple[str, str]]:
    """``(scope, arch)`` of each table to prebuild: each GPU the shipped results hold, then each architecture
    of those (results of a known GPU measured as another architecture are no table's)."""
    trusted = sorted({(key, arch) for key, _, arch in store.gpus() if key not in GPUS or GPUS[key].sm == arch})
    return [*trusted, *((arch, arch) for arch in sorted({arch for _, arch in trusted}))]


def check_nvrtc(measured: set[str], installed: str) -> None:
    """Raise unless ``installed``, the NVRTC that compiles the cubins, built the kernels the shipped results
    measured: another NVRTC's cubin of the same source is another kernel, whose time the results do not know."""
    if measured and installed not in measured:
        versions = ", ".join(sorted(measured))
        raise CompilerError(f"the shipped results measured kernels built by NVRTC {versions}, but this NVRTC is "
                            f"{installed}, whose cubins differ: build the prebuilt tables with NVRTC {versions} "
                            f"(pip install 'nvidia-cuda-nvrtc=={min(measured)}.*')")


def build_prebuilt(progress: ProgressCallback = no_progress, jobs: int | None = None) -> dict[str, tuple[KernelTable, dict]]:
    """Each table to prebuild, by scope, compiled, with its record (the cubins' digests still to be added)."""
    from autotune.export.compile import compile_table
    from autotune.export.shipped import shipped_store
    from autotune.kernel.compile import nvrtc_version
    from autotune.select.selection import build_table, gather, ignored_environments

    built = {}
    with shipped_store(progress) as store:
        check_nvrtc(store.nvrtc_versions(), nvrtc_version())
        gpus = sorted({key for key, _, _ in store.gpus()})
        families = {config.family for key in gpus for dtype in DTYPES
                    for config in gather(store, key, dtype).configs.values()}
        for scope, arch in scopes(store):
            gpu = None if scope == arch else scope
            built_table = build_table(store, DTYPES, gpu=gpu, arch=arch, progress=progress, hold_out=shipped_hold_out())
            table = tuned_dtypes(dataclasses.replace(built_table, source=SOURCE))
            if not table.dtype_tables():
                continue
            record = {"inputs": inputs(scope, arch, families), "gpus": gpus,
                      "ignored": ignored_environments(store, gpu=gpu, arch=None if gpu else arch)}
            built[scope] = (table, record)
    for scope, (table, record) in built.items():
        built[scope] = (compile_table(table, progress, jobs), {**record, "nvrtc": nvrtc_version()})
    return built


def write_prebuilt(where: Path | None = None, progress: ProgressCallback = no_progress,
                   jobs: int | None = None) -> list[Path]:
    """Build, compile and write the prebuilt tables and their cubins into ``where`` (``tuned_db/``), removing
    those of scopes the shipped results no longer have; the files written. A table whose content is
    unchanged keeps its file as it was (its ``created_at`` too)."""
    from autotune.export.files import write_files

    where = where or folder()
    built = build_prebuilt(progress, jobs)
    files: dict[str, str | bytes] = {}
    for arch in sorted({table.arch for table, _ in built.values()}):
        cubins = [k.cubin for table, _ in built.values() if table.arch == arch
                  for _, _, dtype in table.dtype_tables() for k in dtype.kernels]
        files[cubins_path(arch, where).name] = cubins_archive(cubins)  # type: ignore[arg-type]
    for scope, (table, record) in built.items():
        digests = {k.name: hashlib.sha256(k.cubin).hexdigest()  # type: ignore[arg-type]
                   for _, _, dtype in table.dtype_tables() for k in dtype.kernels}
        record = {**record, "cubins": cubins_path(table.arch).name, "cubin_sha256": digests}
        files[table_path(scope, where).name] = _table_text(table, record, table_path(scope, where))
    for stale in [*where.glob(f"*{TABLE_SUFFIX}"), *where.glob(f"*{CUBINS_SUFFIX}")]:
        if stale.name not in files:
            stale.unlink()
    unchanged = {name for name, content in files.items()
                 if (where / name).is_file() and (where / name).read_bytes() == _bytes(content)}
    return write_files(where, {name: content for name, content in files.items() if name not in unchanged})


def _table_text(table: KernelTable, record: dict, path: Path) -> str:
    """The table file: the table (keeping ``created_at`` of the file at ``path`` where nothing else changed)
    and its record."""
    data = {**table.to_dict(with_cubins=False), RECORD: record}
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = None
    if isinstance(old, dict) and {**old, "created_at": ""} == {**data, "created_at": ""}:
        data["created_at"] = old["created_at"]
    return json.dumps(data, indent=1) + "\n"


def _bytes(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else content
