"""The ``autotune`` command line: space, search, sweep, query, table, ladder, results, export, gpus.

One module per command, each with ``register(subparsers)`` and ``run(args)``.
Any :class:`AutotuneError` becomes one line on stderr and exit code 2 (control
characters escaped, any database password masked).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from autotune import __version__
from autotune.cli import export, gpus, ladder, plot, query, results, search, space, sweep, table
from autotune.cli.arguments import EXIT_USAGE, OneLineParser
from autotune.cli.text import printable
from autotune.errors import AutotuneError
from autotune.results.urls import shown_url

COMMANDS = (space, search, sweep, query, table, plot, ladder, results, export, gpus)


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="autotune", description="Autotune CUDA GEMM kernels per shape and GPU.")
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except AutotuneError as error:
        print(f"autotune: error: {printable(shown_url(str(error)))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("autotune: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (head, less)
        sys.stderr.close()
        return 0
