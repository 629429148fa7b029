"""The selection table's rule against the plain nearest-shape rule, on the same measurements.

For each dtype: the table built from the training shapes (``--train``, default ``llm``) is judged on
the held-out shapes (``--hold-out``, default ``llm-held-out``) and by leaving each training shape out
in turn, once with the table's pick (the kernel whose time at the nearest training shape, scaled by
its busiest SM's work, is least) and once with that training shape's fastest kernel. A pick counts
where it was measured. Usage:

    python bench/selection_rules.py --db sqlite:///sweep.db [--gpu h200] [--dtype f32 f16]
"""

from __future__ import annotations

import argparse
import math

from autotune.gpu_specs import gpu_spec
from autotune.results import ResultStore
from autotune.select.selection import gather, table_from
from autotune.shapes import read_shapes


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def summary(label, fractions, total):
    return (f"{label}: best/pick geomean {geomean(fractions):.3f}, worst {min(fractions, default=float('nan')):.3f}, "
            f"measured at {len(fractions)} of {total}")


def judge(table, results, shapes):
    """best/pick where measured, for the table's pick and for the nearest shape's fastest kernel."""
    scaled, nearest = [], []
    for shape in shapes:
        measured = results.shapes.get(shape)
        pick = table.pick(*shape) if measured else None
        if pick is None:
            continue
        for kernel, into in ((pick.kernel, scaled), (pick.rule.kernel, nearest)):
            if kernel in measured.ms:
                into.append(measured.best_ms / measured.ms[kernel])
    return scaled, nearest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--dtype", nargs="+", default=["f32", "f16"])
    parser.add_argument("--train", default="llm")
    parser.add_argument("--hold-out", default="llm-held-out")
    args = parser.parse_args()
    gpu = gpu_spec(args.gpu)
    train, held = read_shapes(args.train), read_shapes(args.hold_out)
    store = ResultStore(args.db)
    for dtype in args.dtype:
        results = gather(store, gpu.key, dtype, gpu.sm)
        training = results.without(s for s in results.shapes if s not in set(train))
        table = table_from(training, gpu)
        scaled, nearest = judge(table, results, held)
        print(f"{dtype}, {len(table.chosen)} kernels, held out ({args.hold_out}):")
        print("  " + summary("scaled times", scaled, len(held)))
        print("  " + summary("nearest shape's fastest", nearest, len(held)))
        loo_scaled, loo_nearest = [], []
        for shape in training.shapes:
            others = table_from(training.without([shape]), gpu)
            s, n = judge(others, training, [shape])
            loo_scaled += s
            loo_nearest += n
        print(f"{dtype}, leave one out ({len(training.shapes)} training shapes):")
        print("  " + summary("scaled times", loo_scaled, len(training.shapes)))
        print("  " + summary("nearest shape's fastest", loo_nearest, len(training.shapes)))


if __name__ == "__main__":
    main()
