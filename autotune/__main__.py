"""``python -m autotune`` and the ``autotune`` command.

The command's entry point lives here, not in :mod:`autotune.cli`: a spawn-started
process (the GPU worker, each compile process) runs the command's script again
before its own work, and that then imports only this module, not every command.
"""

import sys


def run() -> int:
    """The ``autotune`` command line (:func:`autotune.cli.main`)."""
    from autotune.cli import main

    return main()


if __name__ == "__main__":
    sys.exit(run())
