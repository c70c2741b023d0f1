"""Installs like a tool: the built wheel in a new virtualenv, `icetide setup` into a fresh per-user
cache (the default location, no ICETIDE_HOME), then `icetide demo` from an empty folder outside the
repository. Nothing lands in the working folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from icetide.services.process import port_open
from tests.fixtures.stack import free_port_pair

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], timeout: float, **kw: object) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    assert res.returncode == 0, f"{cmd[:3]} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res  # type: ignore[no-any-return]


def test_wheel_in_a_new_venv_sets_up_and_runs_the_demo_from_an_empty_folder(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)], 600)
    [wheel] = dist.glob("icetide-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], 120)
    # --no-compile: no .pyc for PySpark's thousands of modules (12 s of the install's 33 s here);
    # Python compiles what it imports, so what runs is the same
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(wheel)], 900)

    empty = tmp_path / "somewhere-else"
    empty.mkdir()
    cache = tmp_path / "xdg-cache"
    env = {k: v for k, v in os.environ.items()
           if k not in ("ICETIDE_HOME", "PYTHONPATH", "VIRTUAL_ENV", "SPARK_SUBMIT_OPTS")}  # a user's defaults
    env.update(XDG_CACHE_HOME=str(cache), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", COLUMNS="400")
    icetide = str(venv / "bin" / "icetide")
    setup = _run([icetide, "setup"], 900, cwd=empty, env=env)
    assert str(cache / "icetide" / "jars" / "spark") in setup.stdout
    assert (cache / "icetide" / "jars" / "spark" / ".complete").exists()
    port = free_port_pair()
    demo = _run([icetide, "demo", "--seconds", "30", "--events", "3000", "--port", str(port)], 900,
                cwd=empty, env=env)
    assert "2985 events" in demo.stdout and "written" in demo.stdout, demo.stdout[-3000:]
    report = cache / "icetide" / "demo" / "report.html"
    assert report.exists() and str(report) in demo.stdout
    assert list(empty.iterdir()) == [], "the demo wrote into the working folder"
    assert not port_open("127.0.0.1", port), "the demo left its broker running"
