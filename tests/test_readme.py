"""README's commands, run as a newcomer runs them: in a folder of their own, with the default database and no GPU.

Every command line of README.md and docs/*.md (an indented line starting with ``autotune``, ``python``,
``printf``, ``pip`` or ``cmake``) is a test: the offline ones run in one folder shared by the module, in
the order the documents give them (a command first runs the offline ones before it, so it can be run
alone), ``autotune`` ones in this process through :func:`autotune.cli.main`. Each must exit 0 and print
what :data:`EXPECTED` says it prints; a file its comment names (``# deploy/...json``) must exist. The
commands that need a GPU, install packages or build the C library are skipped with the reason, the
``autotune`` ones among them once their arguments are shown to parse.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_LINE = re.compile(r"^    ((?:autotune|python|printf|pip|cmake) .*?)\s*(?:#\s*(.*))?$")
GPU_COMMANDS = ("search", "sweep", "cross-dtype", "retime", "ladder")
SHIPPED_H200 = sum(1 for line in (ROOT / "tuned_db" / "h200.jsonl").read_text().splitlines() if line.strip())


@dataclasses.dataclass(frozen=True)
class Line:
    """A command line of a document: the command as written, and its comment."""

    document: str
    number: int
    command: str
    comment: str

    @property
    def words(self) -> list[str]:
        return shlex.split(self.command)

    @property
    def id(self) -> str:
        return f"{self.document}:{self.number}"


def command_lines() -> list[Line]:
    found = []
    for document in DOCUMENTS:
        for number, text in enumerate(document.read_text().splitlines(), 1):
            match = COMMAND_LINE.match(text)
            if match:
                found.append(Line(str(document.relative_to(ROOT)), number, match.group(1), match.group(2) or ""))
    return found


def skip_reason(line: Line) -> str | None:
    """Why ``line`` is not run here, or None: it runs offline."""
    words = line.words
    if words[0] == "pip":
        return "installs packages (tests/test_wheel.py builds and installs the wheel)"
    if words[0] == "cmake":
        return "builds the exported C library with a C compiler (tests/test_export_cuda.py builds one)"
    if words[0] == "python" and words[1].startswith("examples/"):
        return "an example that runs on a CUDA GPU"
    if words[0] == "python" and words[1] != "-c":
        return "a maintainer's tool (python -m ...), which writes into autotune's own folders"
    if words[0] != "autotune":
        return None
    if words[1] in GPU_COMMANDS and "--backend" not in words:
        return "runs kernels on an NVIDIA GPU"
    if any(word.startswith("postgresql://") for word in words):
        return "names a PostgreSQL server of the reader's (tests/test_postgres.py runs one)"
    if words[1] == "space" and "--family" not in words and "--compile" not in words and "h200" in words:
        return "walks the 159 million sgemm configs twice and compiles 24 of them (half a minute on 2 cores)"
    return None


LINES = command_lines()


@dataclasses.dataclass
class Outcome:
    code: int
    out: str
    err: str


class Newcomer:
    """A folder of one's own where the offline commands run in the documents' order, each once."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.outcomes: dict[str, Outcome] = {}

    def run_through(self, line: Line) -> Outcome:
        """Run the offline lines before ``line`` (of its document, and of the documents before it) that have not
        run yet, then ``line``; its outcome."""
        for earlier in LINES[:LINES.index(line) + 1]:
            if earlier.id not in self.outcomes and skip_reason(earlier) is None:
                _expectation(earlier)  # nothing runs that nobody said what to expect of
                self.outcomes[earlier.id] = self._run(earlier)
        return self.outcomes[line.id]

    def _run(self, line: Line) -> Outcome:
        words = line.words
        if words[0] != "autotune":  # printf, python -c: a shell's job
            command = line.command.replace("python ", f"{shlex.quote(sys.executable)} ", 1)
            done = subprocess.run(["bash", "-c", command], cwd=self.folder, capture_output=True, text=True,
                                  timeout=300)
            return Outcome(done.returncode, done.stdout, done.stderr)
        target = None
        if ">" in words:
            words, target = words[:words.index(">")], words[words.index(">") + 1]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(words[1:])
            except SystemExit as stop:
                code = stop.code
        _handlers_back_to_stderr((out, err))
        if target is not None:
            (self.folder / target).write_text(out.getvalue())
        return Outcome(code, out.getvalue(), err.getvalue())


def _handlers_back_to_stderr(streams: tuple[io.StringIO, ...]) -> None:
    """A logging handler a command set up while its output went to ``streams`` (Optuna's, on first use) writes
    to stderr again, as in a fresh process."""
    loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                      if isinstance(logger, logging.Logger))]
    for handler in (handler for logger in loggers for handler in logger.handlers):
        if isinstance(handler, logging.StreamHandler) and handler.stream in streams:
            handler.setStream(sys.stderr)


