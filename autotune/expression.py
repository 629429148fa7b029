"""The small expression language of space files and launch contracts, and the format of rule reasons.

Space files come from other people, so both are bounded: an expression is a
whitelisted subset of Python over knob and derived names and a few numeric
fields of ``gpu`` and ``problem``, short, with exponents that are small integer
literals and values that stay within 64 bits; a reason is text with plain
``{NAME}`` fields of knob and derived values and a few ``{gpu.FIELD}`` fields,
with no attribute walks, indexing, conversions or format specs.

A launch contract holds the part of the language that is left once a config's
knob values are folded in (:meth:`Expression.over_sizes`): a
:class:`SizeExpression`, an integer expression over the problem sizes ``M``,
``N`` and ``K`` that Python evaluates and C prints (:meth:`SizeExpression.to_c`)
alike. Contracts are read from table files too, so a size expression is checked
when it is made: it divides only by values that are at least 1 and only values
that are not negative, for every size (so C's division is Python's floor division
and nothing divides by zero), and :meth:`SizeExpression.bounds` says the least and
greatest values it takes over a range of sizes (so a table can refuse one that
leaves 64 bits).
"""

from __future__ import annotations

import ast
import keyword
import re
import string
from collections.abc import Callable, Iterable, Mapping
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
# The globals every expression is evaluated in, made once: eval of an expression assigns no name (the
# language has no ``:=``) and finds ``__builtins__`` there, so it adds nothing to them.
_GLOBALS = {"__builtins__": {}, **FUNCTIONS}
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
            value = eval(self._code, _GLOBALS, names)  # noqa: S307 - whitelisted AST
        except ZeroDivisionError:
            return None
        except (NameError, AttributeError, TypeError, OverflowError, ValueError) as error:
            raise SpaceError(f"{self.where}: {self.text!r}: {error}") from None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= MAX_MAGNITUDE:
            raise SpaceError(f"{self.where}: {self.text!r} is out of range (|value| >= 2**63)")
        return value

    def over_sizes(self, names: dict[str, Any]) -> SizeExpression:
        """This expression with its knob and derived values and ``gpu.FIELD`` taken from ``names`` (which
        holds ``gpu``), ``problem.m``, ``problem.n`` and ``problem.k`` written ``M``, ``N`` and ``K``, and
        every part that reads none of those computed: ``cdiv(problem.n, BN)`` with BN = 128 is ``cdiv(N, 128)``.

        Raises:
            SpaceError: a part that reads the sizes is not of the language of :class:`SizeExpression`, or a
                part computed is not an integer.
        """
        folded = _fold(ast.parse(self.text, mode="eval").body, names, f"{self.where}: {self.text!r}")
        return SizeExpression(ast.unparse(folded), self.where)


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


# -- expressions over the problem sizes: what a launch contract holds ------------------------------------------

SIZES = ("M", "N", "K")
PROBLEM_SIZES = {"m": "M", "n": "N", "k": "K"}  # problem.m in a space file is M in a size expression
MAX_SIZE = 2**31 - 1  # the largest M, N or K a kernel is launched on (the sizes are 32-bit ints)
MAX_SIZE_EXPRESSION_CHARS = 1000
MAX_SIZE_EXPRESSION_DEPTH = 32  # nested operations
MAX_CONSTANT = 2**31  # every integer written in a size expression is smaller than this in magnitude
Domain = Mapping[str, tuple[int, int]]  # each size's least and greatest value
EVERY_SIZE: Domain = {size: (1, MAX_SIZE) for size in SIZES}

_SIZE_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%"}  # Python -> C
_SIZE_COMPARISONS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_SIZE_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.Compare, ast.IfExp, ast.Call, ast.Name,
               ast.Load, ast.Constant, *_SIZE_OPERATORS, *_SIZE_COMPARISONS)


