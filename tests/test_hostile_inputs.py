"""Hostile inputs: files, names, URLs and shapes a careful user's security review would try.

Every hostile input gets one line and a non-zero exit, nothing runs that the user
did not ask for, and no password appears in any output.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cpu_seconds
from test_cli import ROOT, assert_one_line_error, autotune

from autotune.data_files import data_dir
from autotune.errors import InputError, SpaceError
from autotune.gpu_specs import gpu_spec
from autotune.problem import GemmProblem, make_problem
from autotune.records import Environment, Measurement, Timing
from autotune.space.family import Config, SearchSpace, load_space, resolve_family

H200 = gpu_spec("h200")
SECRET = "s3cr3t-Pa55"

LAUNCH = ('[launch]\nblock = "64"\ngrid_x = "cdiv(problem.n, 8)"\ngrid_y = "cdiv(problem.m, 8)"\n'
          'smem_bytes = "0"\nopt_in = "0"\ndynamic_smem = "0"\n')


def space_text(family="mine", knobs="A = [1, 2]", extra="", template="mine.cu.j2"):
    return f'family = "{family}"\ndtype = "f32"\ntemplate = "{template}"\n{extra}\n[knobs]\n{knobs}\n{LAUNCH}'


def write_space(folder: Path, text: str, name="mine.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def shell_template(marker: Path) -> str:
    """A template that, rendered without a sandbox, runs a shell command creating ``marker``."""
    return ('// {{ NAME }}\n{{ cycler.__init__.__globals__.os.system("touch ' + str(marker) + '") }}\n'
            'extern "C" __global__ void {{ NAME }}() {}\n')


def planted_family(folder: Path, marker: Path, family="trav") -> Path:
    """A space file whose template runs a shell command; returns the file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evil.cu.j2").write_text(shell_template(marker))
    text = space_text(family, "A = [0]", extra='template_dir = "."', template="evil.cu.j2")
    return write_space(folder, text, f"{family}.toml")


# -- names are names, paths are explicit -----------------------------------------------------


def test_a_family_name_that_walks_out_of_the_spaces_folder_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    path = planted_family(tmp_path / "x", marker)
    walk = os.path.relpath(path.with_suffix(""), data_dir("search_spaces"))  # ../../../tmp/.../x/trav
    assert walk.startswith("..")
    result = autotune("space", "--gpu", "h200", "--shape", "64", "--family", walk, "--compile", "1")
    assert not marker.exists()
    assert_one_line_error(result, repr(walk))


def test_load_space_takes_shipped_names_only(tmp_path):
    for name in ("../search_spaces/sgemm", "sgemm.toml", str(data_dir("search_spaces") / "sgemm"), "nope", ""):
        with pytest.raises(InputError, match="sgemm"):
            load_space(name)
    assert load_space("sgemm").family == "sgemm"


def test_a_results_line_naming_a_path_is_refused_and_a_database_row_is_never_a_path(tmp_path):
    """The issue's chain: a crafted results line + a file on disk made ``autotune ladder`` run a shell command."""
    marker = tmp_path / "ran"
    path = planted_family(tmp_path / "x", marker)
    walk = os.path.relpath(path.with_suffix(""), data_dir("search_spaces"))
    line = json.loads(Path(ROOT, "tuned_db", "h200.jsonl").read_text().splitlines()[0])
    line.update(family=walk, params={"A": 0}, template_hash="0" * 16,
                problem={**line["problem"], "m": 128, "n": 128, "k": 128})
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text(json.dumps(line) + "\n")
    db = f"sqlite:///{tmp_path}/r.db"
    assert_one_line_error(autotune("results", "import", str(crafted), "--db", db), "family", "sgemm")

    from autotune.results import ResultStore

    store = ResultStore(db)  # a row written by other means: its family is still only a name
    env = Environment("h200-fake", "NVIDIA H200 (fake)", "sm_90", "0.0 (fake)", "0.0", "0.0", "none")
    timing = Timing(0.001, 0.001, 0.001, 0.001, 0.001, (0.001,))
    store.add_measurement(env, GemmProblem(128, 128, 128), Config(walk, (("A", 0),)), "0" * 16,
                          Measurement(timing, 4.0, 0.0), "crafted")
    ladder = autotune("ladder", "--gpu", "h200", "--shape", "128", "--backend", "fake", "--db", db)
    assert ladder.returncode == 0, ladder.stderr
    assert "no tuned result in the database" in ladder.stdout
    assert not marker.exists()


