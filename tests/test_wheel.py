"""The wheel as a newcomer gets it: built once, installed outside the checkout, README's offline commands run
from a folder that is not the source tree; the build and the install print no warnings.

Also where NVRTC's headers come from: pip's CUDA packages, never a CUDA toolkit beside them.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autotune.kernel import compile as kernel_compile
from autotune.kernel import nvrtc
from autotune.kernel.source import KernelSource

ROOT = Path(__file__).resolve().parent.parent
# What the wheel is built from: the rest of the checkout (tests, bench, a virtual environment, ...) stays out.
SOURCES = ("pyproject.toml", "README.md", "autotune", "templates", "search_spaces", "tuned_db", "examples")
# The folders whose every file ships: the package, and the data folders it links to.
SHIPPED = {"autotune": "autotune", "templates": "autotune/templates", "search_spaces": "autotune/search_spaces",
           "tuned_db": "autotune/tuned_db", "examples": "autotune/examples"}
WARNING = re.compile(r"warn|deprecat", re.IGNORECASE)
EXAMPLE = "examples/column_sgemm/column_sgemm.toml"  # README's example family, by the path README gives


def _setuptools_too_old() -> str | None:
    version = importlib.metadata.version("setuptools")
    if int(version.split(".")[0]) < 77:
        return f"needs setuptools>=77 to build the wheel offline (found {version}): pip install -e '.[cuda13,test]'"
    return None


@dataclasses.dataclass(frozen=True)
class Installed:
    """The wheel, what building and installing it printed, and how to run what it installed."""

    wheel: Path
    build_output: str
    install_output: str
    site: Path  # the folder it is installed in
    home: Path  # a folder outside the checkout, where the commands run
    env: dict[str, str]

    def run(self, *arguments: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """``autotune ARGUMENTS`` (the installed script) in ``home``; asserts it succeeded."""
        command = [str(self.site / "bin" / "autotune"), *arguments]
        result = subprocess.run(command, cwd=self.home, env=self.env, capture_output=True, text=True,
                                timeout=timeout)
        assert result.returncode == 0, f"autotune {' '.join(arguments)}:\n{result.stdout}\n{result.stderr}"
        return result


def _pip(*arguments: str, env: dict[str, str]) -> str:
    result = subprocess.run([sys.executable, "-m", "pip", *arguments], env=env, capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"pip {' '.join(arguments)}:\n{output}"
    return output


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Installed:
    """Build the wheel from a copy of the sources (the checkout gets no build folder) with this environment's
    setuptools, no download, and install it, without dependencies (this environment has them), into a folder
    of its own."""
    if reason := _setuptools_too_old():
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, source / name)
    # PYTHONDONTWRITEBYTECODE makes setuptools say "byte-compiling is disabled": a note on this
    # environment, not on the package
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    quiet = {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1"}
    built = _pip("wheel", "-v", "--no-deps", "--no-build-isolation", "--wheel-dir", str(root / "dist"), str(source),
                 env=quiet)
    wheel = next((root / "dist").glob("autotune-*.whl"))
    site = root / "site"
    install = _pip("install", "-v", "--no-deps", "--no-compile", "--target", str(site), str(wheel), env=quiet)
    home = root / "home"
    home.mkdir()
    env = {k: v for k, v in env.items() if not k.startswith("AUTOTUNE_")}
    # the cubin cache the other tests share (tests/conftest.py): what they compiled is not compiled again
    cache = tmp_path_factory.getbasetemp() / "cache"
    env.update(PYTHONPATH=str(site), AUTOTUNE_CACHE=str(cache), XDG_DATA_HOME=str(root / "data"))
    return Installed(wheel, built, install, site, home, env)


def test_building_and_installing_the_wheel_print_no_warnings(installed):
    assert "running bdist_wheel" in installed.build_output  # setuptools' own output is there to be read
    for output in (installed.build_output, installed.install_output):
        warnings = [line for line in output.splitlines() if WARNING.search(line)]
        assert not warnings, "\n".join(warnings)


def _source_files() -> list[str]:
    """The files of the source tree: what git tracks, or (without git) every file but caches."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout:
        return listed.stdout.splitlines()
    return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def test_the_wheel_holds_every_file_of_the_package_and_its_data_folders(installed):
    """Every file of the source folders (the kernel templates, search spaces, shipped results, the example
    family, the C library's sources) is in the wheel, where the package looks for it."""
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    expected = {f"{SHIPPED[path.split('/')[0]]}/{path.partition('/')[2]}" for path in _source_files()
                if path.split("/")[0] in SHIPPED and (ROOT / path).is_file() and not (ROOT / path).is_symlink()}
    assert {"autotune/examples/column_sgemm/column_sgemm.toml", "autotune/templates/sgemm.cu.j2",
            "autotune/export/cuda_library/cmake/autotune_gemmConfig.cmake.in"} <= expected
    assert sorted(expected - names) == []


