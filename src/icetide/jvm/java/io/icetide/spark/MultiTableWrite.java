package io.icetide.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.distributions.UnspecifiedDistribution;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfoImpl;
import org.apache.spark.sql.connector.write.PhysicalWriteInfoImpl;
import org.apache.spark.sql.connector.write.RequiresDistributionAndOrdering;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.BooleanType$;
import org.apache.spark.sql.types.LongType$;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.reflect.ClassTag$;

/**
 * Appends the rows of many tables in one Spark job, then commits each table on its own.
 *
 * <p>Spark runs one job per table write; a micro-batch fanned out to many tables pays that
 * job's fixed cost (scheduling, planning, a scan of the cached batch) once per table. Here each
 * table keeps its own connector write ({@link BatchWrite} from the table's own write builder, so
 * Iceberg's writers, file sizes, formats and snapshot properties apply unchanged), but the tasks of
 * all tables run as one job over the union of their frames. The driver then commits each table
 * with {@link #commit(int)}, and the caller decides what happens between commits.
 *
 * <p>Each frame has three columns: {@code good} (boolean: write the row or count it as bad),
 * {@code ts} (long, nullable: the maximum is reported) and {@code row} (a struct with exactly the
 * table's columns, in order). A table whose write needs a distribution or ordering (Spark would
 * shuffle or sort) is refused by {@link #add}; the caller writes it the usual way.
 */
public final class MultiTableWrite {
  private final SparkSession spark;
  private final List<Target> targets = new ArrayList<>();
  private final Map<String, Target> byName = new java.util.HashMap<>();
  private volatile boolean ran = false;

  public MultiTableWrite(SparkSession spark) {
    this.spark = spark;
  }

  /** One table's write: its frame, its connector write and, after {@link #run}, its results. */
  private static final class Target {
    final String name;
    final Dataset<Row> frame;
    final BatchWrite batchWrite;
    final List<WriterCommitMessage> messages = new ArrayList<>();
    long good;
    long bad;
    long files;
    long tsMax = Long.MIN_VALUE;
    boolean done;

    Target(String name, Dataset<Row> frame, BatchWrite batchWrite) {
      this.name = name;
      this.frame = frame;
      this.batchWrite = batchWrite;
    }
  }

  /** What one task reports back to the driver. */
  private static final class TaskResult implements Serializable {
    private static final long serialVersionUID = 1L;
    final int target;
    final WriterCommitMessage message;
    final long good;
    final long bad;
    final long tsMax;

    TaskResult(int target, WriterCommitMessage message, long good, long bad, long tsMax) {
      this.target = target;
      this.message = message;
      this.good = good;
      this.bad = bad;
      this.tsMax = tsMax;
    }
  }

  /**
   * Adds a table to the job.
   *
   * @return null when added, else why the table cannot be written here (the caller writes it with
   *     Spark's usual per-table path)
   */
  public String add(
      String catalog, String namespace, String table, Dataset<Row> frame, Map<String, String> options) {
    Object made = prepare(catalog, namespace, table, frame, options);
    if (made instanceof String) {
      return (String) made;
    }
    Target target = (Target) made;
    synchronized (this) {
      if (ran) {
        throw new IllegalStateException("the job already ran");
      }
      if (byName.containsKey(target.name)) {
        throw new IllegalArgumentException("table " + target.name + " was already added");
      }
      targets.add(target);
      byName.put(target.name, target);
    }
    return null;
  }

  /** A {@link Target}, or why the table cannot be written here. Safe to call from many threads. */
  private Object prepare(
      String catalog, String namespace, String table, Dataset<Row> frame, Map<String, String> options) {
    if (ran) {
      throw new IllegalStateException("the job already ran");
    }
    StructType schema = frame.schema();
    if (schema.fields().length != 3
        || !(schema.fields()[0].dataType() instanceof BooleanType$)
        || !(schema.fields()[1].dataType() instanceof LongType$)
        || !(schema.fields()[2].dataType() instanceof StructType)) {
      throw new IllegalArgumentException(
          "frame must have columns (good boolean, ts long, row struct), not " + schema.simpleString());
    }
    StructType rowSchema = (StructType) schema.fields()[2].dataType();
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
    return new Target(namespace + "." + table, frame, write.toBatch());
  }

