"""The small expression language of space files, and the format of rule reasons.

Space files come from other people, so both are bounded: an expression is a
whitelisted subset of Python over knob and derived names and a few numeric
fields of ``gpu`` and ``problem``, short, with exponents that are small integer
literals and values that stay within 64 bits; a reason is text with plain
``{NAME}`` fields of knob and derived values and a few ``{gpu.FIELD}`` fields,
with no attribute walks, indexing, conversions or format specs.
"""

from __future__ import annotations

import ast
import keyword
import re
import string
from collections.abc import Iterable
from typing import Any

from autotune.errors import SpaceError

MAX_EXPRESSION_CHARS = 400
MAX_EXPONENT = 64
MAX_MAGNITUDE = 2**63  # every value an expression yields is smaller than this
MAX_REASON_CHARS = 300

GPU_FIELDS = frozenset({
    "key", "sm", "arch", "sms", "smem_per_block", "smem_per_block_optin", "smem_per_sm", "regs_per_sm",
    "regs_per_block", "max_threads_per_block", "max_threads_per_sm", "l2_bytes", "has_cp_async",
})
PROBLEM_FIELDS = frozenset({"m", "n", "k", "alpha", "beta"})
_EXPRESSION_FIELDS = {"gpu": GPU_FIELDS - {"key", "sm"}, "problem": PROBLEM_FIELDS}  # numbers only
GPU_REASON_FIELDS = GPU_FIELDS - {"has_cp_async"}

