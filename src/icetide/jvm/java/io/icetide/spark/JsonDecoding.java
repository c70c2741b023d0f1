package io.icetide.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.catalyst.CatalystTypeConverters;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * {@link JsonRowDecoder} over a frame, for what must compare it with the expression path (the
 * differential test) and for a look at what the one pass would make of some records.
 */
public final class JsonDecoding {
  private JsonDecoding() {}

  /**
   * Each {@code value} (binary) of {@code values} (columns {@code key} string, {@code value})
   * decoded as the one pass decodes it: {@code (key, good boolean, shape bigint (null: none), row
   * struct<type> (null unless good))}.
   */
  public static Dataset<Row> decode(
      Dataset<Row> values, String type, String timeZone, int maxDepth, int maxFields, String[] reserved,
      int maxValueBytes) {
    return run(values, type, timeZone, maxDepth, maxFields, reserved, maxValueBytes, null, null)
        .select("key", "good", "shape", "row");
  }

  /**
   * {@link #decode} of {@code values} (columns {@code key}, {@code value}, {@code _kafka_topic}) with
   * the routing of a routed one pass ({@link MultiTableWrite#runDecoded}): two more columns, {@code
   * table}, the name among {@code tables} each record is routed to (null: none of them), and {@code
   * sure}, whether the decoder's own reading of the field decided it.
   */
  public static Dataset<Row> decodeRouted(
      Dataset<Row> values, String type, String timeZone, int maxDepth, int maxFields, String[] reserved,
      int maxValueBytes, String[] routePath, String[] namespacePieces, String[] tablePieces, String[] tables,
      org.apache.spark.sql.Column fallback) {
    Routing routing = new Routing(routePath.clone(), namespacePieces.clone(), tablePieces.clone(), tables.clone(),
        values.schema().fieldIndex("_kafka_topic"), Routing.bind(values, fallback));
    return run(values, type, timeZone, maxDepth, maxFields, reserved, maxValueBytes, routing, tables.clone());
  }

  private static Dataset<Row> run(
      Dataset<Row> values, String type, String timeZone, int maxDepth, int maxFields, String[] reserved,
      int maxValueBytes, Routing routing, String[] tables) {
    StructType parsed = (StructType) DataType.fromJson(type);
    String corrupt = values.sparkSession().sessionState().conf().columnNameOfCorruptRecord();
    String[] prefixes = reserved.clone();
    int keyAt = values.schema().fieldIndex("key");
    int valueAt = values.schema().fieldIndex("value");
    JavaRDD<InternalRow> rdd =
        JavaRDD.fromRDD(values.queryExecution().toRdd(), scala.reflect.ClassTag$.MODULE$.apply(InternalRow.class));
    JavaRDD<Row> out =
        rdd.mapPartitions(
            rows -> {
              JsonRowDecoder d =
                  new JsonRowDecoder(parsed, timeZone, corrupt, maxDepth, maxFields, prefixes, maxValueBytes);
              if (routing != null) {
                d.route(routing.path);
              }
              scala.Function1<Object, Object> toRow = CatalystTypeConverters.createToScalaConverter(parsed);
              List<Row> got = new ArrayList<>();
              while (rows.hasNext()) {
                InternalRow r = rows.next();
                d.decode(r.isNullAt(valueAt) ? null : r.getBinary(valueAt));
                int at = routing == null ? -1 : routing.target(d, r);
                got.add(RowFactory.create(r.getUTF8String(keyAt).toString(), d.good,
                    d.hasShape ? (Object) d.shape : null, d.good ? toRow.apply(d.row) : null,
                    at < 0 ? null : tables[at], d.routeSure));
              }
              return got.iterator();
            });
    StructType schema =
        new StructType()
            .add("key", DataTypes.StringType)
            .add("good", DataTypes.BooleanType)
            .add("shape", DataTypes.LongType)
            .add("row", parsed)
            .add("table", DataTypes.StringType)
            .add("sure", DataTypes.BooleanType);
    return values.sparkSession().createDataFrame(out, schema);
  }
}
