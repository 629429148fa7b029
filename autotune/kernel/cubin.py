"""Read a kernel's resource usage and parameters from the cubin itself (ELF ``.nv.info`` attributes),
and check that bytes are a cubin at all (:func:`check_cubin`) before anything trusts them.

Resources are read here when NVRTC's log carries no ptxas report for a compile,
which happens with some NVRTC builds for sources they have compiled before;
parameter sizes let the launcher check that a kernel takes what it passes.
"""

from __future__ import annotations

import dataclasses
import re
import struct

from autotune.errors import CompilerError
from autotune.records import Resources

_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIATTR_KPARAM_INFO = 0x17  # per parameter: index, ordinal, offset, size and flags
_SYSTEM_RESERVED_SMEM = 1024  # per block, reserved for the CUDA runtime from sm_80 on
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


_EM_CUDA = 190  # e_machine of a CUDA ELF
_ELFOSABI_CUDA = 0x41
_SHT_SYMTAB, _SHT_NOBITS = 2, 8
_STT_FUNC = 2
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym


class CubinError(CompilerError, ValueError):
    """Bytes that are not a usable cubin."""


@dataclasses.dataclass(frozen=True)
class _Section:
    name: str
    kind: int
    link: int
    data: bytes  # empty for a section that takes no room in the file (SHT_NOBITS: shared memory)
    size: int


def check_cubin(cubin: bytes, entry: str, arch: str | None = None) -> None:
    """Check that ``cubin`` is a CUDA ELF (machine EM_CUDA) whose ``.nv.info`` attributes read, and
    that defines the function ``entry``; for ``arch`` (``sm_90``), that it is built for that SM.

    Raises:
        CubinError: it is not, saying what is wrong first.
    """
    if not isinstance(cubin, (bytes, bytearray)) or len(cubin) < 64 or cubin[:4] != b"\x7fELF":
        raise CubinError("not an ELF file")
    if cubin[4] != 2 or cubin[5] != 1:
        raise CubinError("not a 64-bit little-endian ELF file")
    machine, = struct.unpack_from("<H", cubin, 18)
    if machine != _EM_CUDA:
        raise CubinError(f"an ELF file for machine {machine}, not CUDA ({_EM_CUDA})")
    if arch is not None and cubin[7] == _ELFOSABI_CUDA and cubin[8] >= 8:  # ABI 8: the SM in bits 8..15
        flags, = struct.unpack_from("<I", cubin, 0x30)
        built = (flags >> 8) & 0xFF
        wanted = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
        if wanted and built != int(wanted.group(1)):
            raise CubinError(f"built for sm_{built}, not {arch}")
    sections = _read_sections(cubin)
    by_name = {section.name: section for section in sections}
    for name in (".nv.info", f".nv.info.{entry}"):
        if name in by_name:
            for _ in _attributes(by_name[name].data):
                pass
    if entry not in _functions(sections):
        raise CubinError(f"no function {entry!r} in the cubin")


