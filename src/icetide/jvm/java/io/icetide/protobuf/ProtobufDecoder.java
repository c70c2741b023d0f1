package io.icetide.protobuf;

import com.google.protobuf.CodedInputStream;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.InvalidProtocolBufferException;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Decodes record values of one Protobuf message of one registry schema, in the Confluent wire format
 * (magic byte 0, 4-byte schema id, message indexes, the message), into {@code struct<row, error>}:
 * {@code row} of the type icetide mapped the message to (see {@link ProtobufRows}), or null and
 * {@code error} saying why (bytes that are not that message, nesting past Protobuf's limit of 100,
 * a proto2 required field missing, a value no column holds). Never throws for a record's bytes.
 *
 * <p>Shipped to the executors as the compiled schema ({@code FileDescriptorSet}, dependencies
 * first), the name of the schema's own file and the message's indexes; the descriptors and the
 * conversion plan are built once per task. Construction builds them on the driver too, so a schema
 * the JVM refuses fails there ({@link IllegalArgumentException}), never in a task.
 */
public final class ProtobufDecoder implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  private final byte[] descriptorSet;
  private final String file;
  private final int[] indexes;
  private final String typeJson;
  private transient Descriptor descriptor;
  private transient ProtobufRows.Plan plan;

  ProtobufDecoder(byte[] descriptorSet, String file, int[] indexes, String typeJson) {
    this.descriptorSet = descriptorSet.clone();
    this.file = file;
    this.indexes = indexes.clone();
    this.typeJson = typeJson;
    build();
  }

  /** The decoding UDF (binary → struct&lt;row, error&gt;); {@link IllegalArgumentException} with the reason. */
  public static UserDefinedFunction udf(byte[] descriptorSet, String file, int[] indexes, String typeJson) {
    ProtobufDecoder d = new ProtobufDecoder(descriptorSet, file, indexes, typeJson);
    StructType out = new StructType().add("row", DataType.fromJson(typeJson)).add("error", DataTypes.StringType);
    return functions.udf(d, out);
  }

  private void build() {
    try {
      descriptor = message(descriptorSet, file, indexes);
    } catch (InvalidProtocolBufferException | DescriptorValidationException e) {
      throw new IllegalArgumentException("protobuf-java refuses the compiled schema: " + e.getMessage(), e);
    }
    plan = ProtobufRows.plan(descriptor, (StructType) DataType.fromJson(typeJson), "");
  }

  /** The message at {@code indexes} of file {@code file} of a compiled set (dependencies first). */
  static Descriptor message(byte[] set, String file, int[] indexes)
      throws InvalidProtocolBufferException, DescriptorValidationException {
    Map<String, FileDescriptor> built = new HashMap<>();
    for (FileDescriptorProto p : FileDescriptorSet.parseFrom(set).getFileList()) {
      List<String> names = p.getDependencyList();
      FileDescriptor[] deps = new FileDescriptor[names.size()];
      for (int i = 0; i < deps.length; i++) {
        deps[i] = built.get(names.get(i));
        if (deps[i] == null) {
          throw new IllegalArgumentException(p.getName() + " imports " + names.get(i) + ", which is not compiled before it");
        }
      }
      built.put(p.getName(), FileDescriptor.buildFrom(p, deps));
    }
    FileDescriptor main = built.get(file);
    if (main == null || indexes.length == 0 || indexes[0] >= main.getMessageTypes().size()) {
      throw new IllegalArgumentException("no message at " + Arrays.toString(indexes) + " of " + file);
    }
    Descriptor d = main.getMessageTypes().get(indexes[0]);
    for (int i = 1; i < indexes.length; i++) {
      // a map field's entry type is no message of the schema (Confluent counts the declared ones)
      List<Descriptor> nested = new java.util.ArrayList<>();
      for (Descriptor n : d.getNestedTypes()) {
        if (!n.getOptions().getMapEntry()) {
          nested.add(n);
        }
      }
      if (indexes[i] >= nested.size()) {
        throw new IllegalArgumentException("no message at " + Arrays.toString(indexes) + " of " + file);
      }
      d = nested.get(indexes[i]);
    }
    return d;
  }

  @Override
  public Row call(byte[] value) {
    if (value == null) {
      return null;
    }
    if (plan == null) {
      build();
    }
    int[] found = MessageIndexes.parse(value);
    if (found == null || !Arrays.equals(Arrays.copyOf(found, found.length - 1), indexes)) {
      return RowFactory.create(null, "the message indexes after the schema id name another message");
    }
    int at = found[found.length - 1];
    try {
      DynamicMessage m = DynamicMessage.parseFrom(descriptor, CodedInputStream.newInstance(value, at, value.length - at));
      return RowFactory.create(plan.row(m), null);
    } catch (InvalidProtocolBufferException | ProtobufRows.Undecodable e) {
      return RowFactory.create(null, e.getMessage());
    } catch (java.io.IOException | RuntimeException | StackOverflowError e) {
      return RowFactory.create(null, e.toString());
    }
  }
}