def _json_rows(outcome: Outcome) -> bool:
    rows = json.loads(outcome.out)
    return bool(rows) and all(row["config"] and row["median_ms"] > 0 for row in rows)


# What each offline command prints (by its first words): a check of its outcome in the folder.
EXPECTED: dict[str, Callable[[Outcome, Path], bool]] = {
    "autotune results import --shipped": lambda o, _: f"h200.jsonl: {SHIPPED_H200} measurements added" in o.out,
    "autotune results import h200.jsonl":
        lambda o, f: f"h200.jsonl: {SHIPPED_H200} measurements added" in o.out and (f / "other.db").is_file(),
    "autotune results export": lambda o, f: len((f / "h200.jsonl").read_text().splitlines()) == SHIPPED_H200
                                            and f"exported {SHIPPED_H200} measurements" in o.err,
    "autotune table": lambda o, _: "selection table for h200 f16" in o.out and "held-out picks measured on" in o.out,
    "autotune plot": lambda o, f: any(line.endswith(".png") and (f / line).is_file() for line in o.out.splitlines()),
    "autotune export": lambda o, _: "files written" in o.out or "file written" in o.out,
    "autotune query --gpu h200 --shape 4096 --dtype f16 --json": lambda o, _: _json_rows(o),
    "autotune query --gpu h200 --shape 4096 --dtype f16 --objective pareto":
        lambda o, _: "no energy measurements for h200 4096x4096x4096 f16" in o.out,
    "autotune query --gpu h100": lambda o, _: "the nearest are those of h200 (same sm_90), marked *" in o.out,
    "autotune query --gpu h200 --shape 4096 --dtype f32":  # the search section's: no search ran, nothing imported yet
        lambda o, _: "no results for h200" in o.out and "`autotune results import --shipped` loads" in o.out,
    "autotune query": lambda o, _: "best configs for" in o.out,
    "autotune gpus": lambda o, _: all(key in o.out for key in ("t4", "a100", "h100", "h200")),
    "autotune space": lambda o, _: "pass the static rules" in o.out and "fit;" in o.out,
    "autotune sweep": lambda o, _: "64x64x64" in o.out and "128x64x64" in o.out and "results:" in o.out,
    "printf": lambda o, f: (f / "shapes.txt").read_text().split() == ["64x64x64", "128x64x64"],
    "python -c": lambda o, _: o.code == 0,
}


def _expectation(line: Line) -> Callable[[Outcome, Path], bool]:
    command = " ".join(line.words)
    prefixes = [prefix for prefix in EXPECTED if command.startswith(prefix)]
    assert prefixes, f"{line.id}: `{line.command}` has no expected output here: add it to EXPECTED"
    return EXPECTED[max(prefixes, key=len)]


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory) -> Newcomer:
    return Newcomer(tmp_path_factory.mktemp("newcomer"))


@pytest.fixture
def in_the_folder(newcomer, monkeypatch, tmp_path_factory):
    """The newcomer's folder as the working directory, the default database their own (a fresh data home),
    the session's compile cache (compiles are shared with the other tests)."""
    monkeypatch.chdir(newcomer.folder)
    monkeypatch.setenv("XDG_DATA_HOME", str(newcomer.folder / ".data"))
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    monkeypatch.delenv("AUTOTUNE_TABLE", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    return newcomer


def test_the_documents_hold_commands_and_most_run_offline():
    assert len(LINES) >= 30
    offline = [line for line in LINES if skip_reason(line) is None]
    assert {line.words[1] for line in offline if line.words[0] == "autotune"} >= {
        "results", "table", "plot", "export", "query", "gpus", "space", "sweep"}


@pytest.mark.parametrize("line", LINES, ids=[line.id for line in LINES])
def test_a_documented_command_runs_as_written(line, in_the_folder):
    reason = skip_reason(line)
    if reason is not None:
        if line.words[0] == "autotune":  # its options exist, as written
            build_parser().parse_args(line.words[1:])
        pytest.skip(reason)
    if line.words[1:2] == ["plot"]:
        pytest.importorskip("matplotlib", reason="autotune plot needs the plot extra")
    outcome = in_the_folder.run_through(line)
    assert outcome.code == 0, f"{line.id}: `{line.command}` exited {outcome.code}: {outcome.err.strip()}"
    assert _expectation(line)(outcome, in_the_folder.folder), \
        f"{line.id}: `{line.command}` printed:\n{outcome.out}\n{outcome.err}"
    named = line.comment.split()[0] if line.comment else ""
    if "/" in named and "." in named.rsplit("/", 1)[-1]:  # the comment names the file the command writes
        assert (in_the_folder.folder / named).is_file(), f"{line.id}: `{line.command}` wrote no {named}"