def test_a_users_family_is_a_path_with_its_templates_beside_it(tmp_path):
    example = Path(ROOT, "examples", "column_sgemm", "column_sgemm.toml")
    space = resolve_family(str(example))
    assert space.family == "column_sgemm" and space.template_dir == example.parent.resolve()
    assert resolve_family("sgemm") is load_space("sgemm")
    with pytest.raises(InputError, match="no such file"):
        resolve_family(str(tmp_path / "missing.toml"))
    shadow = write_space(tmp_path, space_text(family="sgemm"), "shadow.toml")
    with pytest.raises(SpaceError, match="shipped family"):
        resolve_family(str(shadow))


@pytest.mark.parametrize("template_dir", ["..", "../elsewhere", "/tmp", "sub/../.."])
def test_template_dir_stays_inside_the_space_files_folder(tmp_path, template_dir):
    path = write_space(tmp_path / "space", space_text(extra=f'template_dir = "{template_dir}"'))
    with pytest.raises(SpaceError, match="leaves the folder"):
        SearchSpace(path)


def test_a_template_linked_from_outside_the_folder_is_not_read(tmp_path):
    from autotune.kernel.render import render

    outside = tmp_path / "outside.cu.j2"
    outside.write_text('extern "C" __global__ void {{ NAME }}() {}\n')
    folder = tmp_path / "space"
    path = write_space(folder, space_text())
    (folder / "mine.cu.j2").symlink_to(outside)
    space = SearchSpace(path)
    with pytest.raises(SpaceError, match="not a file in"):
        render(space, space.config({"A": 1}), H200)


@pytest.mark.parametrize("field, text", [
    ("family", space_text(family="x} __global__ void evil(){")),
    ("family", space_text(family="../x")),
    ("knob", space_text(knobs='"A} __global__ void evil(){" = [1]')),
    ("knob", space_text(knobs="gpu = [1]")),
    ("knob", space_text(knobs='"" = [1]')),
    ("derived value", space_text(extra="") + '[derived]\n"B(){" = "A"\n'),
    ("template", space_text(template="../sgemm.cu.j2")),
])
def test_names_that_are_not_identifiers_are_refused_at_load(tmp_path, field, text):
    with pytest.raises(SpaceError, match=field):
        SearchSpace(write_space(tmp_path, text))


def test_a_kernel_name_that_is_not_an_identifier_is_never_rendered():
    from autotune.kernel.render import render

    space = load_space("naive_f32")
    evil = Config("x} __global__ void evil(){", space.config({"BLOCK": 16, "HALF": 0}).params)
    with pytest.raises(SpaceError, match="not a kernel name"):
        render(space, evil, H200)


# -- templates cannot reach the host -------------------------------------------------------------


def test_templates_render_in_a_sandbox(tmp_path):
    from autotune.kernel.render import render

    marker = tmp_path / "ran"
    space = SearchSpace(planted_family(tmp_path / "x", marker))
    with pytest.raises(SpaceError, match="sandbox"):
        render(space, space.config({"A": 0}), H200)
    assert not marker.exists()


@pytest.mark.parametrize("expression", ["{{ 9 ** 99999999 }}", "{{ 'x' * 100000000 }}"])
def test_template_arithmetic_is_bounded(tmp_path, expression):
    from autotune.kernel.render import render

    folder = tmp_path / "space"
    path = write_space(folder, space_text())
    (folder / "mine.cu.j2").write_text(expression + "\n")
    space = SearchSpace(path)
    started = cpu_seconds()
    with pytest.raises(SpaceError, match="too"):
        render(space, space.config({"A": 1}), H200)
    assert cpu_seconds() - started < 5


def test_the_space_command_refuses_a_planted_template_in_one_line(tmp_path):
    marker = tmp_path / "ran"
    path = planted_family(tmp_path / "x", marker)
    result = autotune("space", "--gpu", "h200", "--shape", "64", "--family", str(path), "--compile", "1")
    assert not marker.exists()
    assert_one_line_error(result, "evil.cu.j2", "sandbox")


@pytest.mark.parametrize("reason", [
    "{gpu.__init__.__globals__[dataclasses].sys.modules[os].environ[AUTOTUNE_TEST_SECRET]}",
    "{gpu.__class__}",
    "{gpu.marketing_name.__class__}",
    "{A.__class__}",
    "{problem}",
    "{A!r}",
    "{A:>999999999}",
    "{0}",
    "{}",
])
def test_reasons_read_only_values_and_gpu_fields(tmp_path, monkeypatch, reason):
    monkeypatch.setenv("AUTOTUNE_TEST_SECRET", SECRET)
    text = space_text() + f'[[rules]]\nrequire = "False"\nreason = "{reason}"\n'
    with pytest.raises(SpaceError, match="reason"):
        SearchSpace(write_space(tmp_path, text))


