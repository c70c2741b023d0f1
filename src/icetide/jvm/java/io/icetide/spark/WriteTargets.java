package io.icetide.spark;

import java.util.Map;
import java.util.UUID;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.distributions.UnspecifiedDistribution;
import org.apache.spark.sql.connector.write.LogicalWriteInfoImpl;
import org.apache.spark.sql.connector.write.RequiresDistributionAndOrdering;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.BooleanType$;
import org.apache.spark.sql.types.IntegerType$;
import org.apache.spark.sql.types.LongType$;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The tables of a {@link MultiTableWrite} job, made and checked on the driver: each table's own
 * connector write (or why the table cannot be written in the job), and the checks of the frames
 * the job is given. Nothing here writes or commits.
 */
final class WriteTargets {
  private WriteTargets() {}

  static StructType checkFrame(Dataset<Row> frame) {
    StructType schema = frame.schema();
    if (schema.fields().length != 3
        || !(schema.fields()[0].dataType() instanceof BooleanType$)
        || !(schema.fields()[1].dataType() instanceof LongType$)
        || !(schema.fields()[2].dataType() instanceof StructType)) {
      throw new IllegalArgumentException(
          "frame must have columns (good boolean, ts long, row struct), not " + schema.simpleString());
    }
    return (StructType) schema.fields()[2].dataType();
  }

  /** A {@link TableWrite}, or why the table cannot be written here. Safe to call from many threads. */
  static Object prepare(
      SparkSession spark,
      String catalog,
      String namespace,
      String table,
      StructType rowSchema,
      Dataset<Row> frame,
      Map<String, String> options) {
    CatalogPlugin plugin = spark.sessionState().catalogManager().catalog(catalog);
    if (!(plugin instanceof TableCatalog)) {
      return "catalog " + catalog + " is not a table catalog";
    }
    Table loaded;
    try {
      loaded = ((TableCatalog) plugin).loadTable(Identifier.of(new String[] {namespace}, table));
    } catch (Exception e) {
      return "cannot load " + namespace + "." + table + ": " + e.getMessage();
    }
    if (!(loaded instanceof SupportsWrite)) {
      return "table does not support writes";
    }
    String queryId = UUID.randomUUID().toString();
    WriteBuilder builder =
        ((SupportsWrite) loaded)
            .newWriteBuilder(
                LogicalWriteInfoImpl.apply(
                    queryId,
                    rowSchema,
                    new CaseInsensitiveStringMap(options),
                    java.util.Optional.empty(),
                    java.util.Optional.empty()));
    Write write;
    try {
      write = builder.build();
    } catch (RuntimeException e) {
      return "the rows do not match the table as they are: " + e.getMessage();
    }
    if (write instanceof RequiresDistributionAndOrdering) {
      RequiresDistributionAndOrdering req = (RequiresDistributionAndOrdering) write;
      if (!(req.requiredDistribution() instanceof UnspecifiedDistribution)) {
        return "the table asks for a write distribution (write.distribution-mode)";
      }
      if (req.requiredOrdering().length > 0) {
        return "the table asks for a write ordering (sort order, or fan-out writer off)";
      }
    }
    return new TableWrite(namespace + "." + table, frame, rowSchema.fields().length, write.toBatch());
  }

  /**
   * The frame columns holding each table's rows in a routed job ({@code 4 + structOf[i]}), checked
   * against the frame's leading columns (idx int, good boolean, ts long, shape long) and each
   * table's width.
   */
  static int[] routedColumns(StructType schema, String[] order, int[] structOf, int[] widths) {
    if (schema.fields().length < 5
        || !(schema.fields()[0].dataType() instanceof IntegerType$)
        || !(schema.fields()[1].dataType() instanceof BooleanType$)
        || !(schema.fields()[2].dataType() instanceof LongType$)
        || !(schema.fields()[3].dataType() instanceof LongType$)) {
      throw new IllegalArgumentException(
          "frame must have columns (idx int, good boolean, ts long, shape long, row structs), not "
              + schema.simpleString());
    }
    int[] columns = new int[order.length];
    for (int i = 0; i < order.length; i++) {
      columns[i] = 4 + structOf[i];
      if (columns[i] < 4
          || columns[i] >= schema.fields().length
          || !(schema.fields()[columns[i]].dataType() instanceof StructType)
          || ((StructType) schema.fields()[columns[i]].dataType()).fields().length != widths[i]) {
        throw new IllegalArgumentException("column " + columns[i] + " does not hold " + order[i] + "'s rows");
      }
    }
    return columns;
  }
}
