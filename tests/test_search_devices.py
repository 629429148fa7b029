"""`autotune search --device/--workers` with the fake GPU backend."""

import collections

import optuna
import pytest
from conftest import autotune


def test_two_workers_on_devices_from_device_on(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    result = autotune("search", "--gpu", "h200", "--shape", "64", "--backend", "fake", "--db", db, "--jobs", "2",
                      "--trials", "4", "--device", "3", "--workers", "2")
    assert result.returncode == 0, result.stderr
    assert "devices 3, 4" in result.stderr
    assert "4 configs evaluated on the GPU" in result.stdout
    (name,) = optuna.get_all_study_names(db)
    trials = optuna.load_study(study_name=name, storage=db).get_trials(deepcopy=False)
    devices = collections.Counter(t.user_attrs["device"] for t in trials if t.user_attrs.get("stage") == "gpu")
    assert set(devices) == {3, 4} and sum(devices.values()) >= 4  # both GPUs ran candidates


@pytest.mark.parametrize("option, value, fragment", [("--device", "-1", "a CUDA device index >= 0"),
                                                     ("--workers", "0", "a number > 0")])
def test_bad_device_or_workers_is_one_line(tmp_path, option, value, fragment):
    result = autotune("search", "--gpu", "h200", "--shape", "64", "--backend", "fake",
                      "--db", f"sqlite:///{tmp_path}/r.db", option, value)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and fragment in lines[0] and "Traceback" not in result.stderr