def test_a_reason_fills_in_values_and_gpu_fields(tmp_path):
    text = space_text() + ('[derived]\nB = "A * 8"\n[[rules]]\nrequire = "A < 2"\n'
                           'reason = "{A} and {B} on {gpu.key} ({gpu.sm}, {gpu.smem_per_block})"\n')
    space = SearchSpace(write_space(tmp_path, text))
    assert space.check(space.config({"A": 2}), H200).reason == "2 and 16 on h200 (sm_90, 49152)"
    assert space.check(space.config({"A": 1}), H200).feasible


@pytest.mark.parametrize("expression, fragment", [
    ("9 ** 9 ** 9", "exponent"),
    ("A ** 65", "exponent"),
    ("A ** B", "exponent"),
    ("(A ** 64) ** 64", "inside the base"),
    ("'x' * 100000000", "numbers"),
    ("gpu.marketing_name", "gpu.FIELD"),
    ("gpu", "gpu.FIELD"),
    ("problem.tflops", "problem.FIELD"),
    ("max(A, key=A)", "may be called"),
    ("C + 1", "not a knob"),
    ("A + " * 200 + "1", "characters"),
])
def test_expressions_are_bounded_at_load(tmp_path, expression, fragment):
    text = space_text(knobs="A = [1, 2]\nB = [3]") + f'[derived]\nD = "{expression}"\n'
    started = cpu_seconds()
    with pytest.raises(SpaceError, match=fragment):
        SearchSpace(write_space(tmp_path, text))
    assert cpu_seconds() - started < 1


def test_values_that_outgrow_64_bits_are_an_error_not_a_hang(tmp_path):
    chain = "\n".join(f'D{i} = "D{i - 1} * D{i - 1} * D{i - 1} * D{i - 1}"' for i in range(1, 12))
    text = space_text(knobs="A = [1000]") + f'[derived]\nD0 = "A"\n{chain}\n'
    space = SearchSpace(write_space(tmp_path, text))
    with pytest.raises(SpaceError, match="out of range"):
        space.values(space.config({"A": 1000}), H200)


@pytest.mark.parametrize("values, shown", [
    ("[64, 128.9]", "128.9"), ('[64, "x"]', "'x'"), ("[true]", "True"), ("[-1]", "-1"),
    ("[4294967296]", "4294967296"), ("[]", "[]"), ("[1, 1]", "twice"), ("64", "64"),
])
def test_knob_values_are_integers_named_with_file_and_knob(tmp_path, values, shown):
    with pytest.raises(SpaceError) as caught:
        SearchSpace(write_space(tmp_path, space_text(knobs=f"BM = {values}")))
    assert "mine.toml" in str(caught.value) and "BM" in str(caught.value) and shown in str(caught.value)


@pytest.mark.parametrize("table", [
    '[defaults]\nA = 1.5\n', '[[seeds]]\nA = "1"\n', '[[seeds]]\nA = true\n', 'priority = "high"\n',
    'arch_suffix = "; rm -rf ~"\n', 'dtype2 = 1\n[derived]\nB = [1]\n', '[[rules]]\nrequire = "A"\nreason = 3\n',
    '[[launch.tensor_maps]]\nname = "m"\noperand = "D"\nbox = ["8", "8"]\nswizzle = "0"\n',
])
def test_malformed_tables_are_one_space_error(tmp_path, table):
    text = space_text()
    if table.startswith(("priority", "arch_suffix")):
        text = table + text
    else:
        text += table
    with pytest.raises(SpaceError, match="mine.toml"):
        SearchSpace(write_space(tmp_path, text))


def test_a_bad_space_file_on_the_command_line_is_one_line(tmp_path):
    path = write_space(tmp_path, space_text(knobs="BM = [64, 128.9]"))
    assert_one_line_error(autotune("space", "--gpu", "h200", "--shape", "64", "--family", str(path)),
                          "mine.toml", "BM", "128.9")
    power = write_space(tmp_path, space_text() + '[derived]\nD = "9 ** 9 ** 9"\n', "power.toml")
    assert_one_line_error(autotune("space", "--gpu", "h200", "--shape", "64", "--family", str(power), timeout=60),
                          "power.toml", "exponent")


# -- secrets are never printed ----------------------------------------------------------------


