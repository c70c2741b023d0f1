package io.icetide.spark;

import java.io.Serializable;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * How the tasks of {@link MultiTableWrite#runDecoded} decode JSON values and lay out table rows;
 * shipped to the executors, decoders made there (one per record type and task).
 */
final class Decoding implements Serializable {
  private static final long serialVersionUID = 1L;
  /** In a layout: the column is null (a column of the table the records do not have). */
  static final int NULL = Integer.MIN_VALUE;
  final StructType[] types; // per group: the record type values are parsed as
  final int[] groupOf; // per table: its group
  final int[][] layouts; // per table and column: field of the record (>= 0), frame column -1 - k, or NULL
  final DataType[] frameTypes; // the frame's column types
  final String timeZone;
  final String corruptColumn;
  final int maxDepth;
  final int maxFields;
  final String[] reserved;
  final int maxValueBytes;
  final boolean sample;

  Decoding(StructType[] types, int[] groupOf, int[][] layouts, DataType[] frameTypes, String timeZone,
      String corruptColumn, int maxDepth, int maxFields, String[] reserved, int maxValueBytes, boolean sample) {
    this.types = types;
    this.groupOf = groupOf;
    this.layouts = layouts;
    this.frameTypes = frameTypes;
    this.timeZone = timeZone;
    this.corruptColumn = corruptColumn;
    this.maxDepth = maxDepth;
    this.maxFields = maxFields;
    this.reserved = reserved;
    this.maxValueBytes = maxValueBytes;
    this.sample = sample;
  }

  JsonRowDecoder decoder(int group) {
    JsonRowDecoder d =
        new JsonRowDecoder(types[group], timeZone, corruptColumn, maxDepth, maxFields, reserved, maxValueBytes);
    if (route != null) {
      d.route(route.path);
    }
    return d;
  }

  Routing route; // null: the frame's idx column names each record's table

  /** The types of table {@code t}'s columns, by its layout (null columns: the null type). */
  DataType[] columnTypes(int t) {
    int[] layout = layouts[t];
    DataType[] out = new DataType[layout.length];
    for (int c = 0; c < layout.length; c++) {
      int from = layout[c];
      out[c] = from >= 0 ? types[groupOf[t]].fields()[from].dataType()
          : from == NULL ? org.apache.spark.sql.types.NullType$.MODULE$ : frameTypes[-1 - from];
    }
    return out;
  }

  /** Checks what {@link MultiTableWrite#runDecoded} was given against the frame and the tables. */
  static Decoding of(StructType frame, String[] order, int[] widths, int[] groupOf, String[] types, int[] layout,
      String timeZone, String corruptColumn, int maxDepth, int maxFields, String[] reserved, int maxValueBytes,
      boolean sample) {
    int n = order.length;
    if (groupOf.length != n) {
      throw new IllegalArgumentException("order names " + n + " tables and groupOf " + groupOf.length);
    }
    if (frame.fields().length < 3
        || !(frame.fields()[0].dataType() instanceof org.apache.spark.sql.types.IntegerType$)
        || !(frame.fields()[1].dataType() instanceof org.apache.spark.sql.types.LongType$)
        || !(frame.fields()[2].dataType() instanceof org.apache.spark.sql.types.BinaryType$)) {
      throw new IllegalArgumentException(
          "frame must have columns (idx int, ts long, value binary, ...), not " + frame.simpleString());
    }
    StructType[] parsed = new StructType[types.length];
    for (int g = 0; g < types.length; g++) {
      parsed[g] = (StructType) DataType.fromJson(types[g]);
    }
    int[][] layouts = new int[n][];
    int at = 0;
    for (int i = 0; i < n; i++) {
      if (groupOf[i] < 0 || groupOf[i] >= types.length || at + widths[i] > layout.length) {
        throw new IllegalArgumentException("no record type or layout for " + order[i]);
      }
      layouts[i] = java.util.Arrays.copyOfRange(layout, at, at + widths[i]);
      at += widths[i];
      for (int from : layouts[i]) {
        if (from >= parsed[groupOf[i]].fields().length
            || from < 0 && from != NULL && -1 - from >= frame.fields().length) {
          throw new IllegalArgumentException("the layout of " + order[i] + " names a column it does not have");
        }
      }
    }
    DataType[] frameTypes = new DataType[frame.fields().length];
    for (int k = 0; k < frameTypes.length; k++) {
      frameTypes[k] = frame.fields()[k].dataType();
    }
    return new Decoding(parsed, groupOf.clone(), layouts, frameTypes, timeZone, corruptColumn, maxDepth,
        maxFields, reserved.clone(), maxValueBytes, sample);
  }
}
