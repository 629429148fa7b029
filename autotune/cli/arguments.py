"""Arguments and checks shared by the ``autotune`` commands.

Every numeric option is parsed by :class:`Integer` or :class:`Seconds`: a finite
value in a sane range, or one line naming the option and the range.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from autotune.cli.text import printable
from autotune.errors import InputError
from autotune.gpu_specs import AUTO, GPUS, GpuSpec, gpu_spec
from autotune.problem import DTYPES
from autotune.results.opening import open_store  # noqa: F401 (the commands open --db through here)
from autotune.results.urls import shown_url, without_secrets
from autotune.shapes import SHAPE_SETS

EXIT_USAGE = 2
# Sane ranges of the numeric options.
MAX_ROWS = 100_000  # query --limit, results --per-problem
MAX_TRIALS = 1_000_000  # search and sweep --trials
MAX_REPEATS = 10_000  # timed launches per candidate or rung
MAX_JOBS = 1024  # compile processes
MAX_DEVICES = 1024  # CUDA device indexes and GPU workers
MAX_SEED = 2**32 - 1
MAX_KERNELS = 256  # table --max-kernels
MAX_SECONDS = 10_000_000.0  # --timeout: about 16 weeks


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line and exit code 2, with any password of a database
    URL among the arguments masked and control characters escaped."""

    _given: Sequence[str] = ()

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        for given in self._given:
            message = without_secrets(message, given)
            if given.startswith("-") and "=" in given:  # --db=URL
                message = without_secrets(message, given.partition("=")[2])
        self.exit(EXIT_USAGE, f"autotune: error: {printable(shown_url(message))}\n")


class Integer(argparse.Action):
    """A numeric option's value: an integer from ``least`` to ``most`` (``add_argument(..., action=Integer,
    least=1, most=MAX_TRIALS)``); anything else is one line naming the option and the range, the value
    called ``noun`` there."""

    def __init__(self, option_strings, dest, *, least: int, most: int, noun: str = "a number", **kwargs):
        self.least, self.most, self.noun = least, most, noun
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, self.parse(option_string or self.dest, values))

    def parse(self, option: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not self.least <= value <= self.most:
            raise argparse.ArgumentError(None, str(InputError(option, _clipped(text) if value is None else value,
                                                              self.valid)))
        return value

    @property
    def valid(self) -> str:
        if self.least in (0, 1):
            return f"{self.noun} {'>' if self.least else '>='} 0 (an integer, at most {self.most})"
        return f"{self.noun} from {self.least} to {self.most} (an integer)"


class Seconds(argparse.Action):
    """A duration option's value: seconds, a finite number > 0 and at most ``most`` (default
    :data:`MAX_SECONDS`); anything else (``nan``, ``inf``, ``0``) is one line naming the option."""

    def __init__(self, option_strings, dest, *, most: float = MAX_SECONDS, **kwargs):
        self.most = most
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        option = option_string or self.dest
        try:
            value = float(values)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not 0 < value <= self.most:
            raise argparse.ArgumentError(None, str(InputError(option, _clipped(values) if value is None else value,
                                                              f"a number of seconds > 0 (at most {self.most:g})")))
        setattr(namespace, self.dest, value)


def _clipped(text: str, length: int = 40) -> str:
    return text if len(text) <= length else text[:length - 3] + "..."


def add_gpu_argument(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """--gpu: a GPU model or auto."""
    parser.add_argument("--gpu", required=required, help=f"GPU model: {', '.join(GPUS)} or {AUTO} (the attached GPU)")


def add_worker_arguments(parser: argparse.ArgumentParser, device_help: str = "CUDA device index (default 0)") -> None:
    """--jobs (compile processes) and --device (the CUDA device a GPU worker runs on)."""
    parser.add_argument("--jobs", action=Integer, least=1, most=MAX_JOBS,
                        help="parallel compile processes (default: CPU count, at most 16)")
    parser.add_argument("--device", action=Integer, least=0, most=MAX_DEVICES - 1, noun="a CUDA device index",
                        default=0, help=device_help)


def add_problem_arguments(parser: argparse.ArgumentParser, family: bool = True, gpu_required: bool = True) -> None:
    """--gpu, --shape, --dtype (and --layout and --family)."""
    add_gpu_argument(parser, gpu_required)
    parser.add_argument("--shape", required=True, help="problem size: 4096 (square) or MxNxK")
    parser.add_argument("--dtype", default="f32", help=f"element type: {', '.join(DTYPES)} (default f32)")
    if family:
        add_layout_argument(parser)
        parser.add_argument("--family", help="kernel family: a shipped one's name, or the path of your own "
                                             "space file, e.g. ./my_space.toml (default: the one for --dtype)")


def add_pin_argument(parser: argparse.ArgumentParser) -> None:
    """--pin KNOB=V[,V...], repeatable: the family's knobs limited to some values (:func:`pins`)."""
    parser.add_argument("--pin", action="append", default=[], metavar="KNOB=V[,V...]",
                        help="search only these values of a knob of the family, e.g. --pin WN=192,224 --pin "
                             "PERSISTENT=1 (repeatable; the search keeps a study of its own, its results are "
                             "the family's)")


def pins(texts: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """The knobs and values of ``--pin`` options (``KNOB=V[,V...]``, repeatable; a knob named twice keeps the
    last); not yet checked against a family.

    Raises:
        InputError: a text not of the form KNOB=V[,V...] with integer values.
    """
    parsed = {}
    for text in texts:
        knob, equals, values = text.partition("=")
        try:
            numbers = tuple(int(value) for value in values.split(","))
        except ValueError:
            numbers = ()
        if not equals or not knob.strip() or not numbers:
            raise InputError("--pin", _clipped(text), "KNOB=VALUE[,VALUE...] with integer values, e.g. WN=192,224")
        parsed[knob.strip()] = numbers
    return parsed


def add_layout_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layout", default="row", help="how B is stored: row (K x N, row-major like A and C) or nt "
                                                        "(N x K: A @ B.T, nn.Linear's weight; default row)")


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="the results database: a SQLAlchemy URL (postgresql://user@host/db) or a "
                                     "SQLite file path (default: $AUTOTUNE_DB, else see README)")


def add_wide_argument(parser: argparse.ArgumentParser) -> None:
    """--wide: tables and lines whole, however wide (by default they fit the terminal)."""
    parser.add_argument("--wide", action="store_true",
                        help="print every line whole (config names unwrapped) instead of fitting the terminal")


def add_backend_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="cupy", choices=["cupy", "fake"],
                        help="GPU backend: cupy (default), or fake to exercise the pipeline with no GPU")


