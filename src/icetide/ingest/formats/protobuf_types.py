"""Protobuf messages → Spark/Iceberg types, from a compiled schema (a ``FileDescriptorSet``). Pure:
no JVM, no registry.

The mapping is the one icetide's JVM decoder (``io.icetide.protobuf.ProtobufRows``) writes rows of:
it is given the type computed here and refuses, on the driver, any field it would convert otherwise.

===========================================  ===================================================
Protobuf                                     column
===========================================  ===================================================
message                                      struct (nested; a message without fields: no column)
``repeated T``                               list<T>
``map<K, V>``                                map<K, V>
``oneof`` member, proto3 ``optional``        an optional column of its own (null unless set)
enum                                         string: the value's name (a number the enum does not
                                             name, which proto3 keeps: the number as text)
int32 / sint32 / sfixed32                    int
int64 / sint64 / sfixed64                    long
uint32 / fixed32                             long (the unsigned value)
uint64 / fixed64                             decimal(20,0) (the unsigned value, every one of them)
float / double / bool / string / bytes       float / double / boolean / string / binary
``google.protobuf.Timestamp``                timestamp (with zone, UTC; to the microsecond)
``google.protobuf.*Value`` (wrappers)        the wrapped primitive, null when the wrapper is absent
other well-known types (Duration, Any, …)    the struct of their fields (``Struct``/``Value`` are
                                             recursive: refused)
===========================================  ===================================================

Every column is optional (another version may lack it); a field's leading comment becomes the column
comment. A field without presence (a proto3 scalar that is not ``optional``) holds its default (0,
``""``, the first enum value) when the record leaves it out, as Protobuf itself reads it; a field
with presence (message, wrapper, ``optional``, ``oneof`` member, proto2) is null when absent.

Refused with a reason (the records of such a message are dead letters): recursive messages (a
table cannot hold unbounded nesting), nesting deeper than :data:`MAX_DEPTH`, names equal ignoring
case at one level (Spark and Iceberg resolve names ignoring case), top-level names icetide
reserves, a top-level message with no columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import descriptor_pb2
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from icetide.ingest.formats.avro_types import RESERVED_PREFIXES, Holds, UnsupportedSchema

F = descriptor_pb2.FieldDescriptorProto
#: Deeper than this a message is refused (a struct in a struct … this many levels)
MAX_DEPTH = 32
#: The most message indexes a record may name (Confluent's path to a nested message)
MAX_INDEXES = 32
TIMESTAMP = ".google.protobuf.Timestamp"
UNSIGNED_64 = DecimalType(20, 0)
#: Well-known wrapper messages → the primitive they wrap (an absent wrapper is null)
WRAPPERS: dict[str, DataType] = {
    ".google.protobuf.DoubleValue": DoubleType(), ".google.protobuf.FloatValue": FloatType(),
    ".google.protobuf.Int64Value": LongType(), ".google.protobuf.UInt64Value": UNSIGNED_64,
    ".google.protobuf.Int32Value": IntegerType(), ".google.protobuf.UInt32Value": LongType(),
    ".google.protobuf.BoolValue": BooleanType(), ".google.protobuf.StringValue": StringType(),
    ".google.protobuf.BytesValue": BinaryType(),
}
#: What a column typed by one version takes of another version's type as it is (see
#: :func:`.avro_types.fit`): only the exact ones of Avro's promotions (int → long, double; float →
#: double; string → bytes). A later version's int64 in a float/double column (or int32 in a float
#: one) would be rounded, its bytes in a string column might not be UTF-8: refused
#: (``incompatible_schema``), as Protobuf itself has no such promotions.
HOLDS: Holds = ((LongType, IntegerType), (DoubleType, IntegerType), (DoubleType, FloatType), (BinaryType, StringType))
SCALARS: dict[int, DataType] = {
    F.TYPE_DOUBLE: DoubleType(), F.TYPE_FLOAT: FloatType(), F.TYPE_BOOL: BooleanType(),
    F.TYPE_STRING: StringType(), F.TYPE_BYTES: BinaryType(), F.TYPE_ENUM: StringType(),
    F.TYPE_INT32: IntegerType(), F.TYPE_SINT32: IntegerType(), F.TYPE_SFIXED32: IntegerType(),
    F.TYPE_INT64: LongType(), F.TYPE_SINT64: LongType(), F.TYPE_SFIXED64: LongType(),
    F.TYPE_UINT32: LongType(), F.TYPE_FIXED32: LongType(), F.TYPE_UINT64: UNSIGNED_64, F.TYPE_FIXED64: UNSIGNED_64,
}


@dataclass(frozen=True)
class Message:
    """One message of a registry schema, as a table's record: the message indexes records name it
    by (Confluent's wire format), its full name and its column types."""

    schema_id: int
    indexes: tuple[int, ...]
    full_name: str
    struct: StructType


@dataclass
class Compiled:
    """A registry schema compiled: every file it needs (references and well-known types included,
    dependencies first) and the name of its own file. ``descriptor_set`` is what the JVM decodes with."""

    schema_id: int
    files: descriptor_pb2.FileDescriptorSet
    main: str
    _messages: dict[tuple[int, ...], Message] = field(default_factory=dict)
    _keys: frozenset[str] | None = None

    @property
    def descriptor_set(self) -> bytes:
        """The files without their comments and source positions (the JVM needs neither)."""
        out = descriptor_pb2.FileDescriptorSet()
        out.CopyFrom(self.files)
        for f in out.file:
            f.ClearField("source_code_info")
        return bytes(out.SerializeToString())

    def message(self, indexes: tuple[int, ...], max_depth: int = MAX_DEPTH) -> Message:
        """The message records name by ``indexes`` as a table's record; :class:`NoSuchMessage` when the
        schema has none there, :class:`UnsupportedSchema` when no table can hold it (or it nests
        messages deeper than ``max_depth``)."""
        if indexes not in self._messages:
            self._messages[indexes] = to_message(self, indexes, max_depth)
        return self._messages[indexes]

    def message_keys(self) -> frozenset[str]:
        """The message indexes of every message of the schema's own file, as text (``"0"``, ``"1.0"``):
        what a record of this schema may name (a map field's entry type is no message of it)."""
        if self._keys is None:
            out: set[str] = set()
            todo: list[tuple[tuple[int, ...], descriptor_pb2.DescriptorProto]] = [
                ((i,), m) for i, m in enumerate(main_file(self.files, self.main).message_type)]
            while todo:
                at, m = todo.pop()
                out.add(indexes_text(at))
                if len(at) < MAX_INDEXES:
                    todo += [((*at, i), n) for i, n in enumerate(x for x in m.nested_type if not x.options.map_entry)]
            self._keys = frozenset(out)
        return self._keys


class NoSuchMessage(UnsupportedSchema):
    """A record's message indexes name no message of its schema (the record is wrong, not the schema)."""


def main_file(files: descriptor_pb2.FileDescriptorSet, name: str) -> descriptor_pb2.FileDescriptorProto:
    for f in files.file:
        if f.name == name:
            return f
    raise UnsupportedSchema(f"the compiled schema has no file {name!r}")


def to_message(compiled: Compiled, indexes: tuple[int, ...], max_depth: int = MAX_DEPTH) -> Message:
    """The message at ``indexes`` of ``compiled``'s own file, with its column types."""
    sid = compiled.schema_id
    shown = "[" + ", ".join(str(i) for i in indexes) + "]"
    f = main_file(compiled.files, compiled.main)
    if not indexes or len(indexes) > MAX_INDEXES:
        raise NoSuchMessage(f"schema id {sid}: message indexes {shown[:80]} name no message")
    # (position in the descriptor, message): a map field's entry type is no message of the schema (as
    # Confluent's Java serializer counts, from the .proto's declarations)
    candidates, at, path = list(enumerate(f.message_type)), None, [4]
    name = f.package
    for depth, i in enumerate(indexes):
        if not 0 <= i < len(candidates):
            raise NoSuchMessage(f"schema id {sid} has no message at indexes {shown[:80]} (its file declares "
                                f"{len(f.message_type)} top-level messages)")
        position, at = candidates[i]
        path += [position] if depth == 0 else [3, position]
        name = f"{name}.{at.name}" if name else at.name
        candidates = [(n, m) for n, m in enumerate(at.nested_type) if not m.options.map_entry]
    assert at is not None
    types = _Types(compiled.files, max_depth)
    try:
        struct = types.struct("." + name, at, (), 0, (f.name, tuple(path)))
    except UnsupportedSchema as e:
        raise UnsupportedSchema(f"schema id {sid}, message {name}: {e}") from None
    except RecursionError:  # a schema is data from outside: never an exception that fails the batch
        raise UnsupportedSchema(f"schema id {sid}, message {name}: nested too deep to map") from None
    if not struct.fields:
        raise UnsupportedSchema(f"schema id {sid}, message {name} has no field a column can hold")
    for c in struct.fields:
        if c.name.lower().startswith(RESERVED_PREFIXES):
            raise UnsupportedSchema(f"schema id {sid}, message {name}: field {c.name!r} starts with a prefix icetide "
                                    f"reserves for its own columns ({', '.join(RESERVED_PREFIXES)})")
    return Message(sid, indexes, name, struct)


class _Types:
    """The messages and enums of a set of files by full name (``.pkg.Outer.Inner``), and their comments."""

    def __init__(self, files: descriptor_pb2.FileDescriptorSet, max_depth: int) -> None:
        self.max_depth = max_depth
        self.messages: dict[str, tuple[descriptor_pb2.DescriptorProto, str, tuple[int, ...]]] = {}
        self.comments: dict[tuple[str, tuple[int, ...]], str] = {}
        for f in files.file:
            prefix = f".{f.package}" if f.package else ""
            for i, m in enumerate(f.message_type):
                self._add(m, prefix, f.name, (4, i))
            for loc in f.source_code_info.location:
                if loc.leading_comments.strip():
                    self.comments[(f.name, tuple(loc.path))] = loc.leading_comments.strip()

    def _add(self, m: descriptor_pb2.DescriptorProto, prefix: str, file: str, path: tuple[int, ...]) -> None:
        name = f"{prefix}.{m.name}"
        self.messages[name] = (m, file, path)
        for i, n in enumerate(m.nested_type):
            self._add(n, name, file, (*path, 3, i))

    def struct(self, name: str, m: descriptor_pb2.DescriptorProto, stack: tuple[str, ...], depth: int,
               where: tuple[str, tuple[int, ...]]) -> StructType:
        if name in stack:
            chain = " → ".join(s.lstrip(".") for s in (*stack[stack.index(name):], name))
            raise UnsupportedSchema(f"message {name.lstrip('.')} contains itself ({chain}): a table cannot hold "
                                    "unbounded nesting (recursive messages are refused)")
        if depth >= self.max_depth:
            raise UnsupportedSchema(f"messages nested {depth + 1} levels deep, deeper than {self.max_depth} "
                                    "(source.max_depth)")
        fields: list[StructField] = []
        names: set[str] = set()
        for i, f in enumerate(m.field):
            if f.name.lower() in names:
                raise UnsupportedSchema(f"message {name.lstrip('.')} has two fields named {f.name!r} ignoring case; "
                                        "Spark and Iceberg resolve names ignoring case")
            names.add(f.name.lower())
            t = self.field_type(f, (*stack, name), depth)
            if t is None:
                continue  # a message without fields: nothing to hold
            comment = self.comments.get((where[0], (*where[1], 2, i)))
            fields.append(StructField(f.name, t, True, {"comment": comment[:1000]} if comment else {}))
        return StructType(fields)

    def field_type(self, f: descriptor_pb2.FieldDescriptorProto, stack: tuple[str, ...], depth: int) -> DataType | None:
        if f.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
            found = self.messages.get(f.type_name)
            if found is None:
                raise UnsupportedSchema(f"field {f.name!r} is of type {f.type_name.lstrip('.')!r}, which no file of "
                                        "the schema defines")
            m = found[0]
            if m.options.map_entry:
                key, value = (next(x for x in m.field if x.number == n) for n in (1, 2))
                kt, vt = self.element_type(key, stack, depth), self.element_type(value, stack, depth)
                if kt is None:
                    raise UnsupportedSchema(f"map field {f.name!r} has a key no column can hold")
                return None if vt is None else MapType(kt, vt, True)  # values without fields: nothing to hold
        element = self.element_type(f, stack, depth)
        if element is None:
            return None
        return ArrayType(element, True) if f.label == F.LABEL_REPEATED else element

    def element_type(self, f: descriptor_pb2.FieldDescriptorProto, stack: tuple[str, ...], depth: int
                     ) -> DataType | None:
        """The type of one value of ``f`` (an element when it is repeated); None: a message without fields."""
        if f.type not in (F.TYPE_MESSAGE, F.TYPE_GROUP):
            return SCALARS[f.type]
        if f.type_name == TIMESTAMP:
            return TimestampType()
        if f.type_name in WRAPPERS:
            return WRAPPERS[f.type_name]
        m, file, path = self.messages[f.type_name]
        inner = self.struct(f.type_name, m, stack, depth + 1, (file, path))
        return inner if inner.fields else None


# -- the wire format ----------------------------------------------------------------------------------
def zigzag_varint(n: int) -> bytes:
    """``n`` as Confluent writes a message index: a zig-zag varint."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def message_indexes(indexes: tuple[int, ...]) -> bytes:
    """The message indexes after the 5-byte header: their count, then each (zig-zag varints); the first
    message, ``(0,)``, as the single byte 0."""
    if indexes == (0,):
        return b"\x00"
    return zigzag_varint(len(indexes)) + b"".join(zigzag_varint(i) for i in indexes)


def indexes_text(indexes: tuple[int, ...]) -> str:
    """``(1, 0)`` → ``"1.0"``: how the decoder names a record's message indexes."""
    return ".".join(str(i) for i in indexes)


def parse_indexes_text(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))
