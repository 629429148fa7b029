"""Read a kernel's resource usage and parameters from the cubin itself (ELF ``.nv.info`` attributes).

Resources are read here when NVRTC's log carries no ptxas report for a compile,
which happens with some NVRTC builds for sources they have compiled before;
parameter sizes let the launcher check that a kernel takes what it passes.
"""

from __future__ import annotations

import struct

from autotune.errors import CompilerError
from autotune.records import Resources

_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIATTR_KPARAM_INFO = 0x17  # per parameter: index, ordinal, offset, size and flags
_SYSTEM_RESERVED_SMEM = 1024  # per block, reserved for the CUDA runtime from sm_80 on
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


def _sections(elf: bytes) -> dict[str, bytes]:
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        raise CompilerError("not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    sections = {}
    for name_index, kind, _flags, _addr, offset, size, *_ in headers:
        end = elf.index(b"\0", names_offset + name_index)
        name = elf[names_offset + name_index:end].decode()
        sections[name] = b"\0" * size if kind == 8 else elf[offset:offset + size]  # 8: SHT_NOBITS
    return sections


def _attributes(info: bytes):
    """(attribute, payload) pairs of an .nv.info section."""
    position = 0
    while position + 4 <= len(info):
        fmt, attribute = info[position], info[position + 1]
        if fmt == _EIFMT_SVAL:
            size, = struct.unpack_from("<H", info, position + 2)
            yield attribute, info[position + 4:position + 4 + size]
            position += 4 + size
        elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):
            yield attribute, info[position + 2:position + 4]
            position += 4
        else:
            raise CompilerError(f"unknown .nv.info format {fmt:#x}")


def read_resources(cubin: bytes, entry: str, dynamic_smem: int = 0) -> Resources:
    """Registers, static shared memory and stack frame of ``entry`` in ``cubin``.

    Spills are not recorded in the cubin: a non-zero stack frame (local memory)
    is reported as spill stores and loads, so that the resource check rejects it.
    """
    sections = _sections(cubin)
    registers = frame = None
    for attribute, payload in _attributes(sections.get(".nv.info", b"")):
        if attribute == _EIATTR_REGCOUNT and len(payload) == 8:
            registers = struct.unpack("<II", payload)[1]
        elif attribute == _EIATTR_FRAME_SIZE and len(payload) == 8:
            frame = struct.unpack("<II", payload)[1]
    if registers is None:
        raise CompilerError(f"no register count for {entry} in the cubin")
    smem = len(sections.get(f".nv.shared.{entry}", b""))
    if any(name.startswith(".nv.shared.reserved") for name in sections):
        smem -= _SYSTEM_RESERVED_SMEM  # sm_90 cubins include it; ptxas reports do not
    frame = frame or 0
    return Resources(registers=registers, smem_static=smem, smem_dynamic=dynamic_smem,
                     spill_stores=frame, spill_loads=frame, stack_frame=frame)


def parameter_sizes(cubin: bytes, entry: str) -> tuple[int, ...]:
    """The byte size of each of ``entry``'s parameters, in order; empty where the cubin does not say."""
    sizes = {}
    for attribute, payload in _attributes(_sections(cubin).get(f".nv.info.{entry}", b"")):
        if attribute == _EIATTR_KPARAM_INFO and len(payload) == 12:
            _index, ordinal, _offset, flags = struct.unpack("<IHHI", payload)
            sizes[ordinal] = (flags >> 18) & 0x3FFF
    return tuple(sizes[i] for i in range(len(sizes))) if set(sizes) == set(range(len(sizes))) else ()