class SizeExpression:
    """An integer expression over ``M``, ``N`` and ``K``: integers, ``+ - * // %``, unary ``-``, ``cdiv(a, b)``
    (the ceiling of a / b), ``min(a, b)``, ``max(a, b)``, comparisons (1 or 0) and ``a if cond else b``.

    Args:
        text: the expression, e.g. ``cdiv(N, 128) * 2``.
        where: what it is, for error messages (a kernel's grid, say).

    Raises:
        SpaceError: the text is too long or too deep, does not parse, holds a comment or anything
            outside the language, or divides by a value that can be below 1 (or divides a value that
            can be negative) for some sizes from 1 to MAX_SIZE.
    """

    def __init__(self, text: object, where: str = "expression"):
        if not isinstance(text, str):
            raise SpaceError(f"{where}: {text!r} is not an expression over M, N and K (a string)")
        if len(text) > MAX_SIZE_EXPRESSION_CHARS:
            raise SpaceError(f"{where}: expression of {len(text)} characters; at most {MAX_SIZE_EXPRESSION_CHARS}")
        if "#" in text or not text.isprintable():
            raise SpaceError(f"{where}: {text!r} holds a comment or a control character")
        try:
            tree = ast.parse(text, mode="eval")
        except (SyntaxError, RecursionError, MemoryError) as error:
            raise SpaceError(f"{where}: cannot parse {text!r}: {getattr(error, 'msg', type(error).__name__)}") from None
        self.text, self.where = text, where
        _check_depth(tree.body, MAX_SIZE_EXPRESSION_DEPTH, f"{where}: {text!r}")
        for node in ast.walk(tree):
            self._check_node(node)
        called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
        if any(isinstance(node, ast.Name) and node.id in FUNCTIONS and id(node) not in called for node in ast.walk(tree)):
            raise SpaceError(f"{where}: {text!r}: {', '.join(FUNCTIONS)} may only be called")
        self._body = tree.body
        self.bounds(EVERY_SIZE)  # divides safely for every size
        self._function = _sizes_function([tree.body], f"<{where}>")

    def _check_node(self, node: ast.AST) -> None:
        refuse = f"{self.where}: {self.text!r}"
        if not isinstance(node, _SIZE_NODES):
            raise SpaceError(f"{refuse}: {type(node).__name__} is not part of an expression over M, N and K")
        if isinstance(node, ast.Name) and node.id not in SIZES and node.id not in FUNCTIONS:
            raise SpaceError(f"{refuse}: unknown name {node.id!r} (expected M, N or K)")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
                                               and len(node.args) == 2 and not node.keywords):
            raise SpaceError(f"{refuse}: only {', '.join(FUNCTIONS)} of two values may be called")
        if isinstance(node, ast.Constant) and (type(node.value) is not int or abs(node.value) >= MAX_CONSTANT):
            raise SpaceError(f"{refuse}: {node.value!r} is not an integer below 2**31")

    def __call__(self, m: int, n: int, k: int) -> int:
        """The value at an ``m x n x k`` problem."""
        return self._function(m, n, k)[0]

    def bounds(self, domain: Domain, limit: int | None = None) -> tuple[int, int]:
        """The least and greatest values over the sizes of ``domain`` (each size's least and greatest);
        SpaceError where it divides unsafely there, or where a part of it reaches ``limit`` in magnitude."""
        return _bounds(self._body, domain, limit, f"{self.where}: {self.text!r}")

    def to_c(self) -> str:
        """The expression in C over ``int64_t M, N, K`` (``cdiv``, ``min`` and ``max`` become the macros
        ``AUTOTUNE_CDIV``, ``AUTOTUNE_MIN`` and ``AUTOTUNE_MAX``)."""
        return _c(self._body)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SizeExpression) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"SizeExpression({self.text!r})"

    def __reduce__(self):
        return SizeExpression, (self.text, self.where)