FUNCTIONS = {"min": min, "max": max, "cdiv": lambda a, b: -(-a // b)}
RESERVED_NAMES = frozenset({"gpu", "problem", "NAME", *FUNCTIONS, *keyword.kwlist, *keyword.softkwlist})
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def check_name(kind: str, name: object, where: str) -> str:
    """``name`` if it is a plain identifier (a letter, then letters, digits or ``_``; at most 64)
    that is not reserved; SpaceError naming ``kind`` and the value otherwise."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SpaceError(f"{where}: {kind} {name!r} is not a name (a letter, then letters, digits or _; "
                         "at most 64 characters)")
    if name in RESERVED_NAMES:
        raise SpaceError(f"{where}: {kind} {name!r} is reserved (reserved: gpu, problem, NAME, "
                         f"{', '.join(FUNCTIONS)} and Python keywords)")
    return name


class Expression:
    """A whitelisted, bounded Python expression, checked and compiled once, evaluated many times.

    Args:
        text: the expression (a string, or an integer or boolean from TOML).
        where: where it comes from, for error messages (file, table, key).
        names: the knob and derived names it may read.

    Raises:
        SpaceError: the text is too long, does not parse, uses something outside the
            whitelist, reads an unknown name, or raises to anything but a small literal.
    """

    _ALLOWED = (
        ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Call,
        ast.Name, ast.Load, ast.Attribute, ast.Constant,
        ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd,
        ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
        ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
    )
    FUNCTIONS = FUNCTIONS

    def __init__(self, text: object, where: str, names: Iterable[str]):
        if isinstance(text, bool) or not isinstance(text, (str, int)):
            raise SpaceError(f"{where}: {text!r} is not an expression (a string or an integer)")
        text = str(text)
        if len(text) > MAX_EXPRESSION_CHARS:
            raise SpaceError(f"{where}: expression of {len(text)} characters; at most {MAX_EXPRESSION_CHARS}")
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as error:
            raise SpaceError(f"{where}: cannot parse {text!r}: {error.msg}") from None
        known = frozenset(names)
        for node in ast.walk(tree):
            self._check_node(node, text, where, known)
        self._check_context_names(tree, text, where)
        self.text = text
        self.where = where
        self.names = frozenset(node.id for node in ast.walk(tree) if isinstance(node, ast.Name)) - set(FUNCTIONS)
        self._code = compile(tree, where, "eval")

    def _check_node(self, node: ast.AST, text: str, where: str, known: frozenset[str]) -> None:
        if not isinstance(node, self._ALLOWED):
            raise SpaceError(f"{where}: {type(node).__name__} is not allowed in {text!r}")
        if isinstance(node, ast.Constant) and type(node.value) not in (int, float, bool):
            raise SpaceError(f"{where}: only numbers and True/False may be written in {text!r}, "
                             f"not {node.value!r}")
        if isinstance(node, ast.Attribute):
            fields = _EXPRESSION_FIELDS.get(node.value.id) if isinstance(node.value, ast.Name) else None
            if fields is None or node.attr not in fields:
                raise SpaceError(f"{where}: {ast.unparse(node)!r} in {text!r}: expected gpu.FIELD or problem.FIELD "
                                 f"with FIELD one of {', '.join(sorted(fields or GPU_FIELDS | PROBLEM_FIELDS))}")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and not node.keywords
        ):
            raise SpaceError(f"{where}: only {', '.join(FUNCTIONS)} may be called in {text!r}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            self._check_power(node, text, where)
        if isinstance(node, ast.Name):
            self._check_name_use(node, tree_text=text, where=where, known=known)

    @staticmethod
    def _check_context_names(tree: ast.AST, text: str, where: str) -> None:
        """``gpu`` and ``problem`` are read only through one of their fields."""
        uses = sum(isinstance(node, ast.Name) and node.id in _EXPRESSION_FIELDS for node in ast.walk(tree))
        fields = sum(isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                     and node.value.id in _EXPRESSION_FIELDS for node in ast.walk(tree))
        if uses != fields:
            raise SpaceError(f"{where}: gpu and problem may only be read as gpu.FIELD or problem.FIELD in {text!r}")

    @staticmethod
    def _check_power(node: ast.BinOp, text: str, where: str) -> None:
        exponent = node.right
        if not (isinstance(exponent, ast.Constant) and type(exponent.value) is int
                and 0 <= exponent.value <= MAX_EXPONENT):
            raise SpaceError(f"{where}: the exponent of ** must be an integer literal 0..{MAX_EXPONENT} "
                             f"in {text!r}")
        if any(isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Pow) for inner in ast.walk(node.left)):
            raise SpaceError(f"{where}: ** inside the base of ** in {text!r}")

    @staticmethod
    def _check_name_use(node: ast.Name, tree_text: str, where: str, known: frozenset[str]) -> None:
        if node.id in FUNCTIONS or node.id in known or node.id in _EXPRESSION_FIELDS:
            return
        raise SpaceError(f"{where}: {node.id!r} in {tree_text!r} is not a knob or a derived value defined above it")

    def __call__(self, names: dict[str, Any]) -> Any:
        """The value for ``names``; None where it divides by zero."""
        try:
            value = eval(self._code, {"__builtins__": {}, **FUNCTIONS}, names)  # noqa: S307 - whitelisted AST
        except ZeroDivisionError:
            return None
        except (NameError, AttributeError, TypeError, OverflowError, ValueError) as error:
            raise SpaceError(f"{self.where}: {self.text!r}: {error}") from None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= MAX_MAGNITUDE:
            raise SpaceError(f"{self.where}: {self.text!r} is out of range (|value| >= 2**63)")
        return value


class Reason:
    """A rule's reason: text with ``{NAME}`` fields (knob and derived values) and ``{gpu.FIELD}``
    fields (FIELD one of :data:`GPU_REASON_FIELDS`), checked once and filled in without Python's
    format machinery, so a reason can read nothing else.

    Raises:
        SpaceError: the reason is not a string, is too long, or has any other kind of field.
    """

    def __init__(self, text: object, where: str, names: Iterable[str]):
        if not isinstance(text, str):
            raise SpaceError(f"{where}: reason {text!r} is not a string")
        if len(text) > MAX_REASON_CHARS:
            raise SpaceError(f"{where}: reason of {len(text)} characters; at most {MAX_REASON_CHARS}")
        known = frozenset(names)
        self.text = text
        self._pieces: list[tuple[str, str | None]] = []  # (literal text, field or None)
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as error:
            raise SpaceError(f"{where}: reason {text!r}: {error}") from None
        for literal, field, spec, conversion in parsed:
            if field is not None:
                _check_reason_field(field, spec, conversion, text, where, known)
            self._pieces.append((literal, field))

    @property
    def fields(self) -> frozenset[str]:
        """The names the reason reads: ``{gpu.key}`` reads ``gpu``."""
        return frozenset(field.split(".")[0] for _, field in self._pieces if field)

    def format(self, names: dict[str, Any]) -> str:
        """The reason with its fields filled in from ``names`` (which holds ``gpu``)."""
        out = []
        for literal, field in self._pieces:
            out.append(literal)
            if field is None:
                continue
            if field.startswith("gpu."):
                out.append(str(getattr(names["gpu"], field[4:])))
            else:
                out.append(str(names.get(field)))
        return "".join(out)


def _check_reason_field(field: str, spec: str | None, conversion: str | None, text: str, where: str,
                        known: frozenset[str]) -> None:
    if spec or conversion:
        raise SpaceError(f"{where}: reason {text!r}: {{{field}}} may not carry a conversion or format spec")
    if field.startswith("gpu.") and field[4:] in GPU_REASON_FIELDS:
        return
    if field in known:
        return
    raise SpaceError(f"{where}: reason {text!r}: field {{{field}}} is not a knob, a derived value or "
                     f"gpu.FIELD with FIELD one of {', '.join(sorted(GPU_REASON_FIELDS))}")
