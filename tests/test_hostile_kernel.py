"""Hostile spaces and kernels: what a user family's files, a cache and a table file could try.

A family's source includes only CUDA headers and files of its folder; every render is
bounded in time, size and depth; a space of 10**10 configs is counted, not listed; launch
values are checked; cubins are checked before they are trusted. Each case gives a result
or one line, reads no file it should not, and never hangs.
"""

import base64
import json
import os
import random
import struct
from pathlib import Path

import pytest
from test_cli import assert_one_line_error, autotune

from autotune.errors import SearchError, SpaceError
from autotune.gpu_specs import gpu_spec
from autotune.kernel import compile as compiling
from autotune.kernel import nvrtc, render_process
from autotune.kernel.compile import CompiledKernel, CompileFailure, compile_kernel, include_dirs
from autotune.kernel.cubin import CubinError, check_cubin
from autotune.kernel.includes import IncludeError, check_source, family_headers, includes
from autotune.kernel.render import MAX_SOURCE_CHARS, render
from autotune.kernel.source import KernelSource
from autotune.problem import GemmProblem
from autotune.search.draws import FeasibleDraws
from autotune.space import survey as surveying
from autotune.space.family import SearchSpace, load_space, shipped_families
from autotune.space.survey import SpaceTooLarge, survey

H200 = gpu_spec("h200")
SECRET = "s3cr3t_T0KEN"

LAUNCH = {"block": "64", "grid_x": "cdiv(problem.n, 8)", "grid_y": "cdiv(problem.m, 8)", "smem_bytes": "0",
          "opt_in": "0", "dynamic_smem": "0"}
KERNEL = 'extern "C" __global__ void {{ NAME }}(float* x) { x[threadIdx.x] = {{ A }}; }\n'


