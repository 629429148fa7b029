"""The ``autotune`` command line: space, search, sweep, cross-dtype, retime, query, table, ladder, results, export,
gpus.

One module per command, each with ``register(subparsers)`` and ``run(args)``.
Any :class:`AutotuneError` becomes one line on stderr and exit code 2 (control
characters escaped, any database password masked); where a GPU command finds no
GPU, the line says what runs without one.

``--gpu auto`` is the attached GPU: the GPU commands (search, sweep, cross-dtype, retime, ladder) find
it themselves (any NVIDIA GPU will do); for every other command it is the model
NVML names, found here before the command runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from autotune import __version__
from autotune.cli import (
    cross_dtype,
    export,
    gpus,
    ladder,
    plot,
    query,
    results,
    retime,
    search,
    space,
    sweep,
    table,
)
from autotune.cli.arguments import EXIT_USAGE, OneLineParser, offline_gpu
from autotune.cli.text import printable
from autotune.errors import AutotuneError, NoGpuError
from autotune.gpu_specs import AUTO
from autotune.results.urls import shown_url

COMMANDS = (space, search, sweep, cross_dtype, retime, query, table, plot, ladder, results, export, gpus)
GPU_COMMANDS = ("search", "sweep", "cross-dtype", "retime", "ladder")  # the commands that run kernels: they need a GPU
WITHOUT_A_GPU = ("without one, add --backend fake (an H200 played with made-up timings), or use the offline commands: "
                 "autotune space, query, table, plot, export, results")


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="autotune", description="Autotune CUDA GEMM kernels per shape and GPU.")
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error(f"a command is missing: {', '.join(command.__name__.rsplit('.', 1)[-1] for command in COMMANDS)}"
                     " (`autotune --help` says what each does; `autotune results import --shipped` then "
                     "`autotune table --gpu h200` is a start with no GPU)")
    try:
        if args.command not in GPU_COMMANDS and str(getattr(args, "gpu", None)).lower() == AUTO:
            args.gpu = offline_gpu(args.gpu).key
        return args.run(args)
    except AutotuneError as error:
        message = str(error)
        if isinstance(error, NoGpuError) and args.command in GPU_COMMANDS:
            message += f"; {WITHOUT_A_GPU}"
        print(f"autotune: error: {printable(shown_url(message))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("autotune: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (head, less)
        sys.stderr.close()
        return 0
