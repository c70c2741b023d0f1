package io.icetide.protobuf;

import com.google.protobuf.ByteString;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Message;
import com.google.protobuf.UnknownFieldSet;
import java.io.Serializable;
import java.math.BigDecimal;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A decoded message as a Spark row of the type icetide mapped its descriptor to
 * ({@code icetide.ingest.formats.protobuf_types}, where the mapping is documented). The plan is
 * built once from the descriptor and the type and refuses any field it would convert otherwise
 * ({@link IllegalArgumentException}, on the driver), so the rows always have the declared type.
 *
 * <p>A field with presence that the record leaves out is null; one without presence holds its
 * default, as Protobuf reads it. A value no column can hold (a Timestamp outside years 1-9999)
 * raises {@link Undecodable}: the record is a dead letter, never a row with a hole.
 *
 * <p>An enum number a proto2 (closed) enum does not name: protobuf-java keeps it among the
 * message's unknown fields, so the field would read as absent (null, or its default in a map
 * entry) and a repeated field would lose the element. Every message converted (nested ones and
 * map entries too) is checked for unknown fields numbered as one of its enum fields: such a record
 * raises {@link Undecodable} naming the field and the number. A proto3 (open) enum keeps the
 * number in the field itself: its text is the column's value ({@link #enumName}).
 */
final class ProtobufRows {
  static final String TIMESTAMP = "google.protobuf.Timestamp";
  static final Set<String> WRAPPERS =
      Set.of("google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
          "google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
          "google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue");
  /** Timestamp's valid range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z. */
  static final long MIN_SECONDS = -62135596800L;
  static final long MAX_SECONDS = 253402300799L;

  private ProtobufRows() {}