def add_resumable_run_arguments(parser: argparse.ArgumentParser) -> None:
    """What every command that measures many shapes on a GPU and can stop and go on takes: --db, --backend,
    --jobs and --device, and --timeout."""
    add_db_argument(parser)
    add_backend_argument(parser)
    add_worker_arguments(parser)
    parser.add_argument("--timeout", action=Seconds, help="stop this run after S seconds (run it again to go on)")


def add_shapes_filter_argument(parser: argparse.ArgumentParser, default: str) -> None:
    """--shapes: only these of the shapes with results (``default`` says which, without it)."""
    parser.add_argument("--shapes", help=f"only these shapes: a set ({', '.join(SHAPE_SETS)}), shapes written out "
                                         f"(4096,77x4096x14336) or a file with one shape per line (default: {default})")


def requested_gpu(name: str) -> GpuSpec | None:
    """The GPU named by ``--gpu`` for a GPU command; None for ``auto`` (the attached one)."""
    return None if name.lower() == AUTO else gpu_spec(name)


def offline_gpu(name: str) -> GpuSpec:
    """``--gpu`` for offline commands: a named model, or ``auto`` through NVML."""
    if name.lower() != AUTO:
        return gpu_spec(name)
    from autotune.gpu.detect import attached_gpu

    return attached_gpu()


def no_results_hint(store) -> str:
    """What to do where ``store`` lacks the results a command wanted: where it holds none at all, import the
    shipped ones; else the GPUs it holds results for."""
    held = store.gpus()
    if not held:
        from autotune.data_files import shipped_results

        shipped = ", ".join(path.stem for path in shipped_results())
        missing = _missing_file(store.url)
        where = f"there is no database file {missing} yet" if missing else "the database holds no results yet"
        return (f"{where}: `autotune results import --shipped` loads those that ship with autotune ({shipped}), "
                "or run a search")
    return "it holds results for " + ", ".join(f"{key} ({arch})" for key, _, arch in held)


def _missing_file(url: str) -> str | None:
    """The path of the SQLite file ``url`` names, where that file does not exist (a new database, or a typo)."""
    from pathlib import Path

    from sqlalchemy.engine import make_url

    database = make_url(url).database if url.startswith("sqlite") else None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return None if Path(database).exists() else database
