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
import org.apache.spark.sql.connector.distributions.ClusteredDistribution;
import org.apache.spark.sql.connector.distributions.Distribution;
import org.apache.spark.sql.connector.distributions.UnspecifiedDistribution;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.Transform;
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

  /**
   * The row schema of a frame {@link MultiTableWrite#add} takes: (good boolean, ts long, then the
   * table's columns, in order).
   */
  static StructType checkFrame(Dataset<Row> frame) {
    StructType schema = frame.schema();
    if (schema.fields().length < 2
        || !(schema.fields()[0].dataType() instanceof BooleanType$)
        || !(schema.fields()[1].dataType() instanceof LongType$)) {
      throw new IllegalArgumentException(
          "frame must have columns (good boolean, ts long, then the table's columns), not " + schema.simpleString());
    }
    return new StructType(java.util.Arrays.copyOfRange(schema.fields(), 2, schema.fields().length));
  }

  /** A {@link TableWrite}, or why the table cannot be written here. Safe to call from many threads. */
  static Object prepare(
      SparkSession spark,
      String catalog,
      String namespace,
      String table,
      StructType rowSchema,
      Dataset<Row> frame,
      Map<String, String> options,
      boolean clustered) {
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
    String clustering = null;
    if (write instanceof RequiresDistributionAndOrdering) {
      RequiresDistributionAndOrdering req = (RequiresDistributionAndOrdering) write;
      Distribution wanted = req.requiredDistribution();
      if (clustered && wanted instanceof ClusteredDistribution) {
        clustering = clustering(((ClusteredDistribution) wanted).clustering(), rowSchema);
        if (clustering == null) {
          return "the table's write distribution (write.distribution-mode=hash) clusters by an expression"
              + " icetide cannot compute for its rows: " + describe(((ClusteredDistribution) wanted).clustering());
        }
      } else if (!(wanted instanceof UnspecifiedDistribution)) {
        return "the table asks for a write distribution (write.distribution-mode)";
      }
      if (req.requiredOrdering().length > 0) {
        return "the table asks for a write ordering (sort order, or fan-out writer off)";
      }
    }
    return new TableWrite(namespace + "." + table, frame, rowSchema, write.toBatch(), clustering);
  }

  /** Iceberg's partition transforms, each a function of the table's catalog (``system.<name>``). */
  private static final java.util.Set<String> TRANSFORMS =
      java.util.Set.of("identity", "years", "months", "days", "hours", "bucket", "truncate");

  /**
   * A hash distribution's clustering as JSON, {@code [{"transform": name, "args": [ints], "column":
   * index in rowSchema}]}, or null when an expression is not one of {@link #TRANSFORMS} over one
   * top-level column with integer arguments (the caller then cannot compute it, and the table is
   * written by Spark's own path, which can).
   */
  static String clustering(Expression[] keys, StructType rowSchema) {
    com.fasterxml.jackson.databind.ObjectMapper json = new com.fasterxml.jackson.databind.ObjectMapper();
    com.fasterxml.jackson.databind.node.ArrayNode out = json.createArrayNode();
    for (Expression key : keys) {
      if (!(key instanceof Transform)) {
        return null;
      }
      Transform t = (Transform) key;
      NamedReference[] refs = t.references();
      if (!TRANSFORMS.contains(t.name()) || refs.length != 1 || refs[0].fieldNames().length != 1) {
        return null;
      }
      int column = -1;
      for (int c = 0; c < rowSchema.fields().length; c++) {
        if (rowSchema.fields()[c].name().equals(refs[0].fieldNames()[0])) {
          column = c;
        }
      }
      if (column < 0) {
        return null;
      }
      com.fasterxml.jackson.databind.node.ObjectNode node = out.addObject();
      node.put("transform", t.name());
      node.put("column", column);
      com.fasterxml.jackson.databind.node.ArrayNode args = node.putArray("args");
      for (Expression a : t.arguments()) {
        if (a instanceof NamedReference) {
          continue;
        }
        if (!(a instanceof Literal) || !(((Literal<?>) a).value() instanceof Integer)) {
          return null;
        }
        args.add((Integer) ((Literal<?>) a).value());
      }
    }
    return out.toString();
  }

  private static String describe(Expression[] keys) {
    StringBuilder b = new StringBuilder();
    for (Expression k : keys) {
      b.append(b.length() == 0 ? "" : ", ").append(k.describe());
    }
    return b.toString();
  }

  /**
   * The column types of each table's rows in a routed job: table {@code i}'s columns are the frame's
   * {@code starts[i]} to {@code starts[i] + width - 1}, checked against the frame's leading columns
   * (idx int, good boolean, ts long, shape long) and, by type, against the table's row schema.
   */
  static org.apache.spark.sql.types.DataType[][] routedSlices(
      StructType schema, String[] order, int[] starts, StructType[] rowSchemas) {
    if (schema.fields().length < 4
        || !(schema.fields()[0].dataType() instanceof IntegerType$)
        || !(schema.fields()[1].dataType() instanceof BooleanType$)
        || !(schema.fields()[2].dataType() instanceof LongType$)
        || !(schema.fields()[3].dataType() instanceof LongType$)) {
      throw new IllegalArgumentException(
          "frame must have columns (idx int, good boolean, ts long, shape long, then the tables' columns), not "
              + schema.simpleString());
    }
    org.apache.spark.sql.types.DataType[][] out = new org.apache.spark.sql.types.DataType[order.length][];
    for (int i = 0; i < order.length; i++) {
      org.apache.spark.sql.types.StructField[] want = rowSchemas[i].fields();
      if (starts[i] < 4 || starts[i] + want.length > schema.fields().length) {
        throw new IllegalArgumentException("columns from " + starts[i] + " do not hold " + order[i] + "'s rows");
      }
      out[i] = new org.apache.spark.sql.types.DataType[want.length];
      for (int c = 0; c < want.length; c++) {
        org.apache.spark.sql.types.DataType have = schema.fields()[starts[i] + c].dataType();
        if (!have.catalogString().equalsIgnoreCase(want[c].dataType().catalogString())) {
          throw new IllegalArgumentException("frame column " + (starts[i] + c) + " is " + have.catalogString()
              + ", but " + order[i] + "'s column " + want[c].name() + " is " + want[c].dataType().catalogString());
        }
        out[i][c] = have;
      }
    }
    return out;
  }
}