def _fold(node: ast.expr, names: dict[str, Any], refuse: str) -> ast.expr:
    """``node`` with every part free of ``problem.m/n/k`` computed from ``names`` and those written M, N, K."""
    if not _reads_sizes(node):
        return ast.Constant(_integer(node, names, refuse))
    if isinstance(node, ast.Attribute):
        return ast.Name(PROBLEM_SIZES[node.attr], ast.Load())
    if isinstance(node, ast.IfExp):
        test = _fold(node.test, names, refuse)
        if isinstance(test, ast.Constant):
            return _fold(node.body if test.value else node.orelse, names, refuse)
        return ast.IfExp(test, _fold(node.body, names, refuse), _fold(node.orelse, names, refuse))
    if isinstance(node, ast.BinOp) and type(node.op) in _SIZE_OPERATORS:
        return _simplify(ast.BinOp(_fold(node.left, names, refuse), node.op, _fold(node.right, names, refuse)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return ast.UnaryOp(ast.USub(), _fold(node.operand, names, refuse))
    if isinstance(node, ast.Compare):
        return ast.Compare(_fold(node.left, names, refuse), node.ops,
                           [_fold(part, names, refuse) for part in node.comparators])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        return _simplify(ast.Call(ast.Name(node.func.id, ast.Load()),
                                  [_fold(argument, names, refuse) for argument in node.args], []))
    if isinstance(node, ast.BoolOp):
        return _fold_bool(node, names, refuse)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ast.IfExp(_fold(node.operand, names, refuse), ast.Constant(0), ast.Constant(1))
    raise SpaceError(f"{refuse}: {ast.unparse(node)} cannot be part of an expression over M, N and K")


def _fold_bool(node: ast.BoolOp, names: dict[str, Any], refuse: str) -> ast.expr:
    """``a and b`` / ``a or b`` as truth values (1 or 0) in the language of :class:`SizeExpression`: the parts
    computed short-circuit or drop out, the rest nest as ``x if a else 0`` / ``1 if a else x``."""
    is_or = isinstance(node.op, ast.Or)
    kept = []
    for part in (_fold(value, names, refuse) for value in node.values):
        if isinstance(part, ast.Constant):
            if bool(part.value) == is_or:
                return ast.Constant(int(is_or))  # decides the whole
            continue  # neither decides nor matters
        kept.append(part)
    if not kept:
        return ast.Constant(int(not is_or))
    last = kept[-1]
    result = last if isinstance(last, ast.Compare) else ast.IfExp(last, ast.Constant(1), ast.Constant(0))
    for part in reversed(kept[:-1]):
        result = ast.IfExp(part, ast.Constant(1), result) if is_or else ast.IfExp(part, result, ast.Constant(0))
    return result


def _reads_sizes(node: ast.AST) -> bool:
    return any(isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "problem"
               and part.attr in PROBLEM_SIZES for part in ast.walk(node))


def _integer(node: ast.expr, names: dict[str, Any], refuse: str) -> int:
    """The value of ``node`` (which reads no problem size) for ``names``: an integer (True is 1)."""
    code = compile(ast.fix_missing_locations(ast.Expression(node)), refuse, "eval")
    try:
        value = eval(code, {"__builtins__": {}, **FUNCTIONS}, names)  # noqa: S307 - part of a checked Expression
    except ZeroDivisionError:
        raise SpaceError(f"{refuse}: {ast.unparse(node)} divides by zero") from None
    except (NameError, AttributeError, TypeError, OverflowError, ValueError) as error:
        raise SpaceError(f"{refuse}: {ast.unparse(node)} cannot be computed: {error}") from None
    if isinstance(value, bool):
        value = int(value)
    if type(value) is not int or abs(value) >= MAX_CONSTANT:
        raise SpaceError(f"{refuse}: {ast.unparse(node)} is {value!r}, not an integer below 2**31")
    return value


def _simplify(node: ast.expr) -> ast.expr:
    """Drop the identities a substitution leaves behind: ``1 * x``, ``x * 1``, ``x // 1``, ``x + 0``,
    ``x - 0`` and ``cdiv(x, 1)``."""
    def is_constant(part: ast.expr, value: int) -> bool:
        return isinstance(part, ast.Constant) and part.value == value

    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Mult) and is_constant(node.left, 1):
            return node.right
        if isinstance(node.op, (ast.Mult, ast.FloorDiv)) and is_constant(node.right, 1):
            return node.left
        if isinstance(node.op, (ast.Add, ast.Sub)) and is_constant(node.right, 0):
            return node.left
    if isinstance(node, ast.Call) and node.func.id == "cdiv" and is_constant(node.args[1], 1):  # type: ignore[attr-defined]
        return node.args[0]
    return node


def sizes_function(expressions: Iterable[SizeExpression]) -> Callable[[int, int, int], tuple[int, ...]]:
    """One function of ``(M, N, K)`` giving the values of ``expressions`` (a launcher's hot path)."""
    expressions = list(expressions)
    return _sizes_function([e._body for e in expressions], f"<{', '.join(e.where for e in expressions)}>")


def _sizes_function(bodies: list[ast.expr], name: str) -> Callable[[int, int, int], tuple[int, ...]]:
    """``lambda M, N, K: (int(body), ...)`` compiled from the checked trees (never from text)."""
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(size) for size in SIZES], kwonlyargs=[],
                              kw_defaults=[], defaults=[])
    values = [ast.Call(ast.Name("int", ast.Load()), [body], []) for body in bodies]
    tree = ast.Expression(ast.Lambda(arguments, ast.Tuple(values, ast.Load())))
    code = compile(ast.fix_missing_locations(tree), name, "eval")
    return eval(code, {"__builtins__": {"int": int}, **FUNCTIONS})  # noqa: S307 - a checked size expression


