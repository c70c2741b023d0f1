package io.icetide.protobuf;

import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * The message indexes of a value in the Confluent Protobuf wire format: after the magic byte 0 and
 * the 4-byte schema id, their count then each index, as zig-zag varints; the single byte 0 stands
 * for {@code [0]} (the schema's first message). As a UDF: {@code "0"}, {@code "1.0"}, … (the path to
 * a nested message), null when the value is not in the wire format or its indexes do not parse.
 */
public final class MessageIndexes implements UDF1<byte[], String> {
  private static final long serialVersionUID = 1L;
  /** The most indexes a record may name (deeper nesting is refused). */
  public static final int MAX_INDEXES = 32;
  /** No message has more nested types than this (a larger index is garbage, not a message). */
  static final int MAX_INDEX = 1 << 20;
  static final int HEADER = 5;

  /** The UDF (binary → string) over a record value column. */
  public static UserDefinedFunction udf() {
    return functions.udf(new MessageIndexes(), DataTypes.StringType);
  }

  @Override
  public String call(byte[] value) {
    int[] out = parse(value);
    if (out == null) {
      return null;
    }
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < out.length - 1; i++) { // the last: where the message starts
      b.append(i == 0 ? "" : ".").append(out[i]);
    }
    return b.toString();
  }

  /** The indexes of {@code value} followed by the offset of the message bytes; null when they do not parse. */
  static int[] parse(byte[] value) {
    if (value == null || value.length <= HEADER || value[0] != 0) {
      return null;
    }
    int[] at = {HEADER};
    long count = zigzag(value, at);
    if (count == 0) {
      return new int[] {0, at[0]};
    }
    if (count < 0 || count > MAX_INDEXES) {
      return null;
    }
    int[] out = new int[(int) count + 1];
    for (int i = 0; i < count; i++) {
      long index = zigzag(value, at);
      if (index < 0 || index >= MAX_INDEX) {
        return null;
      }
      out[i] = (int) index;
    }
    out[(int) count] = at[0];
    return out;
  }

  /** A zig-zag varint of at most 5 bytes at {@code at[0]} (advanced past it); -1 when there is none. */
  private static long zigzag(byte[] v, int[] at) {
    long raw = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      if (at[0] >= v.length) {
        return -1;
      }
      byte b = v[at[0]++];
      raw |= (long) (b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        long n = (raw >>> 1) ^ -(raw & 1);
        return n < 0 ? Long.MIN_VALUE : n;
      }
    }
    return -1;
  }
}