def write_family(folder: Path, template: str = KERNEL, knobs: str = "A = [1, 2]", extra: str = "", **launch) -> Path:
    """A user family in ``folder``: its space file ``mine.toml`` (returned) and its template ``mine.cu.j2``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mine.cu.j2").write_text(template)
    table = "\n".join(f'{key} = "{value}"' for key, value in {**LAUNCH, **launch}.items())
    path = folder / "mine.toml"
    path.write_text(f'family = "mine"\ndtype = "f32"\ntemplate = "mine.cu.j2"\n\n[knobs]\n{knobs}\n{extra}\n'
                    f'[launch]\n{table}\n')
    return path


def family(*args, **kwargs) -> SearchSpace:
    return SearchSpace(write_family(*args, **kwargs))


@pytest.fixture
def secret(tmp_path):
    """A file only its owner may read, holding SECRET."""
    path = tmp_path / "private" / "secret.txt"
    path.parent.mkdir()
    path.write_text(f"{SECRET} and more\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def cubin():
    """A real cubin of a kernel named ``kk`` for sm_90 (one NVRTC compile)."""
    source = KernelSource("kk", 'extern "C" __global__ void kk(float* x) { x[threadIdx.x] = 1.0f; }\n', "h", "sm_90")
    compiled = compile_kernel(source, use_cache=False)
    assert isinstance(compiled, CompiledKernel)
    return compiled.cubin


# -- includes: only CUDA headers and files of the family's folder -----------------------------------------------


def include_forms(path: str) -> dict[str, str]:
    """Every way of writing a preprocessor include of ``path`` that NVRTC 13 reads (checked by hand
    against it: each of these put the file's first token in its log), and a few it does not but might."""
    return {
        "quoted": f'#include "{path}"\n',
        "angled": f"#include <{path}>\n",
        "out of a header folder": f"#include <{'../' * 12}{path.lstrip('/')}>\n",
        "computed": f'#define FILE "{path}"\n#include FILE\n',
        "computed angled": f"#define FILE <{path}>\n#include FILE\n",
        "include_next": f'#include_next "{path}"\n',
        "line splice": f'#\\\ninclude "{path}"\n',
        "splice in the name": f'#inc\\\nlude "{path}"\n',
        "splice with CRLF": f'#\\\r\ninclude "{path}"\n',
        "comment between": f'#/* x */include "{path}"\n',
        "comment across lines": f'#/*\n*/include "{path}"\n',
        "form feed": f'#\finclude "{path}"\n',
        "vertical tab": f'#\vinclude "{path}"\n',
        "carriage return": f'#\rinclude "{path}"\n',
        "digraph": f'%:include "{path}"\n',
        "digraph and space": f'%: include "{path}"\n',
        "import": f'#import "{path}"\n',
        "embed": f'const char x[] = {{\n#embed "{path}"\n}};\n',
        "has_include": f'#if __has_include("{path}")\n#endif\n',
        "in a raw string's shadow": f'auto s = R"(x)";\n#include "{path}"\n',
        "backslash and spaces": f'# \\ \ninclude "{path}"\n',
    }


@pytest.mark.parametrize("form", include_forms("/etc/shadow"))
def test_every_include_form_of_a_host_file_is_refused(form):
    with pytest.raises(IncludeError):
        check_source(include_forms("/etc/shadow")[form], (), include_dirs())


@pytest.mark.parametrize("code, fragment", [
    ('#include "secret.txt"\n', "not one of the headers"),  # the working directory: NVRTC looks there for "..."
    ('#include "cuda_fp16.h"\n', "<cuda_fp16.h>"),  # a CUDA header, quoted: NVRTC looks beside the source first
    ("#include <a/*b>\n", "relative path"),
    ("#include <x> y\n", "followed by"),
    ("#if 0\n#include </proc/self/environ>\n#endif\n", "absolute"),
    ("#define F(x) #x\n#define G #include\n", "outside a directive"),
    ('const char *s = R"x(\n#include "a")x";\n', "raw string"),
    ("#pragma unroll\n# 1 \"x.cu\"\n", "#1"),
    ("int a\u00a0= 1;\n", "outside a comment"),
    ("int a;\0", "NUL"),
    ("/* never closed\n", "never ends"),
])
def test_what_cannot_be_proved_safe_is_refused(code, fragment):
    with pytest.raises(IncludeError, match=fragment):
        check_source(code, (), include_dirs())


def test_includes_read_as_the_preprocessor_reads_them():
    code = ('#include <cuda_fp16.h>\n#  include /* c */ "local.cuh" // c\n%:include <mma.h>\n'
            '// #include "commented.h"\nconst char *s = "#include \\"in a string.h\\"";\n'
            "#if 0\ndon't\n#endif\nint n = 1'000'000; // a digit separator is no character literal\n"
            "#define STR(x) #x\n#pragma unroll\n#\n")
    assert [str(include) for include in includes(code)] == ["<cuda_fp16.h>", '"local.cuh"', "<mma.h>"]


def test_a_header_name_is_lexed_as_one_so_a_comment_inside_it_hides_nothing():
    code = '#include <cuda_fp16.h/*>\n#include "/etc/shadow"\n*/\n'
    with pytest.raises(IncludeError):
        check_source(code, (), include_dirs())


def test_nvrtc_never_sees_a_refused_source(monkeypatch, secret):
    def compile_program(*args, **kwargs):
        raise AssertionError("NVRTC was called")

    monkeypatch.setattr(nvrtc, "compile_program", compile_program)
    for form, code in include_forms(str(secret)).items():
        result = compile_kernel(KernelSource("k", code, "h", "sm_90"), use_cache=False)
        assert isinstance(result, CompileFailure) and "refused before compiling" in result.message, form
        assert SECRET not in result.message + result.log


def test_the_family_renders_with_the_files_of_its_folder_in_memory(tmp_path):
    template = ('#include "tile.cuh"\n#include <cuda_fp16.h>\n'
                'extern "C" __global__ void {{ NAME }}(float* x) { x[threadIdx.x] = scale({{ A }}); }\n')
    space = family(tmp_path / "fam", template)
    tile = '#include "sub/more.cuh"\n__device__ float scale(int a) { return 2 * a; }\n'
    (tmp_path / "fam" / "tile.cuh").write_text(tile)
    (tmp_path / "fam" / "sub").mkdir()
    (tmp_path / "fam" / "sub" / "more.cuh").write_text("#pragma once\n")
    source = render(space, space.config({"A": 2}), H200)
    assert dict(source.headers) == {"tile.cuh": tile, "sub/more.cuh": "#pragma once\n"}
    compiled = compile_kernel(source, use_cache=False)  # NVRTC takes them from memory, not from the folder
    assert isinstance(compiled, CompiledKernel), compiled.message


def test_a_header_of_the_family_cannot_include_a_host_file_nor_lead_out_by_a_link(tmp_path, secret):
    space = family(tmp_path / "fam", '#include "tile.cuh"\n' + KERNEL)
    header = tmp_path / "fam" / "tile.cuh"
    header.write_text(f'#include "{secret}"\n')
    with pytest.raises(SpaceError, match="absolute"):
        render(space, space.config({"A": 1}), H200)
    header.unlink()
    header.symlink_to(secret)
    with pytest.raises(SpaceError, match="not a file inside") as error:
        render(space, space.config({"A": 1}), H200)
    assert SECRET not in str(error.value)


def test_a_family_kept_in_a_home_folder_gives_its_sources_no_dot_files_and_no_other_files(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa.h").write_text(SECRET)
    (home / "notes.txt").write_text(SECRET)
    for name, fragment in ((".ssh/id_rsa.h", "hidden"), ("notes.txt", "header files only")):
        space = family(home, f'#include "{name}"\n' + KERNEL)
        with pytest.raises(SpaceError, match=fragment) as error:
            render(space, space.config({"A": 1}), H200)
        assert SECRET not in str(error.value)
    space = family(home, '{% include ".ssh/id_rsa.h" %}\n' + KERNEL)  # nor do its templates
    with pytest.raises(SpaceError, match="not a file in") as error:
        render(space, space.config({"A": 1}), H200)
    assert SECRET not in str(error.value)


def test_the_cache_key_holds_the_headers():
    one = KernelSource("k", '#include "a.cuh"\n', "h", "sm_90", (("a.cuh", "// one\n"),))
    two = KernelSource("k", '#include "a.cuh"\n', "h", "sm_90", (("a.cuh", "// two\n"),))
    assert compiling._cache_key(one, "sm_90") != compiling._cache_key(two, "sm_90")
    assert compiling._pool_key(one, None) != compiling._pool_key(two, None)
    bare = KernelSource("k", "// k\n", "h", "sm_90")
    assert compiling._pool_key(bare, None) == (bare.code, "sm_90")  # sources without headers key as before


def test_family_headers_are_bounded(tmp_path):
    folder = tmp_path / "fam"
    folder.mkdir()
    (folder / "big.cuh").write_text("//" + "x" * (1 << 20))
    with pytest.raises(IncludeError, match="larger than"):
        family_headers('#include "big.cuh"\n', folder, ())


@pytest.mark.parametrize("name", shipped_families())
def test_shipped_families_include_only_cuda_headers(name):
    space = load_space(name)
    config = next(v.config for m in (4096, 1)  # sgemm_gemv takes at most 8 rows
                  for v in survey(space, H200, GemmProblem(m, 4096, 4096, space.dtype), limit=1).feasible)
    source = render(space, config, H200)
    assert source.headers == ()
    assert all(not include.quoted for include in includes(source.code))


def test_the_space_command_refuses_a_family_reading_a_secret_in_one_line(tmp_path, secret):
    path = write_family(tmp_path / "fam", f'#include "{secret}"\n' + KERNEL)
    result = autotune("space", "--gpu", "h200", "--shape", "64", "--family", str(path),
                      "--compile", "1")
    assert_one_line_error(result, "mine.cu.j2", "absolute")
    assert SECRET not in result.stdout + result.stderr


# -- every render is bounded in time, size and depth ---------------------------------------------------------


@pytest.fixture
def short_deadline(monkeypatch):
    monkeypatch.setattr(render_process, "RENDER_SECONDS", 3.0)


@pytest.mark.parametrize("template, fragment", [
    ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "longer than"),
    ("{{ lipsum(100000000) }}", "longer than|MiB|memory|stopped"),
    ("{{ 'x'|center(3000000000) }}", "MiB|memory|stopped"),
    ("{% set n = namespace(x=3) %}{% for i in range(64) %}{% set n.x = n.x * n.x %}{% endfor %}{{ n.x }}",
     "longer than|MiB|memory|stopped"),
    ('{% include "mine.cu.j2" %}', "nests too deeply|stopped"),
    ("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", "nests too deeply|stopped"),
    ("{% for i in range(2000) %}{{ 'x' * 1000 }}{% endfor %}", f"more than {MAX_SOURCE_CHARS}"),
])
def test_a_render_that_would_hang_or_exhaust_memory_is_one_error(tmp_path, short_deadline, template, fragment):
    space = family(tmp_path / "fam", template)
    with pytest.raises(SpaceError, match=fragment) as error:
        render(space, space.config({"A": 1}), H200)
    assert "\n" not in str(error.value)
    good = family(tmp_path / "good")  # the next render gets a working process
    assert "= 2;" in render(good, good.config({"A": 2}), H200).code


def test_a_template_too_large_or_nested_too_deep_to_read_is_one_error(tmp_path):
    space = family(tmp_path / "big", "{# " + "x" * (1 << 20) + " #}")
    with pytest.raises(SpaceError, match="larger than"):
        space.template_hash
    deep = family(tmp_path / "deep", "{% if 1 %}" * 3000 + "{% endif %}" * 3000)
    with pytest.raises(SpaceError, match="nests too deeply"):
        deep.template_hash


def test_the_space_command_stops_a_template_that_fills_memory_in_one_line(tmp_path):
    path = write_family(tmp_path / "fam", "{{ 'x'|center(3000000000) }}")
    result = autotune("space", "--gpu", "h200", "--shape", "64", "--family", str(path),
                      "--compile", "1", timeout=120)
    assert_one_line_error(result, "mine.cu.j2")


# -- spaces of 10**10 configs and more ------------------------------------------------------------------------

MANY_KNOBS = "\n".join(f"K{i} = [{', '.join(map(str, range(1, 11)))}]" for i in range(12))  # 10**12 configs


def test_a_space_of_10_to_the_12_configs_is_counted_and_sampled_not_listed(tmp_path):
    space = family(tmp_path / "fam", KERNEL.replace("{{ A }}", "{{ K0 }}"), MANY_KNOBS,
                   extra='[[rules]]\nrequire = "K0 != 3"\nreason = "K0 is {K0}"\n')
    counted = survey(space, H200, GemmProblem(64, 64, 64, "f32"), keep=())
    assert counted.feasible == [] and counted.feasible_count == 9 * 10**11 and counted.rejected == 10**11
    picked = survey(space, H200, GemmProblem(64, 64, 64, "f32"), keep=[0, 10**11, 9 * 10**11 - 1])
    assert [v.config.as_dict()["K0"] for v in picked.feasible] == [1, 2, 10]
    assert picked.feasible[-1].config.params == tuple((f"K{i}", 10) for i in range(12))


def test_a_spread_sample_of_10_to_the_12_configs_is_evenly_spaced_and_counts_them_all(tmp_path):
    space = family(tmp_path / "fam", KERNEL.replace("{{ A }}", "{{ K0 }}"), MANY_KNOBS,
                   extra='[[rules]]\nrequire = "K0 != 3"\nreason = "K0 is {K0}"\n')
    sampled = survey(space, H200, GemmProblem(64, 64, 64, "f32"), spread=8)
    assert sampled.feasible_count == 9 * 10**11 and sampled.rejected == 10**11
    positions = range(0, 9 * 10**11, _spread_stride(9 * 10**11, 8))
    assert 8 <= len(sampled.feasible) == len(positions) <= 16
    expected = survey(space, H200, GemmProblem(64, 64, 64, "f32"), keep=positions)
    assert [v.config for v in sampled.feasible] == [v.config for v in expected.feasible]


def test_the_space_command_reports_a_space_of_10_to_the_12_configs(tmp_path):
    path = write_family(tmp_path / "fam", KERNEL.replace("{{ A }}", "{{ K0 }}"), MANY_KNOBS)
    result = autotune("space", "--gpu", "h200", "--shape", "64", "--family", str(path),
                      "--compile", "0", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["configs"] == report["feasible"] == 10**12


@pytest.mark.parametrize("seed", range(6))
def test_listing_chosen_positions_matches_listing_every_config(tmp_path, seed):
    rng = random.Random(seed)
    knobs = "\n".join(f"K{i} = {rng.sample(range(1, 9), rng.randint(1, 4))}" for i in range(5))
    rules = "".join(f'[[rules]]\nrequire = "K{rng.randrange(5)} * K{rng.randrange(5)} != {rng.randint(1, 30)}"\n'
                    f'reason = "no"\n' for _ in range(3))
    space = family(tmp_path / "fam", KERNEL, knobs, extra=f'[derived]\nD = "K1 + K4"\n{rules}', smem_bytes="D * 1000")
    every = survey(space, H200)
    positions = sorted(rng.sample(range(len(every.feasible)), min(7, len(every.feasible))))
    picked = survey(space, H200, keep=positions)
    assert [v.config for v in picked.feasible] == [every.feasible[i].config for i in positions]
    assert [v.values for v in picked.feasible] == [every.feasible[i].values for i in positions]
    assert picked.feasible_count == every.feasible_count == len(every.feasible)
    assert [(r.example, r.count) for r in picked.rejections] == [(r.example, r.count) for r in every.rejections]
    for spread in (1, 2, 3):
        sampled = survey(space, H200, spread=spread)
        at = range(0, len(every.feasible), _spread_stride(len(every.feasible), spread))
        assert [v.config for v in sampled.feasible] == [every.feasible[i].config for i in at]
        assert min(spread, len(every.feasible)) <= len(sampled.feasible) <= 2 * spread
        assert sampled.feasible_count == every.feasible_count
        assert [(r.example, r.count) for r in sampled.rejections] == [(r.example, r.count) for r in every.rejections]


def _spread_stride(feasible: int, spread: int) -> int:
    """The smallest power of two whose multiples below ``feasible`` number at most ``2 * spread``."""
    stride = 1
    while -(-feasible // stride) > 2 * spread:
        stride *= 2
    return stride


RARE = "\n".join(f"K{i} = [{', '.join(map(str, range(1, 11)))}]" for i in range(10))  # 10**10 configs


def rare_family(folder: Path) -> SearchSpace:
    """10**10 configs, of which one is feasible, and a rule that reads every knob."""
    total = " + ".join(f"K{i}" for i in range(10))
    return family(folder, KERNEL.replace("{{ A }}", "{{ K0 }}"), RARE,
                  extra=f'[[rules]]\nrequire = "{total} == 100"\nreason = "the knobs add up to less than 100"\n')


def test_a_walk_past_its_budget_is_one_error(tmp_path, monkeypatch):
    monkeypatch.setattr(surveying, "WORK_BUDGET", 20_000)
    space = rare_family(tmp_path / "fam")
    with pytest.raises(SpaceTooLarge, match="more than 20000 steps") as error:
        survey(space, H200, keep=())
    assert "\n" not in str(error.value)


def test_a_search_where_feasible_configs_are_rare_stops_in_one_line(tmp_path, monkeypatch):
    from autotune.search import draws

    monkeypatch.setattr(surveying, "WORK_BUDGET", 20_000)
    monkeypatch.setattr(draws, "MAX_RANDOM_DRAWS", 50)
    space = rare_family(tmp_path / "fam")
    with pytest.raises(SearchError, match="50 random draws found no feasible config of mine") as error:
        FeasibleDraws(space, H200, GemmProblem(64, 64, 64, "f32"), seed=1).opening(2)
    assert "\n" not in str(error.value)


# -- launch values ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, text, shown", [
    ("block", "-5", "-5"),
    ("block", "0", "0"),
    ("grid_x", "1e308 * 10 - 1e308 * 10", "nan"),
    ("opt_in", "1e308 * 10 - 1e308 * 10", "nan"),
    ("smem_bytes", "0.5", "0.5"),
    ("dynamic_smem", "2 ** 40", str(2**40)),
])
def test_a_bad_constant_launch_value_is_refused_at_load(tmp_path, key, text, shown):
    with pytest.raises(SpaceError) as error:
        family(tmp_path, **{key: text})
    message = str(error.value)
    assert "mine.toml" in message and f"[launch] {key}" in message and shown in message and "\n" not in message


def test_a_seeds_bad_launch_value_is_refused_at_load(tmp_path):
    with pytest.raises(SpaceError, match=r"mine.toml: \[launch\] block = 'A - 2' is -1 for mine_a1"):
        family(tmp_path, block="A - 2", extra="[[seeds]]\nA = 1\n")


def test_a_configs_bad_launch_value_is_one_error_where_it_is_computed(tmp_path):
    space = family(tmp_path / "smem", smem_bytes="64 // (A - 1)")
    with pytest.raises(SpaceError, match=r"\[launch\] smem_bytes = '64 // \(A - 1\)' is a division by zero"):
        survey(space, H200)
    space = family(tmp_path / "block", block="A * 32 / 3")
    with pytest.raises(SpaceError, match=r"\[launch\] block = 'A \* 32 / 3' is 10.66.* for mine_a1"):
        space.launch(space.config({"A": 1}), H200, GemmProblem(64, 64, 64, "f32"))


def test_the_space_command_refuses_a_nan_launch_value_in_one_line(tmp_path):
    path = write_family(tmp_path, grid_y="1e308 * 10 - 1e308 * 10")
    result = autotune("space", "--gpu", "h200", "--shape", "64", "--family", str(path))
    assert_one_line_error(result, "mine.toml", "grid_y", "nan")


# -- cubins are checked before they are trusted ------------------------------------------------------------------


def test_a_real_cubin_passes_its_check(cubin):
    check_cubin(cubin, "kk", "sm_90")


@pytest.mark.parametrize("spoil, fragment", [
    (lambda cubin: random.Random(1).randbytes(100), "not an ELF"),
    (lambda cubin: cubin[:200], "outside the file"),
    (lambda cubin: cubin[:18] + struct.pack("<H", 62) + cubin[20:], "machine 62"),
    (lambda cubin: b"\x7fELF\x01" + cubin[5:], "64-bit"),
    (lambda cubin: cubin.replace(b"kk\0", b"zz\0"), "no function 'kk'"),
])
def test_a_bad_cubin_fails_its_check(cubin, spoil, fragment):
    with pytest.raises(CubinError, match=fragment):
        check_cubin(spoil(cubin), "kk")


def test_a_cubin_for_another_sm_fails_its_check_for_this_one(cubin):
    with pytest.raises(CubinError, match="built for sm_90, not sm_80"):
        check_cubin(cubin, "kk", "sm_80")


@pytest.mark.parametrize("planted", [
    lambda cubin: (random.Random(2).randbytes(100), None),
    lambda cubin: (cubin.replace(b"kk\0", b"zz\0"), None),
    lambda cubin: (cubin, "{not json"),
    lambda cubin: (cubin, json.dumps({"resources": {"registers": "lots"}, "log": ""})),
])
def test_a_bad_cache_entry_is_discarded_and_compiled_again(cubin, planted):
    source = KernelSource("kk", 'extern "C" __global__ void kk(float* x) { x[threadIdx.x] = 1.0f; }\n', "h", "sm_90")
    path = compiling.cache_dir() / "cubins" / f"{compiling._cache_key(source, 'sm_90')}.cubin"
    path.parent.mkdir(parents=True, exist_ok=True)
    planted_cubin, planted_meta = planted(cubin)
    meta = {"resources": {"registers": 8, "smem_static": 0, "smem_dynamic": 0, "stack_frame": 0,
                          "spill_stores": 0, "spill_loads": 0}, "log": "planted"}
    path.write_bytes(planted_cubin)
    path.with_suffix(".json").write_text(planted_meta or json.dumps(meta))
    compiled = compile_kernel(source)
    assert isinstance(compiled, CompiledKernel) and compiled.log != "planted"
    check_cubin(compiled.cubin, "kk", "sm_90")
    assert path.read_bytes() == compiled.cubin  # the entry now holds the new compile


def test_a_table_file_with_a_bad_cubin_is_refused_at_load_in_one_line(tmp_path, cubin):
    from autotune.kernel.contract import LaunchContract
    from autotune.select.kernel_table import DtypeTable, KernelTable, TableError, TableKernel, TableRule, read_table

    launch = LaunchContract(entry="kk", target="sm_90", block=(64, 1, 1), grid=("1", "1", "1"), dynamic_smem=0,
                            opt_in=False)
    kernel = TableKernel(name="kk", family="sgemm", params={}, template_hash="0" * 16, launch=launch, cubin=cubin)
    table = KernelTable(arch="sm_90", gpu="h200", measured_on=("NVIDIA H200",), dtypes={"f32": DtypeTable(
        (kernel,), (TableRule(64, 64, 64, "kk", ms=0.01, cublas_ms=0.01, measured_on="NVIDIA H200"),))})
    path = tmp_path / "table.json"
    table.write(path, with_cubins=True)
    assert read_table(path).dtypes["f32"].kernels[0].cubin == cubin
    data = json.loads(path.read_text())
    data["dtypes"]["f32"]["kernels"][0]["cubin_base64"] = base64.b64encode(os.urandom(100)).decode()
    path.write_text(json.dumps(data))
    with pytest.raises(TableError, match="table.json is malformed: .*not an ELF file") as error:
        read_table(path)
    assert "\n" not in str(error.value)


# -- the space command compiles what a search would run ---------------------------------------------------------


def test_the_space_command_compiles_each_config_as_a_search_at_the_shape_builds_it(tmp_path):
    from autotune.cli.space import _sample, _seed_builds

    space = family(tmp_path, KERNEL, "A = [1, 2, 3]\nWHOLE = [0, 1]",
                   extra='[defaults]\nWHOLE = 0\n[specialize]\nWHOLE = "problem.m % 64 == 0"\n'
                         "[[seeds]]\nA = 2\n")
    whole, partial = GemmProblem(128, 64, 64, "f32"), GemmProblem(100, 64, 64, "f32")
    for problem, built in ((whole, 1), (partial, 0)):
        listed = [verdict.config for verdict in survey(space, H200, problem, spread=48).feasible]
        chosen = _sample(space, H200, problem, listed, 24, _seed_builds(space, H200, problem, 24))
        assert [c.as_dict() for c in chosen] == [{"A": a, "WHOLE": built} for a in (2, 1, 3)]
        assert _sample(space, H200, problem, listed, None, _seed_builds(space, H200, problem, None)) == chosen


def test_sgemm_seeds_compile_as_their_whole_tile_builds_at_a_whole_tile_shape():
    from autotune.cli.space import _builds

    space = load_space("sgemm")
    assert all(seed["WHOLE_TILES"] == 0 for seed in space.seeds)
    for problem, whole in ((GemmProblem(4096, 4096, 4096, "f32"), True), (GemmProblem(4095, 4096, 4096, "f32"), False)):
        builds = list(_builds(space, H200, problem, space.seeds))
        assert builds and all(build == space.for_problem(build, H200, problem) for build in builds)
        assert any(build["WHOLE_TILES"] for build in builds) == whole
