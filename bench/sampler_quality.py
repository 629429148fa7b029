"""Search quality of TPE over feasible configs against TPE asked through an Optuna study.

No GPU and no compiling: a synthetic SGEMM landscape over the real space and its
static rules (H200, 4096^3). A config's modelled time follows register blocking,
tile reuse, vector width, padding and stages, times a fixed +-3% per config; a
config "fails ptxas" when an estimate of its registers passes 255 or the register
file. Both samplers get the same landscape, the space's seeds first, 16 random
startup trials and the same budget of evaluations (failures do not count).

* ``ask/tell``: what autotune did before: a TPESampler (multivariate) asked through an
  in-memory study; configs that break a static rule are told as pruned trials.
* ``feasible``: :class:`autotune.search.sampler.Proposer`, as a search now uses it.

    python3 bench/sampler_quality.py [--evaluations 100] [--seeds 8]

Prints, per sampler, the best modelled time found over the best of the whole space
(1.000 is the optimum) for each seed, their median, and the proposals it took.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

import optuna
from optuna.trial import TrialState

from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem
from autotune.search.sampler import Proposer
from autotune.space.family import Config, load_space
from autotune.space.survey import feasible_configs

GPU, PROBLEM = gpu_spec("h200"), GemmProblem(4096, 4096, 4096)


def _jitter(config: Config, salt: str, spread: float) -> float:
    digest = hashlib.sha256((salt + config.name).encode()).digest()
    return 1.0 + spread * (int.from_bytes(digest[:4], "little") / 2**32 * 2 - 1)


def registers(c: Config) -> int:
    """A rough register estimate: accumulators, fragments (twice with PREFETCH), addressing."""
    return c["TM"] * c["TN"] + (c["TM"] + c["TN"]) * (1 + c["PREFETCH"]) + 28


def modelled_ms(c: Config) -> float | None:
    """The landscape: modelled time of a config, or None where ptxas would fail it."""
    threads = (c["BM"] // c["TM"]) * (c["BN"] // c["TN"])
    if registers(c) > 255 or registers(c) * threads > 65536:
        return None
    reuse = min(1.0, (c["BM"] * c["BN"] / (c["BM"] + c["BN"])) / (256 * 128 / 384)) ** 0.5
    micro = min(1.0, (c["TM"] * c["TN"] / 128) ** 0.25)
    occupancy = 1.05 if registers(c) * threads <= 32768 else 1.0
    efficiency = (reuse * micro * occupancy * {1: 0.8, 2: 0.9, 4: 1.0}[c["VEC"]]
                  * (1.0 if c["PAD_A"] else 0.93) * (0.99 if c["PAD_B"] else 1.0)
                  * {1: 0.9, 2: 1.0, 3: 0.97}[c["STAGES"]] * (0.88 if c["CP_ASYNC"] else 1.0)
                  * (0.98 if c["PREFETCH"] else 1.0) * (1.01 if c["GROUP_M"] == 8 else 1.0)
                  * _jitter(c, "lean", 0.03 * c["LEAN_BUILD"]))
    return 2.7 / efficiency * _jitter(c, "noise", 0.03)


def run_ask_tell(space, seed: int, evaluations: int) -> tuple[float, int]:
    """Best time and the number of asks, TPE asked through a study (rejections told as pruned)."""
    distributions = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.knobs.items()}
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=16)
    study = optuna.create_study(sampler=sampler)
    for config in space.seeds:
        study.enqueue_trial(config.as_dict())
    best, evaluated, asks = float("inf"), 0, 0
    while evaluated < evaluations:
        trial = study.ask(distributions)
        asks += 1
        config = space.config(trial.params)
        ms = modelled_ms(config) if space.check(config, GPU, PROBLEM).feasible else None
        if ms is None:
            study.tell(trial, state=TrialState.PRUNED)
            continue
        study.tell(trial, ms)
        evaluated += 1
        best = min(best, ms)
    return best, asks


def run_feasible(space, seed: int, evaluations: int) -> tuple[float, int]:
    """Best time and the number of proposals, with the proposer a search uses."""
    proposer = Proposer(space, GPU, PROBLEM, seed=seed)
    study = optuna.create_study()
    trials, taken = [], set()
    best, evaluated, proposals = float("inf"), 0, 0
    while evaluated < evaluations:
        config = proposer.next(study, trials, taken)
        proposals += 1
        taken.add(config.name)
        ms = modelled_ms(config)
        state = TrialState.PRUNED if ms is None else TrialState.COMPLETE
        trials.append(optuna.trial.create_trial(state=state, value=ms, params=config.as_dict(),
                                                distributions=proposer.distributions))
        if ms is not None:
            evaluated += 1
            best = min(best, ms)
    return best, proposals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluations", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_space("sgemm")
    optimum = min(ms for config in feasible_configs(space, GPU, PROBLEM) if (ms := modelled_ms(config)))
    print(f"optimum of the landscape: {optimum:.4f} ms")
    for name, run in (("ask/tell", run_ask_tell), ("feasible", run_feasible)):
        started = time.perf_counter()
        results = [run(space, seed, args.evaluations) for seed in range(args.seeds)]
        ratios = [best / optimum for best, _ in results]
        proposals = sum(count for _, count in results) / len(results)
        print(f"{name:9s} best/optimum per seed: {' '.join(f'{r:.3f}' for r in ratios)}; "
              f"median {statistics.median(ratios):.3f}; {proposals:.0f} proposals per search; "
              f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
