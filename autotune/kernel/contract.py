"""A kernel's launch contract: everything a program needs to launch one tuned config.

Every kernel autotune builds takes ``(const T* A, const T* B, T* C, int M,
int N, int K, float alpha, float beta)``, row-major, followed by its TMA tensor
maps (each a 128-byte ``CUtensorMap`` passed by value, encoded for the launch's
operands, see :mod:`autotune.kernel_abi`). The contract says the shapes the kernel is
built for (``serves``: every shape, or, for a build specialized to whole tiles, those
where its expression holds), the block size,
the dynamic shared memory (and whether the kernel must opt in to more than
48 KB), the tensor maps, and the grid, and the k-tiles a block runs through (what the selection table's
time scaling counts, :mod:`autotune.select.scaling`).

The grid depends on the problem, so each of its three sides (and the k-tiles) is an integer
expression over ``M``, ``N`` and ``K``: the space file's launch expression with
every knob, derived value and GPU property replaced by its value, in a small
language that Python and C both read the same way once :func:`to_c` has
rewritten it: integers, ``M N K``, ``+ - * // %``, ``cdiv(a, b)`` (the
ceiling of a / b), ``min``, ``max`` and ``a if cond else b``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import operator
import tomllib
from collections.abc import Callable, Iterable
from typing import Any

from autotune.errors import SpaceError
from autotune.gpu_specs import GpuSpec
from autotune.kernel_abi import TensorMapSpec
from autotune.problem import GemmProblem
from autotune.space.family import Config, SearchSpace

SIZES = ("M", "N", "K")
_PROBLEM_SIZES = {"m": "M", "n": "N", "k": "K"}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_C_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%"}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_C_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
K_TILES = "cdiv(cdiv(problem.k, BK), SPLIT_K)"  # k-tiles a block runs through, in space-file terms
_FUNCTIONS: dict[str, Callable[..., int]] = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def busiest_sm_work(grid: Iterable[int], tiles: int, sms: int) -> int:
    """The k-tiles the busiest SM runs: its turns of blocks (``cdiv(blocks, sms)``) times each block's k-tiles."""
    blocks = 1
    for side in grid:
        blocks *= side
    return cdiv(blocks, sms) * tiles


