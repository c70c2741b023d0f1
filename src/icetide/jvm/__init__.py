"""The JVM side: jars fetched with Maven from the pom shipped in this package.

Profiles: ``spark`` (Iceberg runtime, Spark's Kafka source, SQLite JDBC), ``kafka`` (a KRaft
broker for development and tests), ``rest`` (Iceberg's reference REST catalog server).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from icetide import paths
from icetide.errors import SetupError

PROFILES = ("spark", "kafka", "rest")
POM = Path(__file__).with_name("pom.xml")
SETTINGS = Path(__file__).with_name("settings.xml")
_VERSION_RE = re.compile(r"-\d[\w.]*?(?:-[a-z-]+)?\.jar$")


def jar_dir(profile: str) -> Path:
    return paths.home() / "jars" / profile


def fetch(profile: str, quiet: bool = True) -> Path:
    """Copy the profile's jars (with their runtime dependencies) into :func:`jar_dir`."""
    if profile not in PROFILES:
        raise SetupError(f"unknown jar profile {profile!r}; choose one of {', '.join(PROFILES)}")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError("Maven ('mvn') is not installed; install it (apt-get install maven)")
    out = jar_dir(profile)
    marker = out / ".complete"
    if marker.exists() and marker.read_text() == POM.read_text():
        return out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = [mvn, "-B", "-s", str(SETTINGS), "-f", str(POM), "-P", profile,
           "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={out}"]
    if quiet:
        cmd.insert(1, "-q")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SetupError(f"fetching the {profile} jars with Maven failed:\n{tail}")
    marker.write_text(POM.read_text())
    return out


def jars(profile: str) -> list[Path]:
    """The fetched jars of a profile; raise :class:`SetupError` if `icetide setup` has not run."""
    d = jar_dir(profile)
    if not (d / ".complete").exists():
        raise SetupError(f"the {profile} jars are not in {d}; run `icetide setup` first")
    return sorted(d.glob("*.jar"))


def artifact_name(jar: Path) -> str:
    """``hadoop-client-api-3.4.2.jar`` → ``hadoop-client-api``."""
    return _VERSION_RE.sub("", jar.name)