@pytest.mark.parametrize("url, shown", [
    (f"postgresql://u:{SECRET}@db.example/results", "postgresql://u:***@db.example/results"),
    (f"postgresql+psycopg://u:{SECRET}@db.example:5432/r?sslmode=require",
     "postgresql+psycopg://u:***@db.example:5432/r?sslmode=require"),
    (f"mysql://u:{SECRET}@h/d?password={SECRET}&x=1", "mysql://u:***@h/d?password=***&x=1"),
    (f"sqlite:////tmp/r.db?password={SECRET}", "sqlite:////tmp/r.db?password=***"),
    (f"postgresql://u:{SECRET}@h:notaport/d", "postgresql://u:***@h:notaport/d"),
    ("sqlite:////tmp/r.db", "sqlite:////tmp/r.db"),
    ("postgresql://u@h/d", "postgresql://u@h/d"),
])
def test_shown_url_masks_passwords(url, shown):
    from autotune.results.urls import shown_url

    assert shown_url(url) == shown
    assert SECRET not in shown_url(url)


def test_autotune_db_holding_a_url_is_a_url_and_its_password_is_not_shown(tmp_path):
    result = autotune("query", "--gpu", "h200", "--shape", "64",
                      env={"AUTOTUNE_DB": f"postgresql://u:{SECRET}@127.0.0.1:9/db"})
    assert_one_line_error(result, "postgresql://u:***@127.0.0.1:9/db")
    assert "sqlite" not in result.stderr and SECRET not in result.stdout + result.stderr


def test_database_errors_of_commands_that_open_a_store_hide_the_password(tmp_path):
    url = f"postgresql://u:{SECRET}@127.0.0.1:9/db"
    for args in (["ladder", "--gpu", "h200", "--shape", "64", "--backend", "fake", "--db", url],
                 ["query", "--gpu", "h200", "--shape", "64", "--db", url],
                 ["query", "--gpu", "h200", "--shape", "64", "--db", url.replace(":9/", ":nine/")]):
        result = autotune(*args)
        assert_one_line_error(result, "u:***@")
        assert SECRET not in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["query", "table", "results import"])
def test_commands_that_print_the_database_hide_its_password(tmp_path, command):
    one_line = tmp_path / "one.jsonl"
    one_line.write_text(Path(ROOT, "tuned_db", "h200.jsonl").read_text().splitlines()[0] + "\n")
    args = {"query": ["query", "--gpu", "h200", "--shape", "64"], "table": ["table", "--gpu", "h200"],
            "results import": ["results", "import", str(one_line)]}[command]
    result = autotune(*args, "--db", f"sqlite:///{tmp_path}/r.db?password={SECRET}")
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr


# -- clean edges --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["99999999999", "46341", "2x2147483647x1", "65536x65536x1", "1" * 5000])
def test_shapes_beyond_32_bit_indexing_are_refused(shape):
    with pytest.raises(InputError, match="--shape"):
        make_problem(shape, "f32")


def test_problems_beyond_32_bit_indexing_cannot_be_made():
    with pytest.raises(InputError, match="32-bit"):
        GemmProblem(65536, 32768, 1)
    assert GemmProblem(1, 2**31 - 1, 1).n == 2**31 - 1


@pytest.mark.parametrize("command", [
    ["space", "--gpu", "h200"], ["search", "--gpu", "h200", "--backend", "fake"], ["query", "--gpu", "h200"],
    ["ladder", "--gpu", "h200", "--backend", "fake"],
])
def test_every_command_refuses_a_shape_beyond_32_bit_indexing(tmp_path, command):
    database = [] if command[0] == "space" else ["--db", f"sqlite:///{tmp_path}/r.db"]
    result = autotune(*command, "--shape", "99999999999", *database, timeout=60)
    assert_one_line_error(result, "'99999999999'", "32-bit")