def test_the_wheel_declares_cuda_13_and_cuda_12_as_extras(installed):
    """No CUDA package is a plain dependency: each CUDA version's set is an extra, with the headers NVRTC needs
    (crt/ included) and, for a GPU, cuBLAS."""
    wheel = zipfile.ZipFile(installed.wheel)
    metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    plain = [r for r in requires if "extra ==" not in r]
    assert plain and not [r for r in plain if r.startswith(("cupy", "nvidia-cu"))], plain

    def extra(name: str) -> set[str]:
        return {re.split(r"[<>=;\[ ]", r)[0] for r in requires if f'extra == "{name}"' in r}

    assert extra("cuda13") == {"cupy-cuda13x", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-crt"}
    assert extra("cuda12") == {"cupy-cuda12x", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12",
                               "nvidia-cuda-nvcc-cu12"}
    assert extra("gpu") == {"autotune", "nvidia-cublas"} and extra("gpu-cuda12") == {"autotune", "nvidia-cublas-cu12"}


def test_the_installed_command_runs_offline(installed):
    """The installed script and ``python -m autotune``, outside the checkout, run the installed package."""
    where = subprocess.run([sys.executable, "-c", "import autotune, autotune.data_files as d; print(autotune.__file__); "
                            "print(sorted(p.name for p in d.data_dir('tuned_db').iterdir()))"],
                           cwd=installed.home, env=installed.env, capture_output=True, text=True, check=True).stdout
    assert Path(where.splitlines()[0]).is_relative_to(installed.site) and str(ROOT) not in where
    assert "h200.jsonl" in where
    assert "usage: autotune" in installed.run("--help").stdout
    version = subprocess.run([sys.executable, "-m", "autotune", "--version"], cwd=installed.home, env=installed.env,
                             capture_output=True, text=True, check=True)
    assert version.stdout.strip()
    assert "h200" in installed.run("gpus").stdout


def test_readme_offline_commands_run_from_the_wheel(installed):
    """README's offline commands, as written (``space`` with ``--compile 1``), from a folder that is not the
    checkout: the shipped results, the selection table, and an fp16 family compiled with pip's headers."""
    installed.run("results", "import", "--shipped")
    assert "k1" in installed.run("table", "--gpu", "h200", "--dtype", "f32").stdout
    space = installed.run("space", "--gpu", "h200", "--dtype", "f16", "--shape", "1024", "--compile", "1").stdout
    assert "hgemm_wgmma on h200" in space and " ok" in space  # templates, spaces and NVRTC from the wheel


def test_readme_example_family_runs_from_the_wheel(installed):
    """``--family examples/column_sgemm/column_sgemm.toml`` names the example that ships in the wheel: README's
    ``space`` and no-GPU ``sweep`` commands run as written."""
    assert not (installed.home / "examples").exists()
    space = installed.run("space", "--gpu", "t4", "--shape", "1024", "--family", EXAMPLE, "--compile", "1").stdout
    assert "column_sgemm_" in space and " ok" in space
    (installed.home / "shapes.txt").write_text("64x64x64\n128x64x64\n")
    sweep = installed.run("sweep", "--gpu", "h200", "--shapes", "shapes.txt", "--family", EXAMPLE,
                          "--backend", "fake", "--trials", "8").stdout
    assert "128x64x64" in sweep and "column_sgemm_" in sweep


def test_the_installed_package_exports_the_shipped_table_for_the_runtime(installed):
    exported = installed.run("export", "--gpu", "h200", "--shipped", "--format", "python", "--dtype", "f32",
                             "--out", "table").stdout
    assert "exported python for h200" in exported
    loaded = subprocess.run([sys.executable, "-c", "import autotune; "
                             "t = autotune.load('table/autotune_table_h200_with_cubins.json'); "
                             "print(t.arch, len(t.dtypes['f32'].kernels))"],
                            cwd=installed.home, env=installed.env, capture_output=True, text=True, check=True).stdout
    assert loaded.startswith("sm_90 ")


# -- NVRTC's include path ------------------------------------------------------------------------------------


def _pip_header_roots() -> list[Path]:
    """The site-packages folders that hold pip's CUDA headers (nvidia/...)."""
    return [Path(p) for p in sys.path if any((Path(p) / sub).is_dir() for sub in kernel_compile.PIP_HEADERS)]


def test_kernels_compile_with_the_pip_packages_headers_only(monkeypatch):
    """The -I options NVRTC gets are pip's header folders: with cuda_fp16.h, mma.h and the crt/ headers mma.h
    includes, and no toolkit beside them (here or not); no compile runs."""
    roots = _pip_header_roots()
    if not roots:
        pytest.skip("no pip CUDA headers installed (pip install -e '.[cuda13]')")
    try:
        nvrtc.version()
    except Exception as error:  # the cache key holds NVRTC's version
        pytest.skip(f"NVRTC cannot be loaded: {error}")
    options: list[str] = []

    def compile_program(code, name, given, *headers):
        options.extend(given)
        return nvrtc.Output("refused by the test", None)

    monkeypatch.setattr(kernel_compile.nvrtc, "compile_program", compile_program)
    monkeypatch.setenv("CUDA_HOME", str(ROOT))  # even a toolkit named by the environment stays out
    kernel_compile.include_dirs.cache_clear()
    try:
        source = KernelSource(entry="k", code="__global__ void k() {}", template_hash="", target="sm_80")
        kernel_compile.compile_kernel(source, use_cache=False)
    finally:
        kernel_compile.include_dirs.cache_clear()
    folders = [Path(option[2:]) for option in options if option.startswith("-I")]
    assert folders and all(any(f.is_relative_to(root / "nvidia") for root in roots) for f in folders), folders
    for header in ("cuda_fp16.h", "mma.h", "crt/mma.h", "crt/host_defines.h"):
        assert any((folder / header).is_file() for folder in folders), f"{header} is in none of {folders}"


def test_cuda12_layout_finds_the_crt_headers_of_nvidia_cuda_nvcc_cu12(tmp_path, monkeypatch):
    """CUDA 12's packages put cuda_fp16.h in nvidia/cuda_runtime and crt/ in nvidia/cuda_nvcc (which has no
    cuda_fp16.h): both folders are used, and a toolkit is not."""
    site = tmp_path / "site-packages"
    for folder, header in (("cuda_runtime", "cuda_fp16.h"), ("cuda_nvcc", "crt/host_defines.h")):
        (site / "nvidia" / folder / "include" / header).parent.mkdir(parents=True, exist_ok=True)
        (site / "nvidia" / folder / "include" / header).write_text("")
    toolkit = tmp_path / "toolkit"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda_fp16.h").write_text("")
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    kernel_compile.include_dirs.cache_clear()
    try:
        found = kernel_compile.include_dirs()
        monkeypatch.setattr(sys, "path", [])  # no pip headers: $CUDA_HOME's first (then /usr/local/cuda's, if any)
        assert kernel_compile.include_dirs.__wrapped__()[0] == str(toolkit / "include")
    finally:
        kernel_compile.include_dirs.cache_clear()
    assert found == (str(site / "nvidia/cuda_runtime/include"), str(site / "nvidia/cuda_nvcc/include"))


def test_pip_headers_without_crt_give_way_to_a_whole_toolkit(tmp_path, monkeypatch):
    """pip's cuda_fp16.h without the crt/ headers mma.h includes (nvidia-cuda-runtime alone, no
    nvidia-cuda-crt): the toolkit's whole set is used, not a mix and not the part that cannot build WMMA."""
    site = tmp_path / "site-packages"
    (site / "nvidia/cu13/include").mkdir(parents=True)
    (site / "nvidia/cu13/include/cuda_fp16.h").write_text("")
    toolkit = tmp_path / "toolkit" / "include"
    (toolkit / "crt").mkdir(parents=True)
    (toolkit / "cuda_fp16.h").write_text("")
    (toolkit / "crt" / "mma.h").write_text("")
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv("CUDA_HOME", str(toolkit.parent))
    try:
        assert kernel_compile.include_dirs.__wrapped__() == (str(toolkit),)
        (site / "nvidia/cu13/include/crt").mkdir()
        (site / "nvidia/cu13/include/crt/mma.h").write_text("")  # nvidia-cuda-crt installed: pip's again
        assert kernel_compile.include_dirs.__wrapped__() == (str(site / "nvidia/cu13/include"),)
    finally:
        kernel_compile.include_dirs.cache_clear()


def test_a_cuda12_environment_compiles_with_its_own_pip_headers():
    """In a virtual environment with autotune[cuda12] (its python in $AUTOTUNE_CUDA12_PYTHON), NVRTC is
    CUDA 12's and every include folder is inside that environment, crt/ headers included."""
    python = os.environ.get("AUTOTUNE_CUDA12_PYTHON")
    if not python:
        pytest.skip("no CUDA 12 environment: set AUTOTUNE_CUDA12_PYTHON to the python of a virtual environment "
                    "with autotune[cuda12] installed")
    script = ("import sys; from autotune.kernel.compile import include_dirs, nvrtc_version; "
              "print(sys.prefix); print(nvrtc_version()); print(*include_dirs(), sep='\\n')")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUDA_HOME", "CUDA_PATH")}
    lines = subprocess.run([python, "-c", script], env=env, cwd=Path(python).parent, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    prefix, version, folders = Path(lines[0]), lines[1], [Path(line) for line in lines[2:]]
    assert version.startswith("12."), version
    assert folders and all(folder.is_relative_to(prefix) for folder in folders), (prefix, folders)
    for header in ("cuda_fp16.h", "mma.h", "crt/mma.h", "crt/host_defines.h"):
        assert any((folder / header).is_file() for folder in folders), f"{header} is in none of {folders}"
