"""The package's stages import one way: no stage imports a later one (the pipeline reads top down)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autotune"
# The pipeline, first to last; modules at the top of the package are the ground floor every stage stands on.
STAGES = ("ground", "space", "kernel", "gpu", "results", "search", "select", "export", "runtime", "torch", "cli")
LAZY_RE_EXPORTS = {("autotune", "autotune.runtime")}  # autotune.gemm & co., imported on first use


def stage_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in STAGES:
        return parts[1]
    return "cli" if parts[-1] == "__main__" else "ground"


def imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "autotune":
            names = [node.module] if node.module != "autotune" else [f"autotune.{a.name}" for a in node.names]
            found += [(name, node.lineno) for name in names]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "autotune"]
    return found


def test_no_stage_imports_a_later_one():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(("autotune", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        for target, line in imports(path):
            if (module, target) in LAZY_RE_EXPORTS or target == "autotune.__version__":
                continue
            if STAGES.index(stage_of(target)) > STAGES.index(stage_of(module)):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({stage_of(module)}) imports {target}")
    assert not upward, "\n".join(upward)


def test_every_stage_is_a_package_with_a_docstring():
    for stage in STAGES[1:]:
        init = PACKAGE / stage / "__init__.py"
        assert init.is_file(), stage
        assert ast.get_docstring(ast.parse(init.read_text())), f"{stage}/__init__.py says nothing of its stage"
