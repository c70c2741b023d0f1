package io.icetide.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
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
import org.apache.spark.sql.types.IntegerType$;
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
 *
 * <p>Routed mode ({@link #addTarget} then {@link #runRouted}): one frame holds the rows of every
 * table, and each task hands each row to the writer of the table its {@code idx} column names.
 * The batch is read once, with no cache and no scan per table; each task reports, per table, the
 * record shapes it saw (see {@link JsonScan}) and a value of each, so the caller can refuse to commit a table whose
 * records carry something its schema lacks, and how many rows named no table here.
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
    final Dataset<Row> frame; // null in routed mode
    final int width;
    final BatchWrite batchWrite;
    final List<WriterCommitMessage> messages = new ArrayList<>();
    long good;
    long bad;
    long tsMax = Long.MIN_VALUE;
    HashSet<Long> shapes = new HashSet<>(); // null once more than maxShapes were seen
    final Map<Long, byte[]> samples = new java.util.HashMap<>(); // shape → the first value of it seen
    boolean done;

    Target(String name, Dataset<Row> frame, int width, BatchWrite batchWrite) {
      this.name = name;
      this.frame = frame;
      this.width = width;
      this.batchWrite = batchWrite;
    }
  }

  /** What one task reports back to the driver. */
  private static final class TaskResult implements Serializable {
    private static final long serialVersionUID = 1L;
    final int target; // -1: the rows that named no table here
    final WriterCommitMessage message;
    final long good;
    final long bad;
    final long tsMax;
    final long[] shapes; // null: too many
    final long[] sampled; // shapes with a value in samples (routed mode with a sample column)
    final byte[][] samples;

    TaskResult(int target, WriterCommitMessage message, long good, long bad, long tsMax, long[] shapes) {
      this(target, message, good, bad, tsMax, shapes, new long[0], new byte[0][]);
    }

    TaskResult(int target, WriterCommitMessage message, long good, long bad, long tsMax, long[] shapes,
        long[] sampled, byte[][] samples) {
      this.target = target;
      this.message = message;
      this.good = good;
      this.bad = bad;
      this.tsMax = tsMax;
      this.shapes = shapes;
      this.sampled = sampled;
      this.samples = samples;
    }
  }

  private long unrouted = 0;
  /** Bytes of sampled values a task keeps per table (see {@link #samples}). */
  public static final long SAMPLE_BYTES = 4L << 20;

  /**
   * Adds a table to the job.
   *
   * @return null when added, else why the table cannot be written here (the caller writes it with
   *     Spark's usual per-table path)
   */
  public String add(
      String catalog, String namespace, String table, Dataset<Row> frame, Map<String, String> options) {
    Object made = prepare(catalog, namespace, table, checkFrame(frame), frame, options);
    return register(made);
  }

  /**
   * Adds a table to a routed job ({@link #runRouted}); {@code rowSchema} is the struct its rows
   * will have (the table's columns, in order).
   *
   * @return null when added, else why the table cannot be written here
   */
  public String addTarget(
      String catalog, String namespace, String table, StructType rowSchema, Map<String, String> options) {
    return register(prepare(catalog, namespace, table, rowSchema, null, options));
  }

  private String register(Object made) {
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

  private static StructType checkFrame(Dataset<Row> frame) {
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

  /** A {@link Target}, or why the table cannot be written here. Safe to call from many threads. */
  private Object prepare(
      String catalog,
      String namespace,
      String table,
      StructType rowSchema,
      Dataset<Row> frame,
      Map<String, String> options) {
    if (ran) {
      throw new IllegalStateException("the job already ran");
    }
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
    return new Target(namespace + "." + table, frame, rowSchema.fields().length, write.toBatch());
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
    for (Target t : targets) {
      if (t.frame == null) {
        throw new IllegalStateException(t.name + " was added for a routed job: use runRouted");
      }
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
      widths[i] = t.width;
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
    collectResults(results, Integer.MAX_VALUE);
  }

  private void collectResults(List<TaskResult> results, int maxShapes) {
    for (TaskResult r : results) {
      if (r.target < 0) {
        unrouted += r.good;
        continue;
      }
      Target t = targets.get(r.target);
      if (r.message != null) {
        t.messages.add(r.message);
      }
      t.good += r.good;
      t.bad += r.bad;
      t.tsMax = Math.max(t.tsMax, r.tsMax);
      for (int k = 0; k < r.sampled.length; k++) {
        t.samples.putIfAbsent(r.sampled[k], r.samples[k]);
      }
      if (r.shapes == null) {
        t.shapes = null;
      } else if (t.shapes != null) {
        for (long s : r.shapes) {
          t.shapes.add(s);
        }
        if (t.shapes.size() > maxShapes) {
          t.shapes = null;
        }
      }
    }
  }

  /**
   * Writes the rows of every added table from one frame in one Spark job; nothing is committed.
   *
   * @param frame columns {@code idx} (int: the position in {@code order} of the row's table; null
   *     or out of range: the row is only counted, see {@link #unrouted}), {@code good} (boolean),
   *     {@code ts} (long), {@code shape} (long, nullable), then the row structs: tables with the
   *     same columns share one (only the row's own table's struct is read)
   * @param order the tables (namespace.table, each added with {@link #addTarget})
   * @param structOf for each table of {@code order}, which row struct holds its rows (0 = the
   *     frame's fifth column)
   * @param maxShapes how many distinct shapes a table may report before it reports "too many"
   */
  public synchronized void runRouted(Dataset<Row> frame, String[] order, int[] structOf, int maxShapes) {
    runRouted(frame, order, structOf, maxShapes, -1);
  }

  /**
   * {@link #runRouted(Dataset, String[], int[], int)}, keeping per table the first value of each
   * shape a task meets (column {@code sampleColumn} of the frame, binary; at most {@link
   * #SAMPLE_BYTES} per table and task): what schema inference needs to tell whether the table's
   * schema fits a new shape, without reading the batch again ({@link #samples}).
   */
  public synchronized void runRouted(
      Dataset<Row> frame, String[] order, int[] structOf, int maxShapes, int sampleColumn) {
    if (ran) {
      throw new IllegalStateException("the job already ran");
    }
    ran = true;
    StructType schema = frame.schema();
    int n = order.length;
    if (n != targets.size() || structOf.length != n) {
      throw new IllegalArgumentException(
          "order names " + n + " tables and structOf " + structOf.length + ", but " + targets.size()
              + " were added");
    }
    if (schema.fields().length < 5
        || !(schema.fields()[0].dataType() instanceof IntegerType$)
        || !(schema.fields()[1].dataType() instanceof BooleanType$)
        || !(schema.fields()[2].dataType() instanceof LongType$)
        || !(schema.fields()[3].dataType() instanceof LongType$)) {
      throw new IllegalArgumentException(
          "frame must have columns (idx int, good boolean, ts long, shape long, row structs), not "
              + schema.simpleString());
    }
    List<Target> ordered = new ArrayList<>();
    int[] columns = new int[n];
    for (int i = 0; i < n; i++) {
      Target t = target(order[i]);
      columns[i] = 4 + structOf[i];
      if (columns[i] < 4
          || columns[i] >= schema.fields().length
          || !(schema.fields()[columns[i]].dataType() instanceof StructType)
          || ((StructType) schema.fields()[columns[i]].dataType()).fields().length != t.width) {
        throw new IllegalArgumentException("column " + columns[i] + " does not hold " + t.name + "'s rows");
      }
      ordered.add(t);
    }
    targets.clear();
    targets.addAll(ordered);
    JavaRDD<InternalRow> rdd =
        JavaRDD.fromRDD(frame.queryExecution().toRdd(), ClassTag$.MODULE$.apply(InternalRow.class));
    int parts = rdd.getNumPartitions();
    DataWriterFactory[] factories = new DataWriterFactory[n];
    int[] widths = new int[n];
    for (int i = 0; i < n; i++) {
      factories[i] = targets.get(i).batchWrite.createBatchWriterFactory(new PhysicalWriteInfoImpl(parts));
      widths[i] = targets.get(i).width;
    }
    List<TaskResult> results;
    try {
      results =
          rdd.mapPartitionsWithIndex(
                  (index, rows) ->
                      writeRouted(index, rows, factories, columns, widths, maxShapes, sampleColumn),
                  false)
              .collect();
    } catch (RuntimeException e) {
      abortAll();
      throw e;
    }
    collectResults(results, maxShapes);
  }

  @SuppressWarnings("unchecked")
  private static Iterator<TaskResult> writeRouted(
      int index,
      Iterator<InternalRow> rows,
      DataWriterFactory[] factories,
      int[] columns,
      int[] widths,
      int maxShapes,
      int sampleColumn) throws Exception {
    int n = factories.length;
    DataWriter<InternalRow>[] writers = new DataWriter[n];
    long[] good = new long[n];
    long[] bad = new long[n];
    long[] tsMax = new long[n];
    java.util.Arrays.fill(tsMax, Long.MIN_VALUE);
    boolean[] seen = new boolean[n];
    HashSet<Long>[] shapes = new HashSet[n];
    Map<Long, byte[]>[] samples = new Map[n];
    long[] sampleBytes = new long[n];
    for (int i = 0; i < n; i++) {
      shapes[i] = new HashSet<>();
      samples[i] = new java.util.HashMap<>();
    }
    long other = 0;
    long attempt = TaskContext.get().taskAttemptId();
    try {
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        int t = row.isNullAt(0) ? -1 : row.getInt(0);
        if (t < 0 || t >= n) {
          other++;
          continue;
        }
        seen[t] = true;
        if (!row.isNullAt(2)) {
          tsMax[t] = Math.max(tsMax[t], row.getLong(2));
        }
        boolean ok = !row.isNullAt(1) && row.getBoolean(1);
        // A record that failed its parse with an unknown shape (malformed JSON, trailing text) is a
        // dead letter whatever the table's schema: it does not stop the table's shapes settling.
        if (!row.isNullAt(3) && (ok || row.getLong(3) != JsonScan.UNKNOWN) && shapes[t] != null
            && shapes[t].add(row.getLong(3))) {
          if (shapes[t].size() > maxShapes) {
            shapes[t] = null;
          } else if (sampleColumn >= 0 && !row.isNullAt(sampleColumn)) {
            byte[] value = row.getBinary(sampleColumn);
            if (sampleBytes[t] + value.length <= SAMPLE_BYTES) {
              samples[t].put(row.getLong(3), value);
              sampleBytes[t] += value.length;
            }
          }
        }
        if (ok) {
          if (writers[t] == null) {
            writers[t] = factories[t].createWriter(index, attempt);
          }
          writers[t].write(row.getStruct(columns[t], widths[t]));
          good[t]++;
        } else {
          bad[t]++;
        }
      }
      List<TaskResult> out = new ArrayList<>();
      for (int t = 0; t < n; t++) {
        if (!seen[t]) {
          continue;
        }
        WriterCommitMessage message = writers[t] == null ? null : writers[t].commit();
        long[] s = null;
        if (shapes[t] != null) {
          s = new long[shapes[t].size()];
          int k = 0;
          for (long v : shapes[t]) {
            s[k++] = v;
          }
        }
        long[] sampled = new long[samples[t].size()];
        byte[][] values = new byte[sampled.length][];
        int k = 0;
        for (Map.Entry<Long, byte[]> e : samples[t].entrySet()) {
          sampled[k] = e.getKey();
          values[k++] = e.getValue();
        }
        out.add(new TaskResult(t, message, good[t], bad[t], tsMax[t], s, sampled, values));
      }
      out.add(new TaskResult(-1, null, other, 0, Long.MIN_VALUE, new long[0]));
      return out.iterator();
    } catch (Throwable e) {
      for (DataWriter<InternalRow> w : writers) {
        if (w != null) {
          try {
            w.abort();
          } catch (Throwable suppressed) {
            e.addSuppressed(suppressed);
          }
        }
      }
      throw e;
    } finally {
      for (DataWriter<InternalRow> w : writers) {
        if (w != null) {
          w.close();
        }
      }
    }
  }

  /**
   * The routed job's sample of {@code table}'s records of each of {@code wanted} shapes, as UTF-8
   * text; null when one of them has none (its values passed {@link #SAMPLE_BYTES}).
   */
  public String[] samples(String table, long[] wanted) {
    Map<Long, byte[]> s = target(table).samples;
    String[] out = new String[wanted.length];
    for (int i = 0; i < wanted.length; i++) {
      byte[] v = s.get(wanted[i]);
      if (v == null) {
        return null;
      }
      out[i] = new String(v, java.nio.charset.StandardCharsets.UTF_8);
    }
    return out;
  }

  /** Rows of the routed job whose {@code idx} named no table of it. */
  public long unrouted() {
    return unrouted;
  }

  /** The distinct shapes of {@code table}'s rows in the routed job; null when there were too many. */
  public long[] shapes(String table) {
    HashSet<Long> s = target(table).shapes;
    if (s == null) {
      return null;
    }
    long[] out = new long[s.size()];
    int k = 0;
    for (long v : s) {
      out[k++] = v;
    }
    return out;
  }

  /** Tables added so far (namespace.table), in the order they were added. */
  public synchronized String[] names() {
    String[] out = new String[targets.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = targets.get(i).name;
    }
    return out;
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
      return Collections.singletonList(new TaskResult(t, message, good, bad, tsMax, new long[0])).iterator();
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

  /**
   * The Iceberg data files written for {@code table}, for a commit the caller makes itself (icetide's
   * fenced append); the table is done here. {@link #discard} drops them if that commit is refused.
   */
  public Object[] takeFiles(String table) {
    Target t = target(table);
    synchronized (t) {
      if (!ran || t.done) {
        throw new IllegalStateException("table " + t.name + " is not ready to commit");
      }
      t.done = true;
    }
    List<Object> out = new ArrayList<>();
    for (WriterCommitMessage m : t.messages) {
      out.addAll(fileObjects(m));
    }
    return out.toArray();
  }

  /** Deletes the files {@link #takeFiles} returned, after the caller's commit was refused. */
  public void discard(String table) {
    deleteFiles(target(table));
  }

  /**
   * Drops {@code table}'s written files uncommitted. Iceberg's abort deletes files only after a
   * failed commit, so the files the tasks reported are deleted here; a file that cannot be is left
   * to orphan cleanup.
   */
  public void abort(String table) {
    Target t = target(table);
    synchronized (t) {
      if (t.done) {
        return;
      }
      t.done = true;
    }
    t.batchWrite.abort(t.messages.toArray(new WriterCommitMessage[0]));
    deleteFiles(t);
  }

  private void deleteFiles(Target t) {
    org.apache.hadoop.conf.Configuration conf = spark.sessionState().newHadoopConf();
    for (WriterCommitMessage m : t.messages) {
      for (String path : filesOf(m)) {
        try {
          org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path(path);
          p.getFileSystem(conf).delete(p, false);
        } catch (Exception e) {
          // unreferenced either way: orphan cleanup removes it
        }
      }
    }
  }

  /** The data files (Iceberg {@code DataFile}s) in an Iceberg task's commit message (none if unknown). */
  static List<Object> fileObjects(WriterCommitMessage message) {
    List<Object> out = new ArrayList<>();
    if (message == null) {
      return out;
    }
    try {
      java.lang.reflect.Method files = message.getClass().getDeclaredMethod("files");
      files.setAccessible(true);
      Object[] found = (Object[]) files.invoke(message);
      for (Object f : found == null ? new Object[0] : found) {
        out.add(f);
      }
    } catch (ReflectiveOperationException | RuntimeException e) {
      // not an Iceberg message
    }
    return out;
  }

  /** The locations of the data files in an Iceberg task's commit message (none if unknown). */
  static List<String> filesOf(WriterCommitMessage message) {
    List<String> out = new ArrayList<>();
    for (Object f : fileObjects(message)) {
      try {
        java.lang.reflect.Method location = f.getClass().getMethod("location");
        location.setAccessible(true);
        out.add(String.valueOf(location.invoke(f)));
      } catch (ReflectiveOperationException | RuntimeException e) {
        // not an Iceberg file: nothing to delete
      }
    }
    return out;
  }
}
