"""What a kernel's CUDA source may include, checked before NVRTC sees it.

NVRTC opens whatever file an ``#include`` names (an absolute path, ``..`` out of
a header folder, a file beside the including file, which for the source itself
is the working directory), and what it reads lands in its error log. A family's
template may come from someone else, so the source it renders may include only

* header files of the family's own folder (``.h``, ``.cuh``, ...; no hidden
  ones), named relative to it, as ``"name"`` or ``<name>``: these are read here
  and handed to NVRTC in memory (:func:`family_headers`), which it takes before
  any file; and
* CUDA headers, as ``<name>``: NVRTC looks for those in the CUDA header folders
  it is given (:func:`autotune.kernel.compile.include_dirs`) and among its
  built-in headers, never beside the including file. A name that leads out of
  those folders (a link) is refused.

So NVRTC opens no file outside the CUDA header folders. (Its option
``--no-source-include`` would keep it from looking beside the including file
too, but the CUDA headers themselves include their neighbours that way.)

Every include is a literal name: computed includes (``#include MACRO``),
``#include_next``, ``#import``, ``#embed`` and ``__has_include`` are refused, as
is anything this reading cannot be sure NVRTC reads alike (a raw string
literal, a lone carriage return, a backslash before spaces at a line's end, a
trigraph, a character outside ASCII in code). The source is read as the
preprocessor reads it: line splices first, then comments (a comment may sit
between ``#`` and ``include``, and a block comment may span lines), with
``%:`` for ``#``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from autotune.errors import SpaceError

MAX_HEADERS = 64  # files of a family's folder one kernel may include
MAX_HEADER_BYTES = 1 << 20  # the largest such file
MAX_NAME_CHARS = 255
HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc", ".cu")  # what a family's own headers are named

DIRECTIVES = frozenset({"define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
                        "pragma", "error", "warning", "line", "include"})
FILE_DIRECTIVES = frozenset({"include", "include_next", "import", "embed"})  # directives that read a file
FILE_OPERATORS = ("__has_include", "__has_include_next", "__has_embed")  # operators that look for a file

_NAME = re.compile(r"[A-Za-z0-9_+.-]+(?:/[A-Za-z0-9_+.-]+)*")
_PP_NUMBER = r"\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*"  # 1'000'000 holds no character literal
_CODE = rf"(?:{_PP_NUMBER}|[A-Za-z_][A-Za-z0-9_]*|[!$&()*+,\-.:;<=>?@\[\]^`{{|}}~])"  # all punctuation but # % /
_TOKEN = re.compile(rf"""
    (?P<newline>\n)
  | (?P<space>[ \t\f\v]+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<open_comment>/\*)
  | (?P<literal>"(?:[^"\\\n]|\\[^\n])*"?|'(?:[^'\\\n]|\\[^\n])*'?)
  | (?P<hash>%:|\#)
  | (?P<identifier>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<code>(?:{_CODE}|[ \t\f\v])*{_CODE})
  | (?P<operator>[%/])
""", re.VERBOSE | re.DOTALL)  # an unclosed literal ends with its line, as the preprocessor ends it
_FILE_OPERATOR = re.compile(rf"\b(?:{'|'.join(FILE_OPERATORS)})\b")
_RAW_PREFIX = re.compile(r"(?<![A-Za-z0-9_])(?:u8|[uUL])?R\Z")
_LOOSE_INCLUDE = re.compile(r"""(?:\#|%:)[^\n"<]{0,80}?include\w*\s*["<]\s*(/|[^">\n]*\.\.)""")


class IncludeError(SpaceError):
    """A kernel source includes, or might include, a file it may not."""


@dataclasses.dataclass(frozen=True)
class Include:
    """One ``#include`` of a source: the name as written, and whether it was ``"quoted"`` (else ``<angled>``)."""

    name: str
    quoted: bool

    def __str__(self) -> str:
        return f'"{self.name}"' if self.quoted else f"<{self.name}>"


def includes(code: str) -> tuple[Include, ...]:
    """The files ``code`` includes, read as NVRTC's preprocessor reads it.

    Raises:
        IncludeError: a directive or operator that reads a file other than through a literal
            name, a name that is not a plain relative path, or text this reading cannot be
            sure NVRTC reads alike.
    """
    text = _spliced(code)
    match = _LOOSE_INCLUDE.search(text)
    if match:  # whatever the lexing below makes of it
        line = text[match.start():].split("\n", 1)[0]
        raise IncludeError(f"{_clip(line)!r}: absolute paths and .. are never included")
    return tuple(_Lexer(text).includes())


def family_headers(code: str, folder: Path, cuda_dirs: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """The files of ``folder`` that ``code`` includes, directly or through each other, as (name, text),
    for NVRTC to take in memory; every other include must be a CUDA header.

    Raises:
        IncludeError: an include that is neither a file of ``folder`` nor a CUDA header, a file that
            is too large or not text, or more than MAX_HEADERS of them.
    """
    folder = Path(folder).resolve()
    cuda_dirs = tuple(cuda_dirs)
    headers: dict[str, str] = {}
    pending = [("the rendered source", code)]
    while pending:
        where, text = pending.pop(0)
        for include in _checked(where, text):
            if include.name in headers:
                continue
            local = _local_file(folder, include)
            if local is None:
                _check_cuda_header(where, include, cuda_dirs, f"a file of {folder}")
                continue
            if len(headers) >= MAX_HEADERS:
                raise IncludeError(f"{where}: more than {MAX_HEADERS} files of {folder} included")
            headers[include.name] = _read_header(local, include)
            pending.append((include.name, headers[include.name]))
    return tuple(headers.items())


def check_source(code: str, headers: Iterable[tuple[str, str]], cuda_dirs: Iterable[str]) -> None:
    """The check NVRTC's input passes before every compile: ``code`` and ``headers`` include only
    each other and CUDA headers.

    Raises:
        IncludeError: as :func:`includes`, or an include that is neither one of ``headers`` nor a
            CUDA header.
    """
    headers = dict(headers)
    cuda_dirs = tuple(cuda_dirs)
    for name in headers:
        _check_name("a header", Include(name, True))
    for where, text in (("the source", code), *headers.items()):
        for include in _checked(where, text):
            if include.name not in headers:
                _check_cuda_header(where, include, cuda_dirs, "one of the headers it comes with")


# -- reading a source as the preprocessor does ---------------------------------------------------------


def _spliced(code: str) -> str:
    """``code`` with its line splices joined, refused where NVRTC might read its lines otherwise."""
    if "\0" in code:
        raise IncludeError("the source holds a NUL character")
    text = code.replace("\r\n", "\n")
    if "\r" in text:
        raise IncludeError("the source holds a carriage return that ends no line")
    if re.search(r"\\[ \t\f\v]+\n", text):
        raise IncludeError("the source holds a backslash followed by spaces at the end of a line")
    if "??=" in text or "??/" in text:
        raise IncludeError("the source holds a trigraph (??= or ??/)")
    text = text.replace("\\\n", "")
    if "\\\n" in text:
        raise IncludeError("the source holds a backslash before a line splice")
    return text


class _Lexer:
    """Preprocessing tokens of spliced text, just enough to see every directive and every include."""

    def __init__(self, text: str):
        self.text = text
        self.position = 0
        self.line_start = True  # nothing but spaces and comments since the last newline

    def includes(self) -> Iterator[Include]:
        while (token := self._next()) is not None:
            kind, value = token
            if kind == "hash":
                include = self._directive(self.line_start)
                if include is not None:
                    yield include
                continue
            if kind in ("identifier", "code") and "__has_" in value and (found := _FILE_OPERATOR.search(value)):
                raise IncludeError(f"the source uses {found.group()}, which looks for a file")
            if kind == "newline":
                self.line_start = True
            elif kind not in ("space", "comment"):
                self.line_start = False

    def _next(self, skip_space: bool = False) -> tuple[str, str] | None:
        while self.position < len(self.text):
            match = _TOKEN.match(self.text, self.position)
            if match is None:
                raise IncludeError(f"the source holds {self.text[self.position]!r} outside a comment or a string")
            kind = match.lastgroup
            if kind == "open_comment":
                raise IncludeError("the source holds a /* comment that never ends")
            if kind == "literal" and match.group()[0] == '"' and _raw_prefix(self.text, self.position):
                raise IncludeError("the source holds a raw string literal")
            self.position = match.end()
            if skip_space and kind in ("space", "comment"):
                continue
            return kind, match.group()
        return None

    def _directive(self, at_line_start: bool) -> Include | None:
        """After a ``#``: the include it starts, or None; refuses directives that read files otherwise."""
        self.line_start = False
        start = self.position
        token = self._next(skip_space=True)
        name = token[1] if token is not None and token[0] == "identifier" else None
        if name in FILE_DIRECTIVES and not (at_line_start and name == "include"):
            raise IncludeError(f"the source uses #{name}" + ("" if at_line_start else " outside a directive"))
        if not at_line_start:  # the # or ## operator of a macro, or a stray #
            self.position = start
            return None
        if token is None or token[0] == "newline":
            self.position = start  # the null directive
            return None
        if name not in DIRECTIVES:
            raise IncludeError(f"the source uses the directive #{token[1]}; allowed: {', '.join(sorted(DIRECTIVES))}")
        return self._include_operand() if name == "include" else None

    def _include_operand(self) -> Include:
        """The header name after ``#include``, lexed as one (``//`` and ``/*`` in it are no comment)."""
        text = self.text
        self._skip_spaces_and_block_comments()
        close = {'"': '"', "<": ">"}.get(text[self.position:self.position + 1])
        end = text.find(close, self.position + 1) if close else -1
        line_end = text.find("\n", self.position)
        if close is None or end < 0 or 0 <= line_end < end:
            line = text[self.position:line_end if line_end >= 0 else len(text)]
            raise IncludeError(f"#include {_clip(line)!r} is not a literal \"name\" or <name> (a computed "
                               "#include cannot be checked)")
        include = Include(text[self.position + 1:end], close == '"')
        self.position = end + 1
        token = self._next(skip_space=True)
        if token is not None and token[0] != "newline":
            raise IncludeError(f"#include {include} is followed by {_clip(token[1])!r}")
        if token is not None:
            self.position -= 1  # the newline is the caller's
        return include

    def _skip_spaces_and_block_comments(self) -> None:
        text = self.text
        while True:
            while self.position < len(text) and text[self.position] in " \t\f\v":
                self.position += 1
            if not text.startswith("/*", self.position):
                return
            end = text.find("*/", self.position + 2)
            if end < 0:
                raise IncludeError("the source holds a /* comment that never ends")
            self.position = end + 2


# -- checking names -----------------------------------------------------------------------------------


def _checked(where: str, text: str) -> tuple[Include, ...]:
    try:
        found = includes(text)
    except IncludeError as error:
        raise IncludeError(f"{where}: {error}") from None
    for include in found:
        _check_name(where, include)
    return found


def _check_name(where: str, include: Include) -> Include:
    name = include.name
    parts = name.split("/")
    if len(name) > MAX_NAME_CHARS or not _NAME.fullmatch(name) or any(part.startswith(".") for part in parts):
        raise IncludeError(f"{where} includes {_clip(str(include))}: expected a relative path of letters, digits "
                           "and _ + . - with no part that starts with . (no .., no hidden files)")
    return include


def _local_file(folder: Path, include: Include) -> Path | None:
    """The file of ``folder`` that ``include`` names, or None where it names none; refused where the
    name leads out of the folder (a link)."""
    path = folder / include.name
    if not os.path.lexists(path):
        return None
    resolved = path.resolve()
    if not resolved.is_relative_to(folder) or not resolved.is_file():
        raise IncludeError(f"#include {include}: {include.name} is not a file inside {folder}")
    if path.suffix not in HEADER_SUFFIXES:
        raise IncludeError(f"#include {include}: of its own folder a family includes header files only "
                           f"({', '.join(HEADER_SUFFIXES)})")
    return resolved


def _read_header(path: Path, include: Include) -> str:
    if path.stat().st_size > MAX_HEADER_BYTES:
        raise IncludeError(f"#include {include}: larger than {MAX_HEADER_BYTES} bytes")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise IncludeError(f"#include {include}: cannot read it ({type(error).__name__})") from None


def _check_cuda_header(where: str, include: Include, cuda_dirs: tuple[str, ...], local: str) -> None:
    """``include``, which is not ``local``, is a ``<name>`` that names no file outside the CUDA header
    folders: in each, it is a file inside it, or nothing (NVRTC's built-in headers are no files; a
    name found nowhere fails to compile)."""
    if include.quoted:
        raise IncludeError(f"{where} includes {include}, which is not {local} (include CUDA headers as "
                           f"<{include.name}>)")
    for folder in map(Path, cuda_dirs):
        path = folder / include.name
        if os.path.lexists(path) and not path.resolve().is_relative_to(folder.resolve()):
            raise IncludeError(f"{where} includes {include}, which leads out of the CUDA headers ({folder})")


def _raw_prefix(text: str, position: int) -> bool:
    """Whether the string literal at ``position`` is a raw one (``R"(...)"``, ``u8R"(...)"``, ...)."""
    return _RAW_PREFIX.search(text, max(0, position - 3), position) is not None  # looks behind its start too


def _clip(text: str, length: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= length else text[:length] + "..."
