"""A Protobuf registry schema compiled on the driver: its ``.proto`` text and every file it imports
(its references, fetched from the registry by subject and version, theirs in turn; the well-known
types ``google/protobuf/*.proto`` from the copies protoc ships, whatever the registry holds under
those names) compiled by protoc (``grpcio-tools``) into a ``FileDescriptorSet``.

protoc runs in a subprocess with a time limit: a schema is data from outside, and whatever it does
to protoc (an error, a crash, a hang) is a refusal of that schema (:class:`UnsupportedSchema`, with
protoc's reason), never the run's end. Reference names become file paths and are checked first (a
relative ``.proto`` path, no ``..``); the number of files and their size are bounded.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from icetide.errors import SetupError
from icetide.ingest.formats.avro_types import UnsupportedSchema
from icetide.ingest.formats.protobuf_types import Compiled
from icetide.ingest.formats.registry import RegistryClient, SchemaRefused, UnknownSchemaId

#: The most files one schema may import (references of references included)
MAX_FILES = 200
#: The most characters of ``.proto`` text one schema may have, its references included
MAX_TEXT = 4_000_000
PROTOC_TIMEOUT_S = 60.0
#: A reference's name: a relative path of ``.proto`` files (no ``..``, no absolute path)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*\.proto")
WELL_KNOWN_PREFIX = "google/protobuf/"


def well_known_dir() -> Path:
    """Where protoc's copies of the well-known types are (``google/protobuf/*.proto``)."""
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or spec.origin is None:
        raise SetupError("source.format: protobuf compiles schemas with protoc from the grpcio-tools package, "
                         "which is not installed (pip install grpcio-tools; icetide pins it)")
    return Path(spec.origin).parent / "_proto"


def main_name(sid: int) -> str:
    """The file name a schema's own text is compiled under (its references keep their names)."""
    return f"icetide_registry/schema_{int(sid)}.proto"


def compile_schema(client: RegistryClient, sid: int) -> Compiled:
    """Schema ``sid`` from the registry, compiled; :class:`UnsupportedSchema` when it is not
    Protobuf, a reference is missing or refused, or protoc refuses it; :class:`UnknownSchemaId` for
    an id the registry does not know; a registry outage raises as the client does (transient)."""
    try:
        got = client.schema(sid)
    except SchemaRefused as e:
        raise UnsupportedSchema(f"schema id {sid}: {e}") from None
    if not isinstance(got, dict):
        raise UnsupportedSchema(f"schema id {sid}: the registry's answer is not a schema")
    kind = got.get("schemaType", "AVRO")
    if kind != "PROTOBUF":
        raise UnsupportedSchema(f"schema id {sid} is {kind}, not Protobuf (source.format: protobuf)")
    wkt = well_known_dir()
    files: dict[str, str] = {main_name(sid): str(got.get("schema", ""))}
    refs = got.get("references") or []
    _references(client, sid, refs if isinstance(refs, list) else [None], files, wkt)
    return compile_files(sid, files, main_name(sid), wkt)


def _references(client: RegistryClient, sid: int, refs: list[Any], files: dict[str, str], wkt: Path) -> None:
    """Fetch ``refs`` (Confluent's ``{name, subject, version}``) and theirs into ``files``, name → text."""
    todo = list(refs)
    while todo:
        ref = todo.pop()
        name = str(ref.get("name", "")) if isinstance(ref, dict) else ""
        if not _NAME.fullmatch(name) or ".." in name.split("/"):
            raise UnsupportedSchema(f"schema id {sid}: reference name {name[:120]!r} is not a relative .proto path")
        if name in files or (name.startswith(WELL_KNOWN_PREFIX) and (wkt / name).is_file()):
            continue  # seen, or a well-known type: protoc's own copy
        if len(files) >= MAX_FILES:
            raise UnsupportedSchema(f"schema id {sid} imports more than {MAX_FILES} files")
        subject, version = ref.get("subject"), ref.get("version")
        if not isinstance(subject, str) or not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise UnsupportedSchema(f"schema id {sid}: reference {name!r} names no subject and version")
        try:
            found = client.version(subject, version)
        except UnknownSchemaId:
            raise UnsupportedSchema(f"schema id {sid}: reference {name!r} (subject {subject[:200]!r} version "
                                    f"{version}) is not in the registry") from None
        except SchemaRefused as e:  # 400/410/422, or access to the subject denied (401/403)
            raise UnsupportedSchema(f"schema id {sid}: reference {name!r} (subject {subject[:200]!r} version "
                                    f"{version}): {e}") from None
        if found.get("schemaType", "AVRO") != "PROTOBUF":
            raise UnsupportedSchema(f"schema id {sid}: reference {name!r} is not a Protobuf schema")
        files[name] = str(found.get("schema", ""))
        more = found.get("references") or []
        todo.extend(more if isinstance(more, list) else [None])  # not a list: refused as a nameless reference


