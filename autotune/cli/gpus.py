"""``autotune gpus``: the GPU models autotune knows."""

from __future__ import annotations

import argparse

from autotune.cli.text import table
from autotune.gpu_specs import GPUS


def register(sub) -> None:
    gpus = sub.add_parser("gpus", help="list the GPU models autotune knows", epilog="example: autotune gpus")
    gpus.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    rows = [[s.key, s.sm, s.sms, s.smem_per_block // 1024, s.smem_per_block_optin // 1024,
             s.max_threads_per_sm, s.l2_bytes // (1024 * 1024)] for s in GPUS.values()]
    print(table(["gpu", "arch", "SMs", "smem KB", "opt-in KB", "threads/SM", "L2 MB"], rows))
    return 0
