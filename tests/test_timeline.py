"""The search's timeline: spans packed into rows, written as a Chrome trace, and `search --trace`."""

import json

from conftest import assert_one_line_error, autotune

from autotune.search.timeline import COMPILE, SEARCH, Timeline


def _rows(events):
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    spans = {}
    for event in events:
        if event["ph"] == "X":
            spans.setdefault(names[event["tid"]], []).append(event)
    return spans


def test_overlapping_compiles_get_a_row_each_and_a_free_row_is_reused():
    timeline = Timeline(origin=100.0)
    timeline.add(COMPILE, "a", 100.0, 2.0)
    timeline.add(COMPILE, "b", 100.5, 1.0)  # overlaps a
    timeline.add(COMPILE, "c", 101.5, 1.0)  # b's row is free again; a's is not
    timeline.add(SEARCH, "propose", 100.1, 0.01)
    rows = _rows(timeline.events())
    assert [e["name"] for e in rows["compile 1"]] == ["a"]
    assert [e["name"] for e in rows["compile 2"]] == ["b", "c"]
    assert rows["search"][0]["ts"] == 100_000 and rows["search"][0]["dur"] == 10_000  # microseconds from origin


def test_trace_file_is_json_with_every_span(tmp_path):
    timeline = Timeline()
    with timeline.on(SEARCH, "record"):
        pass
    timeline.add("GPU 0", "sgemm_x", timeline.origin, 0.5, failed=False)
    path = tmp_path / "trace.json"
    timeline.write(path)
    events = json.loads(path.read_text())["traceEvents"]
    rows = _rows(events)
    assert set(rows) == {"search", "GPU 0"}
    assert rows["GPU 0"][0]["dur"] == 500_000 and rows["GPU 0"][0]["args"] == {"failed": False}
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_search_trace_shows_each_compile_and_gpu_job(tmp_path):
    trace = tmp_path / "search.json"
    result = autotune("search", "--gpu", "h200", "--shape", "100x60x40", "--backend", "fake", "--jobs", "2",
                      "--trials", "3", "--db", f"sqlite:///{tmp_path}/r.db", "--trace", str(trace),
                      env={"AUTOTUNE_CACHE": str(tmp_path / "cache")})  # nothing compiled yet: every compile shows
    assert result.returncode == 0, result.stderr
    rows = _rows(json.loads(trace.read_text())["traceEvents"])
    gpu = [e["name"] for e in rows["GPU 0"]]
    assert gpu[0] == "cuBLAS" and len(gpu) == 4 and all(name.startswith("sgemm_") for name in gpu[1:]), gpu
    compiled = {e["name"] for row, spans in rows.items() if row.startswith("compile ") for e in spans}
    assert set(gpu[1:]) <= compiled  # every candidate the GPU ran was compiled first
    assert 1 <= sum(row.startswith("compile ") for row in rows) <= 2, rows.keys()  # two compile processes
    loop = {e["name"] for e in rows["search"]}
    assert {"start processes", "open database", "open study", "propose", "record", "closing"} <= loop


def test_trace_into_a_missing_folder_is_refused_before_the_search(tmp_path):
    result = autotune("search", "--gpu", "h200", "--shape", "64", "--backend", "fake",
                      "--db", f"sqlite:///{tmp_path}/r.db", "--trace", str(tmp_path / "no" / "t.json"))
    assert_one_line_error(result, "--trace", "t.json", "existing folder")
    assert not (tmp_path / "r.db").exists()
