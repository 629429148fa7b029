"""Recording a search's evaluations: in the results database, in the study's slots, and in where the search stands."""

from __future__ import annotations

from autotune.errors import SearchError
from autotune.gpu.race import lost_race
from autotune.gpu.tasks import KernelTask
from autotune.records import EnergyWindow, Failure, Measurement
from autotune.search.compiling import Candidate
from autotune.search.evaluate import Recorder
from autotune.search.standing import Standing
from autotune.search.study import StudyLedger
from autotune.space.family import Config, SearchSpace

REASON_CHARS = 500  # characters of a failure's reason kept with its trial


def per_gemm_mj(window: EnergyWindow | None) -> float | None:
    """Millijoules per GEMM of an energy window."""
    return None if window is None else window.energy_per_gemm_j * 1e3


class Recording:
    """Stores what a search's GPU evaluations, compiles and cuBLAS references produced."""

    def __init__(self, recorder: Recorder, space: SearchSpace, standing: Standing, warmup: int):
        self.recorder, self.space, self.standing = recorder, space, standing
        self.warmup = warmup  # the closing measurement's warm-up of the fastest candidate

    def evaluation(self, ledger: StudyLedger, candidate: Candidate, task: KernelTask,
                   outcome: Measurement | Failure, window: EnergyWindow | Failure | None) -> None:
        """Store a GPU evaluation and close its slot in the study."""
        config, standing = candidate.config, self.standing
        if isinstance(outcome, Failure):
            standing.count_failure(outcome.failure_class)
            self.recorder.failure(self.space, config, outcome)
            ledger.finish(candidate.trial_id, {"failure": outcome.failure_class,
                                               "reason": outcome.message[:REASON_CHARS]}, None)
            return
        measurement_id = self.recorder.measurement(self.space, config, outcome)
        ms = outcome.timing.median_ms
        uses_energy = standing.objective.uses_energy
        attrs: dict = {"ms": ms} if uses_energy else {}  # the time objective's value is ms
        if lost_race(outcome.timing.samples_ms, task.race):
            standing.raced += 1  # its measurement holds the few launches it got
        mj = power_w = None
        if isinstance(window, Failure):
            attrs["energy_failure"] = f"{window.failure_class}: {window.message}"[:REASON_CHARS]
        elif window is not None:
            self.recorder.energy(measurement_id, window)
            standing.windows[config.name] = window
            mj, power_w = per_gemm_mj(window), window.mean_power_w
            attrs.update(energy_mj=mj, power_w=power_w, throttled=window.throttled)
        if uses_energy and mj is None:
            attrs["energy_estimated"] = True
        values = standing.measured(config.name, task, ms, mj, power_w, self.warmup)
        ledger.finish(candidate.trial_id, attrs, values)

    def compile_failure(self, ledger: StudyLedger, config: Config, failure: Failure) -> None:
        """Store a candidate that failed before the GPU (compile, launch or resource check), once per study."""
        self.standing.count_failure(failure.failure_class)
        if ledger.record_compile_failure(config, failure.failure_class, failure.message):
            self.recorder.failure(self.space, config, failure)

    def reference(self, cublas: Measurement, window: EnergyWindow | Failure | None, first: bool) -> None:
        """Store a GPU's cuBLAS reference; the first GPU's is the search's (its window, with an energy
        objective, the objective's power floor)."""
        measurement_id = self.recorder.cublas(cublas)
        if not first:
            return
        standing = self.standing
        standing.cublas = cublas
        if not standing.objective.uses_energy:
            return
        if isinstance(window, Failure):
            raise SearchError(f"cuBLAS energy window failed: {window.failure_class}: {window.message}")
        self.recorder.energy(measurement_id, window)
        standing.cublas_window = window
        standing.observe_cublas(cublas.timing.median_ms, window.mean_power_w)