def _check_depth(node: ast.AST, limit: int, refuse: str) -> None:
    level = [node]
    for _ in range(limit):
        level = [child for parent in level for child in ast.iter_child_nodes(parent)
                 if not isinstance(child, (ast.Load, ast.operator, ast.cmpop, ast.unaryop))]
        if not level:
            return
    raise SpaceError(f"{refuse}: nested more than {limit} deep")


def _bounds(node: ast.AST, domain: Domain, limit: int | None, refuse: str) -> tuple[int, int]:
    """Interval arithmetic over ``domain``: the least and greatest value of ``node``."""
    if isinstance(node, ast.Constant):
        low = high = int(node.value)
    elif isinstance(node, ast.Name):
        low, high = domain[node.id]
    elif isinstance(node, ast.UnaryOp):
        inner = _bounds(node.operand, domain, limit, refuse)
        low, high = -inner[1], -inner[0]
    elif isinstance(node, ast.BinOp):
        low, high = _operate(type(node.op), _bounds(node.left, domain, limit, refuse),
                             _bounds(node.right, domain, limit, refuse), node, refuse)
    elif isinstance(node, ast.Call):
        function = node.func.id  # type: ignore[attr-defined]
        left, right = (_bounds(argument, domain, limit, refuse) for argument in node.args)
        if function == "cdiv":
            low, high = _operate("cdiv", left, right, node, refuse)
        else:
            pick = min if function == "min" else max
            low, high = pick(left[0], right[0]), pick(left[1], right[1])
    elif isinstance(node, ast.Compare):
        for part in (node.left, *node.comparators):
            _bounds(part, domain, limit, refuse)
        low, high = 0, 1
    elif isinstance(node, ast.IfExp):
        _bounds(node.test, domain, limit, refuse)
        body, orelse = _bounds(node.body, domain, limit, refuse), _bounds(node.orelse, domain, limit, refuse)
        low, high = min(body[0], orelse[0]), max(body[1], orelse[1])
    else:
        raise SpaceError(f"{refuse}: {type(node).__name__} is not part of an expression over M, N and K")
    if limit is not None and max(-low, high) >= limit:
        raise SpaceError(f"{refuse}: {ast.unparse(node)} reaches {high if high >= -low else low}, "
                         f"beyond the 64-bit range, for sizes up to {_largest(domain)}")
    return low, high


def _operate(op, left: tuple[int, int], right: tuple[int, int], node: ast.AST, refuse: str) -> tuple[int, int]:
    if op in (ast.Add, ast.Sub, ast.Mult):
        if op is ast.Add:
            return left[0] + right[0], left[1] + right[1]
        if op is ast.Sub:
            return left[0] - right[1], left[1] - right[0]
        products = [a * b for a in left for b in right]
        return min(products), max(products)
    if right[0] < 1:
        raise SpaceError(f"{refuse}: {ast.unparse(node)} divides by a value that can be {right[0]} "
                         "(a divisor must be at least 1 for every M, N and K)")
    if left[0] < 0:
        raise SpaceError(f"{refuse}: {ast.unparse(node)} divides a value that can be {left[0]} "
                         "(what is divided must not be negative for any M, N and K)")
    if op is ast.Mod:
        return 0, min(left[1], right[1] - 1)
    if op is ast.FloorDiv:
        return left[0] // right[1], left[1] // right[0]
    return -(-left[0] // right[1]), -(-left[1] // right[0])  # cdiv


def _largest(domain: Domain) -> str:
    return ", ".join(f"{size} {domain[size][1]}" for size in SIZES)


def _c(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.UnaryOp):
        return f"(-{_c(node.operand)})"
    if isinstance(node, ast.BinOp):
        return f"({_c(node.left)} {_SIZE_OPERATORS[type(node.op)]} {_c(node.right)})"
    if isinstance(node, ast.Compare):  # a chain a < b < c is (a < b) && (b < c), as in Python
        sides = [node.left, *node.comparators]
        parts = [f"({_c(left)} {_SIZE_COMPARISONS[type(op)]} {_c(right)})"
                 for left, op, right in zip(sides, node.ops, sides[1:])]
        return parts[0] if len(parts) == 1 else "(" + " && ".join(parts) + ")"
    if isinstance(node, ast.IfExp):
        return f"({_c(node.test)} ? {_c(node.body)} : {_c(node.orelse)})"
    return f"AUTOTUNE_{node.func.id.upper()}({', '.join(_c(a) for a in node.args)})"  # type: ignore[attr-defined]