def compile_files(sid: int, files: dict[str, str], main: str, wkt: Path | None = None) -> Compiled:
    """``files`` (name → ``.proto`` text) compiled by protoc, ``main`` the schema's own file."""
    if sum(len(t) for t in files.values()) > MAX_TEXT:
        raise UnsupportedSchema(f"schema id {sid}: its .proto text is over {MAX_TEXT:,} characters")
    wkt = wkt or well_known_dir()
    with tempfile.TemporaryDirectory(prefix="icetide-proto-") as tmp:
        root = Path(tmp) / "src"
        for name, text in files.items():
            path = root / name
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            except (OSError, UnicodeError) as e:  # a name too long, text that is no Unicode
                raise UnsupportedSchema(f"schema id {sid}: file {name[:120]!r} cannot be written for protoc "
                                        f"({type(e).__name__})") from None
        out = Path(tmp) / "set.pb"
        # the well-known types first: a registry's own copy of one never shadows protoc's
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{wkt}", f"-I{root}", "--include_imports",
               "--include_source_info", f"--descriptor_set_out={out}", main]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise UnsupportedSchema(f"schema id {sid}: protoc did not compile it within {PROTOC_TIMEOUT_S:.0f} s"
                                    ) from None
        if proc.returncode != 0 or not out.is_file():
            why = " ".join((proc.stderr or proc.stdout).replace(str(root) + "/", "").split())
            raise UnsupportedSchema(f"schema id {sid}: protoc refuses it: {why[:400] or f'exit {proc.returncode}'}")
        try:
            fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        except (DecodeError, RecursionError) as e:  # nested past what the protobuf package reads
            raise UnsupportedSchema(f"schema id {sid}: its compiled descriptors do not read back ({e})") from None
    return Compiled(sid, fds, main)


#: The most subjects ``icetide check`` compiles (one protoc run each)
CHECKED_SUBJECTS = 50


def check_subjects(client: RegistryClient, subjects: list[dict[str, Any]]) -> list[str]:
    """``icetide check``: a warning for each subject whose latest Protobuf schema cannot be a table's
    record (its first message; protoc's or the mapping's reason, a reference missing or refused), so a
    producer's schema that every record would be dead-lettered for shows before the run. Other schema
    types are not looked at."""
    from icetide.ingest.formats.protobuf_types import MAX_DEPTH

    warnings: list[str] = []
    for s in subjects[:CHECKED_SUBJECTS]:
        sid = s.get("id")
        if not isinstance(sid, int):
            continue
        try:
            got = client.schema(sid)
            if isinstance(got, dict) and got.get("schemaType", "AVRO") != "PROTOBUF":
                continue
            compile_schema(client, sid).message((0,), MAX_DEPTH)  # not an object: refused, with the reason
        except (UnsupportedSchema, UnknownSchemaId, SchemaRefused) as e:
            warnings.append(f"subject {s.get('subject')}: its latest schema (id {sid}) cannot be read as Protobuf, "
                            f"so its records would be dead letters: {str(e)[:400]}")
    return warnings
