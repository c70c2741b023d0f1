"""The JVM side: jars fetched with Maven from the pom shipped in this package, and icetide's own jar.

Profiles: ``spark`` (Iceberg runtime, Spark's Kafka source, SQLite JDBC), ``kafka`` (a KRaft
broker for development and tests), ``rest`` (Iceberg's reference REST catalog server).

icetide's own JVM code (``java/``) is compiled by :func:`build` against the jars pyspark ships and
the ``spark`` profile into two jars under ``$ICETIDE_HOME/jars/icetide/``: ``icetide-jvm.jar``
(the multi-table writer, the record-shape UDF, the local file system: Spark and Hadoop classes
only, so it may sit on the JVM's own class path) and ``icetide-iceberg.jar`` (``io.icetide.iceberg``:
the scan telemetry reporter, which implements Iceberg interfaces and so must be loaded by the
same class loader as the Iceberg runtime, i.e. from ``spark.jars``), and ``icetide-protobuf.jar``
(``io.icetide.protobuf``: the Protobuf decoder, which reads messages with protobuf-java, a jar of
``spark.jars``: for the same reason it is never on the JVM's own class path; built only when the
``spark`` jars have protobuf-java).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from icetide import paths
from icetide.errors import SetupError

PROFILES = ("spark", "kafka", "rest", "registry")
#: Profiles that are one artifact fetched alone (``dependency:copy``), not a pom profile's dependencies.
SINGLE = {"registry": "io.apicurio:apicurio-registry-app:{apicurio.version}:tar.gz:all"}
POM = Path(__file__).with_name("pom.xml")
SETTINGS = Path(__file__).with_name("settings.xml")
JAVA_SOURCES = Path(__file__).with_name("java")
OWN_JAR = "icetide-jvm.jar"
ICEBERG_JAR = "icetide-iceberg.jar"
ICEBERG_PACKAGE = "io/icetide/iceberg"
PROTOBUF_JAR = "icetide-protobuf.jar"
PROTOBUF_PACKAGE = "io/icetide/protobuf"
_VERSION_RE = re.compile(r"-\d[\w.]*?(?:-[a-z-]+)?\.jar$")


def jar_dir(profile: str) -> Path:
    return paths.home() / "jars" / profile


def fetch(profile: str, quiet: bool = True) -> Path:
    """Copy the profile's jars (with their runtime dependencies) into :func:`jar_dir`."""
    if profile not in PROFILES:
        raise SetupError(f"unknown jar profile {profile!r}; choose one of {', '.join(PROFILES)}")
    args = ["-P", profile, "dependency:copy-dependencies", "-DincludeScope=runtime"]
    if profile in SINGLE:
        version = SINGLE[profile].split("{")[1].split("}")[0]
        coords = SINGLE[profile].replace("{" + version + "}", _property(version))
        args = ["dependency:copy", f"-Dartifact={coords}"]
    return maven_copy(POM, jar_dir(profile), args, f"the {profile} jars", quiet)


def maven_copy(pom: Path, out: Path, goal: list[str], what: str, quiet: bool = True) -> Path:
    """Run Maven's ``goal`` (a ``dependency:copy*`` goal and its flags) on ``pom`` into ``out``, once:
    ``out/.complete`` holds the pom's text, so the copy runs again only when the pom changes (the
    folder is emptied first, so no jar of an older pin is left beside the new one)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError(f"Maven ('mvn') is not installed, and {what} are fetched with it; install it "
                         "(apt-get install maven) or run scripts/setup.sh")
    marker = out / ".complete"
    if marker.exists() and marker.read_text() == pom.read_text():
        return out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = [mvn, "-B", *(["-q"] if quiet else []), "-s", str(SETTINGS), "-f", str(pom), *goal,
           f"-DoutputDirectory={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SetupError(f"fetching {what} with Maven failed:\n{tail}")
    marker.write_text(pom.read_text())
    return out


def _property(name: str) -> str:
    """A version pinned in the pom's properties."""
    import xml.etree.ElementTree as ET

    el = ET.parse(POM).getroot().find(f"m:properties/m:{name}", {"m": "http://maven.apache.org/POM/4.0.0"})
    if el is None or not el.text:
        raise SetupError(f"{POM} has no property {name}")
    return el.text