@dataclasses.dataclass(frozen=True)
class LaunchContract:
    """How to launch one compiled config (see the module docstring for the kernel's arguments)."""

    entry: str  # the kernel's extern "C" symbol
    target: str  # the NVRTC/ptxas target it is built for: sm_90, sm_90a, ...
    block: tuple[int, int, int]
    grid: tuple[str, str, str]  # expressions over M, N, K
    dynamic_smem: int  # bytes passed at launch
    opt_in: bool  # raise the kernel's dynamic shared-memory limit to dynamic_smem before launching
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    k_tiles: str = "K"  # expression over M, N, K: the k-tiles each block runs through
    serves: str = "1"  # expression over M, N, K: nonzero for the shapes the kernel is built for (1: any)

    def serves_shape(self, m: int, n: int, k: int) -> bool:
        """Whether the kernel is built for an ``m x n x k`` problem (a build for whole tiles is not
        built for the others; see ``[specialize]`` in :mod:`autotune.space.family`)."""
        return self.serves == "1" or bool(self._serves_function(m, n, k))

    def grid_for(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """The grid of a launch on an ``m x n x k`` problem."""
        sizes = {"M": m, "N": n, "K": k}
        return tuple(int(_evaluate(ast.parse(text, mode="eval").body, sizes)) for text in self.grid)  # type: ignore[return-value]

    def work(self, m: int, n: int, k: int, sms: int) -> int:
        """The busiest SM's k-tiles on an ``m x n x k`` problem on a GPU of ``sms`` SMs (:func:`busiest_sm_work`)."""
        return busiest_sm_work(self._grid_function(m, n, k), self._k_tiles_function(m, n, k), sms)

    def grid_function(self) -> Callable[[int, int, int], tuple[int, int, int]]:
        """:meth:`grid_for` with the expressions compiled once (for a launcher's hot path)."""
        return self._grid_function

    @functools.cached_property
    def _grid_function(self) -> Callable[[int, int, int], tuple[int, int, int]]:
        return _compiled(f"({', '.join(self.grid)},)", f"<grid of {self.entry}>")

    @functools.cached_property
    def _serves_function(self) -> Callable[[int, int, int], int]:
        return _compiled(self.serves, f"<shapes served by {self.entry}>")

    @functools.cached_property
    def _k_tiles_function(self) -> Callable[[int, int, int], int]:
        return _compiled(self.k_tiles, f"<k-tiles of {self.entry}>")

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "target": self.target,
            "block": list(self.block),
            "grid": list(self.grid),
            "k_tiles": self.k_tiles,
            "serves": self.serves,
            "dynamic_smem": self.dynamic_smem,
            "opt_in": self.opt_in,
            "tensor_maps": [{"name": t.name, "operand": t.operand, "box": list(t.box), "swizzle": t.swizzle}
                            for t in self.tensor_maps],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchContract:
        """Read a contract written by :meth:`to_dict`; raises ValueError/KeyError/TypeError on bad data."""
        grid = tuple(str(text) for text in data["grid"])
        block = tuple(int(side) for side in data["block"])
        if len(grid) != 3 or len(block) != 3:
            raise ValueError("grid and block need three sides each")
        k_tiles = str(data.get("k_tiles", "K"))  # tables written before it: every k-tile counts alike
        serves = str(data.get("serves", "1"))  # tables written before it hold builds for any shape
        for text in (*grid, k_tiles, serves):
            check_expression(text)
        if not str(data["entry"]).isidentifier():
            raise ValueError(f"entry {data['entry']!r} is not an identifier")
        maps = tuple(TensorMapSpec(str(t["name"]), str(t["operand"]), (int(t["box"][0]), int(t["box"][1])),
                                   int(t["swizzle"])) for t in data.get("tensor_maps", []))
        return cls(entry=str(data["entry"]), target=str(data["target"]), block=block, grid=grid,  # type: ignore[arg-type]
                   dynamic_smem=int(data["dynamic_smem"]), opt_in=bool(data["opt_in"]), tensor_maps=maps,
                   k_tiles=k_tiles, serves=serves)


def _compiled(expression: str, name: str) -> Callable:
    """``lambda M, N, K: expression``, compiled once; the expressions were checked by check_expression."""
    code = compile(f"lambda M, N, K: {expression}", name, "eval")
    return eval(code, {"__builtins__": {}, **_FUNCTIONS})  # noqa: S307


def contract_for(space: SearchSpace, config: Config, gpu: GpuSpec) -> LaunchContract:
    """The launch contract of ``config`` built for ``gpu``.

    Raises:
        SpaceError: a launch value other than the grid depends on the problem (it
            could not be written down once for every shape).
    """
    small, large = GemmProblem(1, 1, 1, space.dtype), GemmProblem(40000, 30000, 20000, space.dtype)
    fixed = space.launch(config, gpu, small)
    other = space.launch(config, gpu, large)
    if (fixed.block, fixed.dynamic_smem, fixed.opt_in, fixed.tensor_maps) != (
            other.block, other.dynamic_smem, other.opt_in, other.tensor_maps):
        raise SpaceError(f"{config.name}: block, shared memory or tensor maps depend on the problem size")
    names = {key: value for key, value in space.values(config, gpu).items() if key not in ("gpu", "problem")}
    launch_text = tomllib.loads(space.source_text)["launch"]
    grid = tuple(specialize(str(launch_text[key]), names, gpu) for key in ("grid_x", "grid_y"))
    # A space file may say what a block runs through where it is not its share of one tile's k-tiles
    # ([launch] k_tiles: a persistent kernel's blocks walk several tiles).
    k_tiles = specialize(str(launch_text.get("k_tiles", K_TILES)), {"BK": 1, "SPLIT_K": 1, **names}, gpu)
    # A build specialized to some problems ([specialize] knobs at 1) serves those where each expression holds.
    serves = [specialize(expression.text, names, gpu)
              for knob, expression in space.specialized.items() if names[knob]]
    return LaunchContract(entry=config.name, target=space.target(gpu), block=fixed.block, grid=(*grid, "1"),
                          dynamic_smem=fixed.dynamic_smem, opt_in=fixed.opt_in, tensor_maps=fixed.tensor_maps,
                          k_tiles=k_tiles, serves=" * ".join(f"({text})" for text in serves) if serves else "1")


def specialize(text: str, names: dict[str, Any], gpu: GpuSpec) -> str:
    """A space-file expression with every name but the problem sizes replaced by its value, folded.

    ``cdiv(problem.n, BN)`` with BN = 128 becomes ``cdiv(N, 128)``.
    """
    tree = ast.parse(text, mode="eval").body
    return ast.unparse(_fold(tree, names, gpu))


def check_expression(text: str) -> None:
    """Raise ValueError unless ``text`` is a grid expression of the contract's language."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        raise ValueError(f"grid expression {text!r}: {error.msg}") from None
    if len(text) > 500:
        raise ValueError(f"grid expression of {len(text)} characters")
    for node in ast.walk(tree.body):
        allowed = (ast.BinOp, ast.Compare, ast.IfExp, ast.Call, ast.Name, ast.Load, ast.Constant,
                   *_BINARY, *_COMPARE)
        if not isinstance(node, allowed):
            raise ValueError(f"grid expression {text!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Name) and node.id not in SIZES and node.id not in _FUNCTIONS:
            raise ValueError(f"grid expression {text!r}: unknown name {node.id!r}")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS):
            raise ValueError(f"grid expression {text!r}: only {', '.join(_FUNCTIONS)} may be called")
        if isinstance(node, ast.Constant) and (type(node.value) is not int or abs(node.value) >= 2**31):
            raise ValueError(f"grid expression {text!r}: {node.value!r} is not a 32-bit integer")


def to_c(text: str) -> str:
    """The grid expression as a C expression over ``int64_t M, N, K`` (``cdiv``, ``min`` and ``max``
    become the macros ``AUTOTUNE_CDIV``, ``AUTOTUNE_MIN`` and ``AUTOTUNE_MAX``)."""
    check_expression(text)
    return _c(ast.parse(text, mode="eval").body)


def _c(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.BinOp):
        return f"({_c(node.left)} {_C_BINARY[type(node.op)]} {_c(node.right)})"
    if isinstance(node, ast.Compare):
        parts = [_c(node.left)]
        for op, right in zip(node.ops, node.comparators):
            parts += [_C_COMPARE[type(op)], _c(right)]
        return "(" + " ".join(parts) + ")"
    if isinstance(node, ast.IfExp):
        return f"({_c(node.test)} ? {_c(node.body)} : {_c(node.orelse)})"
    if isinstance(node, ast.Call):
        return f"AUTOTUNE_{node.func.id.upper()}({', '.join(_c(a) for a in node.args)})"  # type: ignore[attr-defined]
    raise ValueError(f"{type(node).__name__} has no C form")


def _fold(node: ast.AST, names: dict[str, Any], gpu: GpuSpec) -> ast.expr:
    """Substitute names, map ``problem.m`` to ``M``, and evaluate every subtree free of M, N and K."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id == "problem" and node.attr in _PROBLEM_SIZES:
            return ast.Name(_PROBLEM_SIZES[node.attr], ast.Load())
        if node.value.id == "gpu" and not node.attr.startswith("_"):
            return _constant(getattr(gpu, node.attr))
        raise SpaceError(f"launch expression: {ast.unparse(node)} cannot be part of a grid")
    if isinstance(node, ast.Name):
        if node.id in names:
            return _constant(names[node.id])
        raise SpaceError(f"launch expression: unknown name {node.id!r}")
    if isinstance(node, ast.Constant):
        return _constant(node.value)
    if isinstance(node, ast.BinOp):
        folded = ast.BinOp(_fold(node.left, names, gpu), node.op, _fold(node.right, names, gpu))
    elif isinstance(node, ast.Compare):
        folded = ast.Compare(_fold(node.left, names, gpu), node.ops, [_fold(c, names, gpu) for c in node.comparators])
    elif isinstance(node, ast.IfExp):
        folded = ast.IfExp(_fold(node.test, names, gpu), _fold(node.body, names, gpu), _fold(node.orelse, names, gpu))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        folded = ast.Call(ast.Name(node.func.id, ast.Load()), [_fold(a, names, gpu) for a in node.args], [])
    else:
        raise SpaceError(f"launch expression: {ast.unparse(node)} cannot be part of a grid")
    if not any(isinstance(n, ast.Name) and n.id in SIZES for n in ast.walk(folded)):
        return _constant(_evaluate(folded, {}))
    return _simplify(folded)


def _simplify(node: ast.expr) -> ast.expr:
    """Drop the identities a substitution leaves behind: ``x * 1``, ``cdiv(x, 1)``, ``x // 1``,
    ``x + 0`` and conditionals on a constant."""
    one = lambda n: isinstance(n, ast.Constant) and n.value == 1  # noqa: E731
    zero = lambda n: isinstance(n, ast.Constant) and n.value == 0  # noqa: E731
    if isinstance(node, ast.IfExp) and isinstance(node.test, ast.Constant):
        return node.body if node.test.value else node.orelse
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Mult) and one(node.left):
            return node.right
        if isinstance(node.op, (ast.Mult, ast.FloorDiv)) and one(node.right):
            return node.left
        if isinstance(node.op, (ast.Add, ast.Sub)) and zero(node.right):
            return node.left
    if isinstance(node, ast.Call) and node.func.id == "cdiv" and one(node.args[1]):  # type: ignore[attr-defined]
        return node.args[0]
    return node


def _constant(value: Any) -> ast.Constant:
    if isinstance(value, bool):
        value = int(value)
    if type(value) is not int:
        raise SpaceError(f"launch expression: {value!r} is not an integer")
    return ast.Constant(value)


def _evaluate(node: ast.AST, sizes: dict[str, int]) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return sizes[node.id]
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate(node.left, sizes), _evaluate(node.right, sizes))
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, sizes)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator, sizes)
            if not _COMPARE[type(op)](left, right):
                return 0
            left = right
        return 1
    if isinstance(node, ast.IfExp):
        return _evaluate(node.body if _evaluate(node.test, sizes) else node.orelse, sizes)
    if isinstance(node, ast.Call):
        return _FUNCTIONS[node.func.id](*(_evaluate(a, sizes) for a in node.args))  # type: ignore[attr-defined]
    raise SpaceError(f"{type(node).__name__} in a grid expression")