def _read_sections(elf: bytes) -> list[_Section]:
    """Every section of a 64-bit ELF file, each checked to lie inside it."""
    if len(elf) < 64 or elf[:4] != b"\x7fELF" or elf[4] != 2:
        raise CubinError("not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    if shentsize != _SECTION_HEADER.size or not 0 < shnum <= 65535 or shoff + shnum * shentsize > len(elf):
        raise CubinError("its section headers lie outside the file")
    headers = [_SECTION_HEADER.unpack_from(elf, shoff + i * shentsize) for i in range(shnum)]
    if shstrndx >= shnum:
        raise CubinError("no section-name table")
    names = _contents(elf, headers[shstrndx])
    sections = []
    for name_index, kind, _flags, _addr, offset, size, link, *_ in headers:
        end = names.find(b"\0", name_index)
        if name_index >= len(names) or end < 0:
            raise CubinError("a section name lies outside its table")
        data = b"" if kind == _SHT_NOBITS else _contents(elf, (0, kind, 0, 0, offset, size))
        sections.append(_Section(names[name_index:end].decode(errors="replace"), kind, link, data, size))
    return sections


def _contents(elf: bytes, header: tuple) -> bytes:
    offset, size = header[4], header[5]
    if offset + size > len(elf):
        raise CubinError("a section lies outside the file")
    return elf[offset:offset + size]


def _functions(sections: list[_Section]) -> set[str]:
    """The names of the functions the symbol tables define."""
    found = set()
    for table in sections:
        if table.kind != _SHT_SYMTAB:
            continue
        if table.link >= len(sections):
            raise CubinError("a symbol table without its string table")
        strings = sections[table.link].data
        for position in range(0, len(table.data) - _SYMBOL.size + 1, _SYMBOL.size):
            name_index, info, _other, section, _value, _size = _SYMBOL.unpack_from(table.data, position)
            if info & 0xF == _STT_FUNC and section != 0 and name_index < len(strings):
                end = strings.find(b"\0", name_index)
                found.add(strings[name_index:end if end >= 0 else len(strings)].decode(errors="replace"))
    return found


def _sections(elf: bytes) -> dict[str, _Section]:
    return {section.name: section for section in _read_sections(elf)}


def _data(sections: dict[str, _Section], name: str) -> bytes:
    section = sections.get(name)
    return section.data if section is not None else b""


def _attributes(info: bytes):
    """(attribute, payload) pairs of an .nv.info section."""
    position = 0
    while position + 4 <= len(info):
        fmt, attribute = info[position], info[position + 1]
        if fmt == _EIFMT_SVAL:
            size, = struct.unpack_from("<H", info, position + 2)
            if position + 4 + size > len(info):
                raise CubinError(f".nv.info attribute {attribute:#x} runs past its section")
            yield attribute, info[position + 4:position + 4 + size]
            position += 4 + size
        elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):
            yield attribute, info[position + 2:position + 4]
            position += 4
        else:
            raise CubinError(f"unknown .nv.info format {fmt:#x}")


def read_resources(cubin: bytes, entry: str, dynamic_smem: int = 0) -> Resources:
    """Registers, static shared memory and stack frame of ``entry`` in ``cubin``.

    Spills are not recorded in the cubin: a non-zero stack frame (local memory)
    is reported as spill stores and loads, so that the resource check rejects it.
    """
    sections = _sections(cubin)
    registers = frame = None
    for attribute, payload in _attributes(_data(sections, ".nv.info")):
        if attribute == _EIATTR_REGCOUNT and len(payload) == 8:
            registers = struct.unpack("<II", payload)[1]
        elif attribute == _EIATTR_FRAME_SIZE and len(payload) == 8:
            frame = struct.unpack("<II", payload)[1]
    if registers is None:
        raise CompilerError(f"no register count for {entry} in the cubin")
    shared = sections.get(f".nv.shared.{entry}")
    smem = shared.size if shared is not None else 0
    if shared is not None and any(name.startswith(".nv.shared.reserved") for name in sections):
        # sm_90 cubins count it in a kernel's section, where it has one (a kernel that uses no shared
        # memory has none); ptxas reports do not count it
        smem = max(0, smem - _SYSTEM_RESERVED_SMEM)
    frame = frame or 0
    return Resources(registers=registers, smem_static=smem, smem_dynamic=dynamic_smem,
                     spill_stores=frame, spill_loads=frame, stack_frame=frame)


def parameter_sizes(cubin: bytes, entry: str) -> tuple[int, ...]:
    """The byte size of each of ``entry``'s parameters, in order; empty where the cubin does not say."""
    sizes = {}
    for attribute, payload in _attributes(_data(_sections(cubin), f".nv.info.{entry}")):
        if attribute == _EIATTR_KPARAM_INFO and len(payload) == 12:
            _index, ordinal, _offset, flags = struct.unpack("<IHHI", payload)
            sizes[ordinal] = (flags >> 18) & 0x3FFF
    return tuple(sizes[i] for i in range(len(sizes))) if set(sizes) == set(range(len(sizes))) else ()