def jars(profile: str) -> list[Path]:
    """The fetched jars of a profile; raise :class:`SetupError` if `icetide setup` has not run."""
    d = jar_dir(profile)
    if not (d / ".complete").exists():
        raise SetupError(f"the {profile} jars are not in {d}; run `icetide setup` first")
    return sorted(d.glob("*.jar"))


def artifact_name(jar: Path) -> str:
    """``hadoop-client-api-3.4.2.jar`` → ``hadoop-client-api``."""
    return _VERSION_RE.sub("", jar.name)


def _sources_digest() -> str:
    h = hashlib.sha256()
    for f in sorted(JAVA_SOURCES.rglob("*.java")):
        h.update(str(f.relative_to(JAVA_SOURCES)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def own_jar() -> Path:
    return jar_dir("icetide") / OWN_JAR


def iceberg_jar() -> Path:
    """icetide's classes that implement Iceberg interfaces (built by :func:`build` beside :func:`own_jar`)."""
    return jar_dir("icetide") / ICEBERG_JAR


def protobuf_jar() -> Path:
    """icetide's Protobuf decoder (built by :func:`build` beside :func:`own_jar` when protobuf-java is fetched)."""
    return jar_dir("icetide") / PROTOBUF_JAR


def build() -> Path:
    """Compile icetide's JVM classes into :func:`own_jar` (skipped when the sources are unchanged)."""
    import pyspark

    out, iceberg_out, protobuf_out = own_jar(), iceberg_jar(), protobuf_jar()
    marker = out.with_suffix(".sha256")
    with_protobuf = any(artifact_name(j) == "protobuf-java" for j in jar_dir("spark").glob("*.jar"))
    digest = _sources_digest() + ("+protobuf" if with_protobuf else "")
    if out.exists() and iceberg_out.exists() and marker.exists() and marker.read_text() == digest:
        return out
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        raise SetupError("a Java 17 JDK is needed to build icetide's JVM classes ('javac' not found); "
                         "install it (apt-get install openjdk-17-jdk-headless)")
    classpath = [Path(pyspark.__file__).parent / "jars" / "*", *jars("spark")]
    out.parent.mkdir(parents=True, exist_ok=True)
    # Private build folder, then an atomic rename: processes that start at once do not collide.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        classes, built, built_iceberg = Path(tmp) / "classes", Path(tmp) / OWN_JAR, Path(tmp) / ICEBERG_JAR
        built_protobuf = Path(tmp) / PROTOBUF_JAR
        sources = [str(f) for f in sorted(JAVA_SOURCES.rglob("*.java"))
                   if with_protobuf or PROTOBUF_PACKAGE not in f.as_posix()]
        steps = [
            [javac, "--release", "17", "-nowarn", "-cp", ":".join(str(c) for c in classpath), "-d", str(classes),
             *sources],
            [jar, "--create", "--file", str(built_iceberg), "-C", str(classes), ICEBERG_PACKAGE],
            ["rm", "-r", str(classes / ICEBERG_PACKAGE)],
            *([[jar, "--create", "--file", str(built_protobuf), "-C", str(classes), PROTOBUF_PACKAGE],
               ["rm", "-r", str(classes / PROTOBUF_PACKAGE)]] if with_protobuf else []),
            [jar, "--create", "--file", str(built), "-C", str(classes), "."],
        ]
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
                raise SetupError(f"building icetide's JVM classes failed ({Path(cmd[0]).name}):\n{tail}")
        os.replace(built_iceberg, iceberg_out)
        if with_protobuf:
            os.replace(built_protobuf, protobuf_out)
        else:
            protobuf_out.unlink(missing_ok=True)
        os.replace(built, out)
    marker.write_text(digest)
    return out


def log4j2_properties(log_file: Path, level: str = "warn", loggers: dict[str, str] | None = None) -> str:
    """A log4j2 configuration sending every line at ``level`` or above to ``log_file`` (no console)."""
    lines = ["status = error", "appender.file.type = File", "appender.file.name = file",
             f"appender.file.fileName = {log_file}", "appender.file.layout.type = PatternLayout",
             "appender.file.layout.pattern = [%d] %p %m (%c)%n", f"rootLogger.level = {level}",
             "rootLogger.appenderRef.file.ref = file"]
    for name, lvl in (loggers or {}).items():
        key = name.replace(".", "_")
        lines += [f"logger.{key}.name = {name}", f"logger.{key}.level = {lvl}"]
    return "\n".join(lines) + "\n"
