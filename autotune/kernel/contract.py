"""A kernel's launch contract: everything a program needs to launch one tuned config.

Every kernel autotune builds takes ``(const T* A, const T* B, T* C, int M,
int N, int K, float alpha, float beta)``, row-major, followed by its workspace
pointer if it takes one, and by its TMA tensor
maps (each a 128-byte ``CUtensorMap`` passed by value, encoded for the launch's
operands, see :mod:`autotune.kernel_abi`). The contract says the shapes the kernel is
built for (``serves``: every shape, or, for a build specialized to whole tiles, those
where its expression holds), the block size,
the dynamic shared memory (and whether the kernel must opt in to more than
48 KB), the tensor maps, and the grid, and the k-tiles a block runs through (what the selection table's
time scaling counts, :mod:`autotune.select.scaling`).

The grid depends on the problem, so each of its three sides (and the k-tiles, and the
shapes served) is an expression over ``M``, ``N`` and ``K``: the space file's launch
expression with every knob, derived value and GPU property replaced by its value
(:meth:`autotune.expression.Expression.over_sizes`), in the part of the space files'
language that Python and C read alike (:class:`autotune.expression.SizeExpression`).
A contract checks its expressions when it is made, so one read from a table file
that could not be evaluated is refused then, not at its first launch.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
from collections.abc import Callable, Iterable
from typing import Any

from autotune.errors import SpaceError
from autotune.expression import Expression, SizeExpression, sizes_function
from autotune.gpu_specs import GpuSpec
from autotune.kernel_abi import TensorMapSpec
from autotune.problem import GemmProblem
from autotune.space.family import Config, SearchSpace

K_TILES = "cdiv(cdiv(problem.k, BK), SPLIT_K)"  # k-tiles a block runs through, in space-file terms
MAX_BLOCK = 1024  # threads along one side of a block


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
    workspace: int = 0  # bytes of zeroed global memory the kernel takes after beta (0: it takes none)

    def __post_init__(self):  # checks the expressions once: a contract that exists can be evaluated
        if len(self.grid) != 3 or len(self.block) != 3:
            raise SpaceError(f"{self.entry}: a grid and a block need three sides each")
        try:
            self.expressions
        except SpaceError as error:
            raise SpaceError(f"{self.entry} {error}") from None

    @property
    def expressions(self) -> ContractExpressions:
        """The grid, k-tiles and shapes served as checked expressions over M, N and K."""
        return _expressions(tuple(self.grid), self.k_tiles, self.serves)

    def serves_shape(self, m: int, n: int, k: int) -> bool:
        """Whether the kernel is built for an ``m x n x k`` problem (a build for whole tiles is not
        built for the others; see ``[specialize]`` in :mod:`autotune.space.family`)."""
        return self.serves == "1" or bool(self.expressions.serves(m, n, k))

    def grid_for(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """The grid of a launch on an ``m x n x k`` problem."""
        return self.expressions.grid_function(m, n, k)

    def work(self, m: int, n: int, k: int, sms: int) -> int:
        """The busiest SM's k-tiles on an ``m x n x k`` problem on a GPU of ``sms`` SMs (:func:`busiest_sm_work`)."""
        return busiest_sm_work(self.expressions.grid_function(m, n, k), self.expressions.k_tiles(m, n, k), sms)

    def grid_function(self) -> Callable[[int, int, int], tuple[int, int, int]]:
        """:meth:`grid_for` with the expressions compiled once (for a launcher's hot path)."""
        return self.expressions.grid_function

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
            **({"workspace": self.workspace} if self.workspace else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchContract:
        """Read a contract written by :meth:`to_dict`; raises ValueError/KeyError/TypeError on bad data and
        SpaceError on an expression outside the language."""
        if not str(data["entry"]).isidentifier():
            raise ValueError(f"entry {data['entry']!r} is not an identifier")
        if not re.fullmatch(r"sm_\d{2,3}[a-z]?", str(data["target"])):
            raise ValueError(f"target {data['target']!r} (expected sm_XY, e.g. sm_90a)")
        grid = tuple(str(text) for text in data["grid"])
        block = tuple(int(side) for side in data["block"])
        if not all(1 <= side <= MAX_BLOCK for side in block) or not 0 <= int(data["dynamic_smem"]) < 2**31:
            raise ValueError(f"block {list(block)} (sides 1..{MAX_BLOCK}) or dynamic_smem {data['dynamic_smem']!r}")
        k_tiles = str(data.get("k_tiles", "K"))  # tables written before it: every k-tile counts alike
        serves = str(data.get("serves", "1"))  # tables written before it hold builds for any shape
        maps = tuple(TensorMapSpec(str(t["name"]), str(t["operand"]), (int(t["box"][0]), int(t["box"][1])),
                                   int(t["swizzle"])) for t in data.get("tensor_maps", []))
        workspace = int(data.get("workspace", 0))  # tables written before it: no kernel takes one
        if not 0 <= workspace < 2**40:
            raise ValueError(f"workspace {workspace} bytes (expected 0..{2**40 - 1})")
        if not all(spec.name.isidentifier() for spec in maps):
            raise ValueError(f"tensor map names {[spec.name for spec in maps]} must be identifiers")
        return cls(entry=str(data["entry"]), target=str(data["target"]), block=block, grid=grid,  # type: ignore[arg-type]
                   dynamic_smem=int(data["dynamic_smem"]), opt_in=bool(data["opt_in"]), tensor_maps=maps,
                   k_tiles=k_tiles, serves=serves, workspace=workspace)


@dataclasses.dataclass(frozen=True)
class ContractExpressions:
    """A contract's expressions, checked, and its grid as one function."""

    grid: tuple[SizeExpression, SizeExpression, SizeExpression]
    k_tiles: SizeExpression
    serves: SizeExpression

    @functools.cached_property
    def grid_function(self) -> Callable[[int, int, int], tuple[int, int, int]]:
        return sizes_function(self.grid)  # type: ignore[return-value]


@functools.lru_cache(maxsize=4096)
def _expressions(grid: tuple[str, ...], k_tiles: str, serves: str) -> ContractExpressions:
    return ContractExpressions(tuple(SizeExpression(text, f"grid {axis}") for axis, text in zip("xyz", grid)),
                               SizeExpression(k_tiles, "k_tiles"), SizeExpression(serves, "serves"))


def contract_for(space: SearchSpace, config: Config, gpu: GpuSpec) -> LaunchContract:
    """The launch contract of ``config`` built for ``gpu``.

    Raises:
        SpaceError: a launch value other than the grid depends on the problem (it
            could not be written down once for every shape).
    """
    small, large = GemmProblem(1, 1, 1, space.dtype), GemmProblem(40000, 30000, 20000, space.dtype)
    fixed = space.launch(config, gpu, small)
    other = space.launch(config, gpu, large)
    if (fixed.block, fixed.dynamic_smem, fixed.opt_in, fixed.tensor_maps, fixed.workspace) != (
            other.block, other.dynamic_smem, other.opt_in, other.tensor_maps, other.workspace):
        raise SpaceError(f"{config.name}: block, shared memory, tensor maps or workspace depend on the problem size")
    names = {key: value for key, value in space.values(config, gpu).items() if key not in ("gpu", "problem")}
    launch_text = _launch_table(space.source_text)
    where = f"{space.family} [launch]"
    grid = tuple(_over_sizes(str(launch_text[key]), names, gpu, f"{where} {key}") for key in ("grid_x", "grid_y"))
    # A space file may say what a block runs through where it is not its share of one tile's k-tiles
    # ([launch] k_tiles: a persistent kernel's blocks walk several tiles).
    k_tiles = _over_sizes(str(launch_text.get("k_tiles", K_TILES)), {"BK": 1, "SPLIT_K": 1, **names}, gpu,
                          f"{where} k_tiles")
    # The shapes it serves: those where every rule that reads the problem holds (a build for few rows, say, or
    # one specialized to whole tiles: [specialize] knobs at 1).
    serves = [text for rule in space.rules if rule.reads_problem
              if (text := _over_sizes(rule.require.text, names, gpu, f"{space.family} rule {rule.require.text!r}")) != "1"]
    return LaunchContract(entry=config.name, target=space.target(gpu), block=fixed.block, grid=(*grid, "1"),
                          dynamic_smem=fixed.dynamic_smem, opt_in=fixed.opt_in, tensor_maps=fixed.tensor_maps,
                          k_tiles=k_tiles, serves=" * ".join(f"({text})" for text in serves) if serves else "1",
                          workspace=fixed.workspace)


def _over_sizes(text: str, names: dict[str, Any], gpu: GpuSpec, where: str) -> str:
    """A space-file expression with every name but the problem sizes replaced by its value, folded
    (``cdiv(problem.n, BN)`` with BN = 128 becomes ``cdiv(N, 128)``)."""
    return _expression(text, where, frozenset(names)).over_sizes({**names, "gpu": gpu}).text


# A table's selection asks for the contracts of every config measured (hundreds): each space file's
# [launch] table is parsed, and each of its expressions checked, once per file and name set, not per config.
@functools.lru_cache(maxsize=64)
def _launch_table(source_text: str) -> dict[str, Any]:
    return tomllib.loads(source_text)["launch"]


@functools.lru_cache(maxsize=1024)
def _expression(text: str, where: str, names: frozenset[str]) -> Expression:
    return Expression(text, where, names)