  /** Writes every added table's files in one Spark job; nothing is committed yet. */
  public synchronized void run() {
    if (ran) {
      throw new IllegalStateException("the job already ran");
    }
    ran = true;
    if (targets.isEmpty()) {
      return;
    }
    int n = targets.size();
    int[] starts = new int[n + 1];
    DataWriterFactory[] factories = new DataWriterFactory[n];
    int[] widths = new int[n];
    @SuppressWarnings("unchecked")
    JavaRDD<InternalRow>[] rdds = new JavaRDD[n];
    for (int i = 0; i < n; i++) {
      Target t = targets.get(i);
      rdds[i] =
          JavaRDD.fromRDD(
              t.frame.queryExecution().toRdd(), ClassTag$.MODULE$.apply(InternalRow.class));
      int parts = rdds[i].getNumPartitions();
      starts[i + 1] = starts[i] + parts;
      factories[i] = t.batchWrite.createBatchWriterFactory(new PhysicalWriteInfoImpl(parts));
      widths[i] = ((StructType) t.frame.schema().fields()[2].dataType()).fields().length;
    }
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    JavaRDD<InternalRow> all = jsc.union(rdds);
    List<TaskResult> results;
    try {
      results =
          all.mapPartitionsWithIndex(
                  (index, rows) -> writePartition(index, rows, starts, factories, widths), false)
              .collect();
    } catch (RuntimeException e) {
      abortAll();
      throw e;
    }
    for (TaskResult r : results) {
      Target t = targets.get(r.target);
      t.messages.add(r.message);
      t.good += r.good;
      t.bad += r.bad;
      t.tsMax = Math.max(t.tsMax, r.tsMax);
    }
  }

  private static Iterator<TaskResult> writePartition(
      int index,
      Iterator<InternalRow> rows,
      int[] starts,
      DataWriterFactory[] factories,
      int[] widths) throws Exception {
    int t = 0;
    while (starts[t + 1] <= index) {
      t++;
    }
    int width = widths[t];
    long good = 0;
    long bad = 0;
    long tsMax = Long.MIN_VALUE;
    DataWriter<InternalRow> writer = null; // opened on the first good row: no empty files
    try {
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        if (!row.isNullAt(1)) {
          tsMax = Math.max(tsMax, row.getLong(1));
        }
        if (!row.isNullAt(0) && row.getBoolean(0)) {
          if (writer == null) {
            writer = factories[t].createWriter(index - starts[t], TaskContext.get().taskAttemptId());
          }
          writer.write(row.getStruct(2, width));
          good++;
        } else {
          bad++;
        }
      }
      WriterCommitMessage message = writer == null ? null : writer.commit();
      return Collections.singletonList(new TaskResult(t, message, good, bad, tsMax)).iterator();
    } catch (Throwable e) {
      if (writer != null) {
        try {
          writer.abort();
        } catch (Throwable suppressed) {
          e.addSuppressed(suppressed);
        }
      }
      throw e;
    } finally {
      if (writer != null) {
        writer.close();
      }
    }
  }

  private void abortAll() {
    for (Target t : targets) {
      abort(t.name);
    }
  }


  private Target target(String name) {
    Target t = byName.get(name);
    if (t == null) {
      throw new IllegalArgumentException("table " + name + " was not added");
    }
    return t;
  }

  /** Rows written to {@code table} (namespace.table). */
  public long good(String table) {
    return target(table).good;
  }

  /** Rows of {@code table} that were not written (the caller dead-letters them). */
  public long bad(String table) {
    return target(table).bad;
  }

  /** The largest {@code ts} among {@code table}'s rows, or null. */
  public Long tsMax(String table) {
    long v = target(table).tsMax;
    return v == Long.MIN_VALUE ? null : v;
  }

  /** Commits {@code table}'s files: one snapshot, even when no row was written. */
  public void commit(String table) {
    Target t = target(table);
    synchronized (t) {
      if (!ran || t.done) {
        throw new IllegalStateException("table " + t.name + " is not ready to commit");
      }
      t.done = true;
    }
    try {
      t.batchWrite.commit(t.messages.toArray(new WriterCommitMessage[0]));
    } catch (RuntimeException e) {
      t.batchWrite.abort(t.messages.toArray(new WriterCommitMessage[0]));
      throw e;
    }
  }

  /** Drops {@code table}'s written files uncommitted (Iceberg deletes them when it can tell they
   * are unreferenced; otherwise orphan cleanup does). */
  public void abort(String table) {
    Target t = target(table);
    synchronized (t) {
      if (t.done) {
        return;
      }
      t.done = true;
    }
    t.batchWrite.abort(t.messages.toArray(new WriterCommitMessage[0]));
  }
}
