"""Every benchmark entry point still resolves what it imports, lazy imports inside functions too, so
a helper moved in a refactor breaks this test, not a benchmark run months later (#32). Their real
runs need the stack; `tests/integration` runs the small ones."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for p in (REPO / "benchmarks").rglob("*.py") if p.name != "__init__.py")


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of every import statement in ``path``, at any depth."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
    return out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_import_of_a_benchmark_resolves(script: Path) -> None:
    missing = []
    for module, name in _imports(script):
        if not module.startswith(("icetide", "tests", "benchmarks")):
            continue  # third-party: pinned in pyproject
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{module}: {e}")
            continue
        if name is not None and name != "*" and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{script.relative_to(REPO)} imports what no longer exists: {missing}"


def test_the_benchmarks_are_found() -> None:
    assert len(SCRIPTS) >= 10 and any(p.parts[-2:] == ("fanout", "run.py") for p in SCRIPTS)