def _session_processes(session: int) -> list[int]:
    """Live (not zombie) processes of a session, read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry))
    return found


def default_sigint() -> None:
    """In the child: SIGINT's default action, even where this test runs with SIGINT ignored (a shell's
    background job), so that the child turns it into KeyboardInterrupt as a terminal's Ctrl-C would."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_compile_process(signum):
    # WMMA on a T4: 49 thousand configs walked in a fraction of a second, thousands of them to compile
    command = [sys.executable, "-m", "autotune", "space", "--gpu", "t4", "--dtype", "f16", "--shape", "4096",
               "--compile", "all"]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": ROOT},
                               preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 120
        while len(_session_processes(process.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # the command and its first compile processes
        assert len(_session_processes(process.pid)) >= 3, "the compile pool did not start"
        time.sleep(1.0)
        os.kill(process.pid, signum)
        assert process.wait(timeout=60) == 128 + signum  # a loaded 2-core machine can take tens of seconds
        deadline = time.monotonic() + 15
        while _session_processes(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _session_processes(process.pid) == []
    finally:
        if process.poll() is None or _session_processes(process.pid):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_fake_backend_results_are_kept_apart_from_the_real_gpu(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    search = autotune("search", "--gpu", "h200", "--shape", "96x64x32", "--backend", "fake", "--db", db,
                      "--jobs", "2", "--trials", "2")
    assert search.returncode == 0, search.stderr
    assert "/h200-fake/" in search.stdout  # the study is the fake GPU's
    for scope in (["--gpu", "h200"], ["--arch", "sm_90"]):  # not even as a stand-in of the same architecture
        real = autotune("query", *scope, "--shape", "96x64x32", "--db", db, "--json")
        assert real.returncode == 0 and json.loads(real.stdout) == [], real.stdout + real.stderr
    table = autotune("table", "--gpu", "h200", "--db", db, "--json")
    assert table.returncode == 0 and json.loads(table.stdout)["rules"] == []
    fake = autotune("query", "--gpu", "h200-fake", "--shape", "96x64x32", "--db", db, "--json")
    assert fake.returncode == 0 and len(json.loads(fake.stdout)) == 2


# -- GPUs without a built-in spec -------------------------------------------------------------------


class _UnknownGpuBackend:
    """The fake backend's fixed rates on a device autotune has no spec for (factory for GpuWorker)."""

    NAME, ARCH, SMEM_OPT_IN = "NVIDIA RTX A6000", "sm_86", 101376

    def __init__(self, device: int = 0):
        from autotune.gpu.fake_backend import FakeBackend

        self._fake = FakeBackend(device)

    def hello(self) -> dict:
        hello = self._fake.hello()
        hello.pop("simulated", None)  # plays a real device
        properties = {**hello["properties"], "sms": 84, "smem_per_block_optin": self.SMEM_OPT_IN,
                      "smem_per_sm": 102400, "max_threads_per_sm": 1536, "l2_bytes": 6 * 1024 * 1024}
        return {**hello, "name": self.NAME, "arch": self.ARCH, "properties": properties}

    def run(self, task):
        return self._fake.run(task)

    def classify(self, exc):
        return self._fake.classify(exc)


class _VoltaBackend(_UnknownGpuBackend):
    NAME, ARCH = "Tesla V100-SXM2-16GB", "sm_70"


def test_a_gpu_without_a_spec_is_searched_with_one_made_from_its_properties(tmp_path):
    from autotune.gpu.worker import GpuWorker
    from autotune.results import ResultStore
    from autotune.search.search import Search, SearchSettings
    from autotune.search.start import attached_gpu_spec

    store = ResultStore(f"sqlite:///{tmp_path}/r.db")
    problem = GemmProblem(128, 128, 128)
    with GpuWorker(backend=_UnknownGpuBackend, start_timeout_s=60) as worker:
        env = worker.environment()
        assert env.gpu_key == "rtx-a6000"
        gpu = attached_gpu_spec(None, env, "auto", worker.device_properties())
        assert (gpu.key, gpu.arch, gpu.sms, gpu.smem_per_block_optin) == ("rtx-a6000", 86, 84, 101376)
        result = Search(load_space("sgemm"), gpu, problem, store, worker,
                        SearchSettings(trials=2, jobs=2, seed=1)).run()
    assert result.evaluated == 2 and "/rtx-a6000/" in result.study_name
    assert len(store.best("rtx-a6000", problem)) == 2


def test_a_simulated_gpu_without_a_spec_keeps_its_fake_key():
    from autotune.search.start import attached_gpu_spec

    env = Environment("rtx-a6000-fake", "NVIDIA RTX A6000 (fake)", "sm_86-fake", "0", "0", "0", "none")
    properties = {**_UnknownGpuBackend().hello()["properties"]}
    gpu = attached_gpu_spec(None, env, "auto", properties)
    assert (gpu.key, gpu.arch, gpu.smem_per_block_optin) == ("rtx-a6000-fake", 86, 101376)


def test_a_gpu_older_than_sm75_is_refused_in_one_line():
    from autotune.gpu.worker import GpuWorker
    from autotune.search.start import attached_gpu_spec

    with GpuWorker(backend=_VoltaBackend, start_timeout_s=60) as worker:
        env, properties = worker.environment(), worker.device_properties()
    assert env.gpu_key == "tesla-v100-sxm2-16gb"
    with pytest.raises(InputError, match="sm_75 or newer.*sm_70"):
        attached_gpu_spec(None, env, "auto", properties)
