"""NVRTC's C API through ctypes: a compile process loads NVRTC alone, not CuPy and NumPy.

The library is the one CuPy loads, found the same way (``cuda.pathfinder``): pip's
``nvidia-cuda-nvrtc`` (CUDA 13) or ``nvidia-cuda-nvrtc-cu12`` first, then a CUDA toolkit. Importing
CuPy's own NVRTC binding imports CuPy and NumPy, about a third of a second per
process, and a search starts a compile process per core.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools

from autotune.errors import CompilerError

_SUCCESS = 0


@dataclasses.dataclass(frozen=True)
class Output:
    """What one compile gave: ``cubin`` is None when NVRTC refused the source."""

    log: str
    cubin: bytes | None


@functools.cache
def _library() -> ctypes.CDLL:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        path = load_nvidia_dynamic_lib("nvrtc").abs_path
        library = ctypes.CDLL(path)
    except Exception as error:  # pathfinder missing, no NVRTC found, or a library that will not load
        raise CompilerError(f"cannot load NVRTC ({error}); install it with the cuda13 or cuda12 extra: "
                            "pip install 'autotune[cuda13]'") from None
    library.nvrtcGetErrorString.restype = ctypes.c_char_p
    return library


def _check(result: int, call: str) -> None:
    if result != _SUCCESS:
        message = _library().nvrtcGetErrorString(result).decode(errors="replace")
        raise CompilerError(f"{call}: {message}")


def version() -> tuple[int, int]:
    """NVRTC's (major, minor); raises CompilerError when NVRTC cannot be loaded."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def compile_program(code: str, name: str, options: list[str], headers: tuple[tuple[str, str], ...] = ()) -> Output:
    """Compile ``code`` (file name ``name`` in messages) with ``options``: the log, and the cubin
    when it compiled. ``headers`` are (name, text) of the files it may include by those names, in memory."""
    library = _library()
    program = ctypes.c_void_p()
    count = len(headers)
    texts = (ctypes.c_char_p * count)(*(text.encode() for _, text in headers)) if count else None
    names = (ctypes.c_char_p * count)(*(header.encode() for header, _ in headers)) if count else None
    _check(library.nvrtcCreateProgram(ctypes.byref(program), code.encode(), name.encode(), count, texts, names),
           "nvrtcCreateProgram")
    try:
        encoded = [option.encode() for option in options]
        result = library.nvrtcCompileProgram(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
        log = _log(library, program)
        if result != _SUCCESS:
            return Output(log or library.nvrtcGetErrorString(result).decode(errors="replace"), None)
        return Output(log, _cubin(library, program))
    finally:
        library.nvrtcDestroyProgram(ctypes.byref(program))


def _log(library: ctypes.CDLL, program: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    _check(library.nvrtcGetProgramLogSize(program, ctypes.byref(size)), "nvrtcGetProgramLogSize")
    text = ctypes.create_string_buffer(size.value)
    _check(library.nvrtcGetProgramLog(program, text), "nvrtcGetProgramLog")
    return text.value.decode(errors="replace")


def _cubin(library: ctypes.CDLL, program: ctypes.c_void_p) -> bytes:
    size = ctypes.c_size_t()
    _check(library.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
    cubin = ctypes.create_string_buffer(size.value)
    _check(library.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
    return cubin.raw