  /** A value the decoded record holds that no column can (the record is a dead letter). */
  static final class Undecodable extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Undecodable(String message) {
      super(message, null, false, false);
    }
  }

  /** One field's value (an element of a repeated field) to what Spark's row converter takes. */
  interface Conv extends Serializable {
    Object apply(Object value);
  }

  private static final int SINGLE = 0;
  private static final int LIST = 1;
  private static final int MAP = 2;

  /** How a message becomes a row: per column, its field, how it is laid out, how its values convert. */
  static final class Plan {
    private final FieldDescriptor[] fields;
    private final int[] kinds;
    private final Conv[] values;
    private final Conv[] keys; // map keys (null for other kinds)
    private final FieldDescriptor[] keyFields;
    private final FieldDescriptor[] valueFields;
    private final String[] paths;
    /** The message's enum fields: an unknown field of one of their numbers is a number its enum lacks. */
    private final List<FieldDescriptor> enums = new ArrayList<>();
    private final List<String> enumPaths = new ArrayList<>();

    private Plan(int n) {
      fields = new FieldDescriptor[n];
      kinds = new int[n];
      values = new Conv[n];
      keys = new Conv[n];
      keyFields = new FieldDescriptor[n];
      valueFields = new FieldDescriptor[n];
      paths = new String[n];
    }

    Row row(Message m) {
      for (int i = 0; i < enums.size(); i++) {
        knownEnum(m, enums.get(i), enumPaths.get(i));
      }
      Object[] out = new Object[fields.length];
      for (int i = 0; i < fields.length; i++) {
        FieldDescriptor f = fields[i];
        switch (kinds[i]) {
          case LIST:
            List<?> items = (List<?>) m.getField(f);
            List<Object> list = new ArrayList<>(items.size());
            for (Object item : items) {
              list.add(values[i].apply(item));
            }
            out[i] = list;
            break;
          case MAP:
            List<?> entries = (List<?>) m.getField(f);
            Map<Object, Object> map = new LinkedHashMap<>();
            for (Object entry : entries) { // a key twice: the last one wins, as in Protobuf
              Message e = (Message) entry;
              if (valueFields[i].getJavaType() == FieldDescriptor.JavaType.ENUM) {
                knownEnum(e, valueFields[i], paths[i] + ".value");
              }
              map.put(keys[i].apply(e.getField(keyFields[i])), values[i].apply(e.getField(valueFields[i])));
            }
            out[i] = map;
            break;
          default:
            out[i] = f.hasPresence() && !m.hasField(f) ? null : values[i].apply(m.getField(f));
        }
      }
      return RowFactory.create(out);
    }
  }

  /**
   * {@link Undecodable} when {@code m} holds, among its unknown fields, one numbered as its enum
   * field {@code f} ({@code at}: the field's path): a number a closed enum does not name (or a
   * value of a wire type no enum has), which protobuf-java leaves out of the field.
   */
  static void knownEnum(Message m, FieldDescriptor f, String at) {
    UnknownFieldSet unknown = m.getUnknownFields();
    if (unknown.isEmpty() || !unknown.hasField(f.getNumber())) {
      return;
    }
    List<Long> numbers = unknown.getField(f.getNumber()).getVarintList();
    String enumName = f.getEnumType().getFullName();
    if (numbers.isEmpty()) {
      throw new Undecodable("field " + at + " (number " + f.getNumber() + ", enum " + enumName
          + ") holds a value of another wire type than an enum's");
    }
    throw new Undecodable("field " + at + " (number " + f.getNumber() + ") holds " + (int) (long) numbers.get(0)
        + ", a number enum " + enumName + " does not name (a closed enum: protobuf-java would read the field "
        + "as absent)");
  }

  /** The plan of message {@code d} as rows of {@code type}; {@code where}: the path, for messages. */
  static Plan plan(Descriptor d, StructType type, String where) {
    StructField[] columns = type.fields();
    Plan p = new Plan(columns.length);
    for (FieldDescriptor f : d.getFields()) { // every enum field, whether a column holds it or not
      if (f.getJavaType() == FieldDescriptor.JavaType.ENUM) {
        p.enums.add(f);
        p.enumPaths.add(where.isEmpty() ? f.getName() : where + "." + f.getName());
      }
    }
    for (int i = 0; i < columns.length; i++) {
      String name = columns[i].name();
      FieldDescriptor f = d.findFieldByName(name);
      String at = where.isEmpty() ? name : where + "." + name;
      if (f == null) {
        throw new IllegalArgumentException(at + ": message " + d.getFullName() + " has no such field");
      }
      DataType t = columns[i].dataType();
      p.fields[i] = f;
      p.paths[i] = at;
      if (f.isMapField()) {
        if (!(t instanceof MapType)) {
          throw mismatch(at, f, t);
        }
        MapType mt = (MapType) t;
        p.kinds[i] = MAP;
        p.keyFields[i] = f.getMessageType().findFieldByNumber(1);
        p.valueFields[i] = f.getMessageType().findFieldByNumber(2);
        p.keys[i] = value(p.keyFields[i], mt.keyType(), at + ".key");
        p.values[i] = value(p.valueFields[i], mt.valueType(), at + ".value");
      } else if (f.isRepeated()) {
        if (!(t instanceof ArrayType)) {
          throw mismatch(at, f, t);
        }
        p.kinds[i] = LIST;
        p.values[i] = value(f, ((ArrayType) t).elementType(), at + ".element");
      } else {
        p.values[i] = value(f, t, at);
      }
    }
    return p;
  }

  private static IllegalArgumentException mismatch(String at, FieldDescriptor f, DataType t) {
    return new IllegalArgumentException(
        at + ": field of type " + f.getType() + (f.isRepeated() ? " (repeated)" : "") + " cannot be read as "
            + t.simpleString());
  }

  private static Conv value(FieldDescriptor f, DataType t, String at) {
    FieldDescriptor.Type pt = f.getType();
    switch (f.getJavaType()) {
      case INT:
        if (pt == FieldDescriptor.Type.UINT32 || pt == FieldDescriptor.Type.FIXED32) {
          return expect(t, DataTypes.LongType, at, f, v -> Integer.toUnsignedLong((Integer) v));
        }
        return expect(t, DataTypes.IntegerType, at, f, v -> v);
      case LONG:
        if (pt == FieldDescriptor.Type.UINT64 || pt == FieldDescriptor.Type.FIXED64) {
          return expect(t, DataTypes.createDecimalType(20, 0), at, f,
              v -> new BigDecimal(Long.toUnsignedString((Long) v)));
        }
        return expect(t, DataTypes.LongType, at, f, v -> v);
      case FLOAT:
        return expect(t, DataTypes.FloatType, at, f, v -> v);
      case DOUBLE:
        return expect(t, DataTypes.DoubleType, at, f, v -> v);
      case BOOLEAN:
        return expect(t, DataTypes.BooleanType, at, f, v -> v);
      case STRING:
        return expect(t, DataTypes.StringType, at, f, v -> v);
      case BYTE_STRING:
        return expect(t, DataTypes.BinaryType, at, f, v -> ((ByteString) v).toByteArray());
      case ENUM:
        return expect(t, DataTypes.StringType, at, f, ProtobufRows::enumName);
      case MESSAGE:
        return message(f, t, at);
      default:
        throw mismatch(at, f, t);
    }
  }

  private static Conv expect(DataType t, DataType want, String at, FieldDescriptor f, Conv c) {
    boolean same = want instanceof DecimalType
        ? t instanceof DecimalType && ((DecimalType) t).precision() == 20 && ((DecimalType) t).scale() == 0
        : want.equals(t);
    if (!same) {
      throw mismatch(at, f, t);
    }
    return c;
  }

  /** An enum value's name; a number the enum does not name (proto3 keeps those) as its text. */
  static String enumName(Object v) {
    EnumValueDescriptor e = (EnumValueDescriptor) v;
    EnumValueDescriptor known = e.getType().findValueByNumber(e.getNumber());
    return known != null ? known.getName() : Integer.toString(e.getNumber());
  }

  private static Conv message(FieldDescriptor f, DataType t, String at) {
    Descriptor m = f.getMessageType();
    String name = m.getFullName();
    if (name.equals(TIMESTAMP) && DataTypes.TimestampType.equals(t)) {
      FieldDescriptor seconds = m.findFieldByName("seconds");
      FieldDescriptor nanos = m.findFieldByName("nanos");
      return v -> timestamp((Long) ((Message) v).getField(seconds), (Integer) ((Message) v).getField(nanos));
    }
    if (WRAPPERS.contains(name) && !(t instanceof StructType)) {
      FieldDescriptor inner = m.findFieldByName("value");
      Conv c = value(inner, t, at);
      return v -> c.apply(((Message) v).getField(inner));
    }
    if (!(t instanceof StructType)) {
      throw mismatch(at, f, t);
    }
    Plan sub = plan(m, (StructType) t, at);
    return v -> sub.row((Message) v);
  }

  static Instant timestamp(long seconds, int nanos) {
    if (seconds < MIN_SECONDS || seconds > MAX_SECONDS || nanos < 0 || nanos > 999_999_999) {
      throw new Undecodable("a google.protobuf.Timestamp out of its range (years 1-9999, nanos 0-999999999): seconds="
          + seconds + ", nanos=" + nanos);
    }
    return Instant.ofEpochSecond(seconds, nanos);
  }
}
