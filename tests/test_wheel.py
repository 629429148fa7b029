"""The package as it ships: build the wheel, install it into a fresh virtual environment, and run
offline commands from a directory outside the source tree."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(command, cwd, env=None, timeout=600):
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, f"{command}: {result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result


_IGNORED = shutil.ignore_patterns("*.egg-info", "__pycache__", ".pytest_cache")


def _left_behind(folder: str, names: list[str]) -> set[str]:
    """What a clean copy of the source tree leaves out: caches everywhere, and the top level's
    build outputs, virtual environment and benchmarks."""
    top = {".git", ".venv", "build", "dist", "bench"} if Path(folder) == ROOT else set()
    return set(_IGNORED(folder, names)) | (top & set(names))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the wheel (and its dependencies) installed; the source tree is not on its path."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # a clean copy: no build/ or egg-info from an editable install leaks in
    shutil.copytree(ROOT, source, ignore=_left_behind)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(source)], work)
    wheels = list((work / "dist").glob("autotune-*.whl"))
    assert len(wheels) == 1
    run([sys.executable, "-m", "venv", str(work / "venv")], work)
    python = work / "venv" / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", str(wheels[0])], work)
    outside = work / "elsewhere"
    outside.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{work / 'venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return work / "venv" / "bin", outside, env


def test_the_installed_command_runs_offline(installed):
    bin_dir, outside, env = installed
    for command in ([str(bin_dir / "autotune"), "gpus"], [str(bin_dir / "python"), "-m", "autotune", "--version"]):
        assert run(command, outside, env).stdout.strip()
    space = run([str(bin_dir / "autotune"), "space", "--gpu", "h200", "--dtype", "f16", "--shape", "1024",
                 "--compile", "1"], outside, env).stdout
    assert "hgemm_wgmma on h200" in space and " ok" in space  # templates, spaces and NVRTC from the wheel


def test_the_installed_package_carries_the_shipped_results(installed):
    bin_dir, outside, env = installed
    where = run([str(bin_dir / "python"), "-c", "import autotune, autotune.data_files as d; "
                 "print(autotune.__file__); print(sorted(p.name for p in d.data_dir('tuned_db').iterdir()))"],
                outside, env).stdout
    assert str(ROOT) not in where and "h200.jsonl" in where
    exported = run([str(bin_dir / "autotune"), "export", "--gpu", "h200", "--shipped", "--format", "python",
                    "--dtype", "f32", "--out", "table"], outside, env).stdout
    assert "exported python for h200" in exported
    loaded = run([str(bin_dir / "python"), "-c", "import autotune; t = autotune.load('table/autotune_table_h200_with_cubins.json'); "
                  "print(t.arch, len(t.dtypes['f32'].kernels))"], outside, env).stdout
    assert loaded.startswith("sm_90 ")
