package io.icetide.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfoImpl;
import org.apache.spark.sql.types.StructType;
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
 * <p>Each frame has columns {@code good} (boolean: write the row or count it as bad), {@code ts}
 * (long, nullable: the maximum is reported), then exactly the table's columns, in order; the writer
 * is handed a view of them ({@link RowView}), no struct is built per row. A table whose write needs
 * a distribution or ordering (Spark would shuffle or sort) is refused by {@link #add}; the caller
 * writes it the usual way.
 *
 * <p>Routed mode ({@link #addTarget} then {@link #runRouted}): one frame holds the rows of every
 * table, and each task hands each row to the writer of the table its {@code idx} column names.
 * The batch is read once, with no cache and no scan per table; each task reports, per table, the
 * record shapes it saw (see {@link JsonScan}) and a value of each, so the caller can refuse to commit a table whose
 * records carry something its schema lacks, and how many rows named no table here.
 *
 * <p>Who does what: this class is the driver's job (the tables, in order; one Spark job; the
 * per-table results and commits). {@link WriteTargets} makes each table's connector write and
 * checks the frames; {@link WriteTasks} is the write task (one per partition); {@link Decoding}
 * and {@link JsonRowDecoder} decode a JSON record once in it; {@link Routing} names a record's
 * table; {@link TableWrite} holds one table's results and commits or drops its files.
 */
public final class MultiTableWrite {
  private final SparkSession spark;
  private final List<TableWrite> targets = new ArrayList<>();
  private final Map<String, TableWrite> byName = new java.util.HashMap<>();
  private volatile boolean ran = false;

  public MultiTableWrite(SparkSession spark) {
    this.spark = spark;
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
    checkNotRan();
    return register(WriteTargets.prepare(spark, catalog, namespace, table, WriteTargets.checkFrame(frame), frame, options, false));
  }

  /**
   * Adds a table to a routed job ({@link #runRouted}); {@code rowSchema} is the struct its rows
   * will have (the table's columns, in order).
   *
   * @return null when added, else why the table cannot be written here
   */
  public String addTarget(
      String catalog, String namespace, String table, StructType rowSchema, Map<String, String> options) {
    return addTarget(catalog, namespace, table, rowSchema, options, false);
  }

  /**
   * {@link #addTarget}; with {@code clustered}, a table whose write asks for a hash distribution
   * ({@code write.distribution-mode=hash}) is added too: the caller then hands {@link #runRouted} a
   * frame whose rows are clustered by {@link #clustering} (a shuffle), as Spark's own write would.
   */
  public String addTarget(
      String catalog, String namespace, String table, StructType rowSchema, Map<String, String> options,
      boolean clustered) {
    checkNotRan();
    return register(WriteTargets.prepare(spark, catalog, namespace, table, rowSchema, null, options, clustered));
  }

  /**
   * How table {@code name}'s rows must be clustered before its writer sees them: JSON {@code
   * [{"transform", "args", "column"}]} (Iceberg's partition transforms, by the catalog's function
   * of that name, over the row's column at that index), or null when the table asks for none.
   */
  public String clustering(String name) {
    return target(name).clustering;
  }

  private void checkNotRan() {
    if (ran) {
      throw new IllegalStateException("the job already ran");
    }
  }

  private String register(Object made) {
    if (made instanceof String) {
      return (String) made;
    }
    TableWrite target = (TableWrite) made;
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

  /** Writes every added table's files in one Spark job; nothing is committed yet. */
  public synchronized void run() {
    if (ran) {
      throw new IllegalStateException("the job already ran");
    }
    ran = true;
    if (targets.isEmpty()) {
      return;
    }
    for (TableWrite t : targets) {
      if (t.frame == null) {
        throw new IllegalStateException(t.name + " was added for a routed job: use runRouted");
      }
    }
    int n = targets.size();
    int[] starts = new int[n + 1];
    DataWriterFactory[] factories = new DataWriterFactory[n];
    org.apache.spark.sql.types.DataType[][] types = new org.apache.spark.sql.types.DataType[n][];
    @SuppressWarnings("unchecked")
    JavaRDD<InternalRow>[] rdds = new JavaRDD[n];
    for (int i = 0; i < n; i++) {
      TableWrite t = targets.get(i);
      rdds[i] = rows(t.frame);
      int parts = rdds[i].getNumPartitions();
      starts[i + 1] = starts[i] + parts;
      factories[i] = t.batchWrite.createBatchWriterFactory(new PhysicalWriteInfoImpl(parts));
      types[i] = new org.apache.spark.sql.types.DataType[t.width];
      for (int c = 0; c < t.width; c++) {
        types[i][c] = t.rowSchema.fields()[c].dataType();
      }
    }
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    JavaRDD<InternalRow> all = jsc.union(rdds);
    List<TaskResult> results = collect(all.mapPartitionsWithIndex(
        (index, rows) -> WriteTasks.writePartition(index, rows, starts, factories, types), false));
    collectResults(results, Integer.MAX_VALUE);
  }

  private void collectResults(List<TaskResult> results, int maxShapes) {
    for (TaskResult r : results) {
      if (r.target < 0) {
        unrouted += r.good;
      } else {
        targets.get(r.target).add(r, maxShapes);
      }
    }
  }

  /**
   * Writes the rows of every added table from one frame in one Spark job; nothing is committed.
   *
   * @param frame columns {@code idx} (int: the position in {@code order} of the row's table; null
   *     or out of range: the row is only counted, see {@link #unrouted}), {@code good} (boolean),
   *     {@code ts} (long), {@code shape} (long, nullable), then the tables' columns side by side:
   *     tables with the same columns share them (only the row's own table's columns are read)
   * @param order the tables (namespace.table, each added with {@link #addTarget})
   * @param starts for each table of {@code order}, the frame column its first column is; its row is
   *     the next {@code width} columns, of the types of the row schema it was added with
   * @param maxShapes how many distinct shapes a table may report before it reports "too many"
   * @param sampleColumn -1, or keep per table the first value of each shape a task meets (column
   *     {@code sampleColumn} of the frame, binary; at most {@link #SAMPLE_BYTES} per table and
   *     task): what schema inference needs to tell whether the table's schema fits a new shape,
   *     without reading the batch again ({@link #samples})
   */
  public synchronized void runRouted(
      Dataset<Row> frame, String[] order, int[] starts, int maxShapes, int sampleColumn) {
    if (ran) {
      throw new IllegalStateException("the job already ran");
    }
    ran = true;
    StructType schema = frame.schema();
    int n = order.length;
    if (n != targets.size() || starts.length != n) {
      throw new IllegalArgumentException(
          "order names " + n + " tables and starts " + starts.length + ", but " + targets.size()
              + " were added");
    }
    StructType[] rowSchemas = new StructType[n];
    for (int i = 0; i < n; i++) {
      rowSchemas[i] = target(order[i]).rowSchema;
    }
    org.apache.spark.sql.types.DataType[][] slices = WriteTargets.routedSlices(schema, order, starts, rowSchemas);
    int[] at = starts.clone();
    reorder(order);
    JavaRDD<InternalRow> rdd = rows(frame);
    DataWriterFactory[] factories = factories(rdd.getNumPartitions());
    List<TaskResult> results = collect(rdd.mapPartitionsWithIndex(
        (index, rows) -> WriteTasks.writeRouted(index, rows, factories, at, slices, maxShapes, sampleColumn),
        false));
    collectResults(results, maxShapes);
  }

  /**
   * Writes the rows of every added table in one Spark job, decoding each JSON record value in the
   * write task, once, for its checks, shape and row ({@link JsonRowDecoder}); nothing is committed.
   * What {@link #runRouted} reports (counts, shapes, samples) is reported the same way.
   *
   * @param frame columns {@code idx} (int: the position in {@code order} of the record's table;
   *     null or out of range: only counted, see {@link #unrouted}), {@code ts} (long), {@code value}
   *     (binary), then any columns the tables take from the frame (Kafka metadata)
   * @param order the tables (namespace.table, each added with {@link #addTarget})
   * @param groupOf for each table of {@code order}, its record type in {@code types} (tables of one
   *     type share a decoder)
   * @param types the record types, as JSON (what {@code from_json} would be given)
   * @param layout for each table of {@code order}, concatenated: for each of its columns, the field
   *     of its record type it holds (&gt;= 0), the frame column {@code k} it holds ({@code -1 - k}),
   *     or {@link Integer#MIN_VALUE} (null)
   * @param sample keep the first value of each new shape per table and task ({@link #samples})
   * @param routePath null, or route each record by the JSON field at this path, read by the decoder
   *     ({@link Routing}: one record type; the frame's {@code idx} is ignored and it has {@code
   *     _kafka_topic}); then {@code namespacePieces}, {@code tablePieces}: the table template;
   *     {@code routeTables}: per table of {@code order}, its name when routing may name it, else
   *     null; {@code fallback}: Spark's routing expression over the frame's columns
   */
  public synchronized void runDecoded(
      Dataset<Row> frame,
      String[] order,
      int[] groupOf,
      String[] types,
      int[] layout,
      String timeZone,
      int maxDepth,
      int maxFields,
      String[] reserved,
      int maxValueBytes,
      int maxShapes,
      boolean sample,
      String[] routePath,
      String[] namespacePieces,
      String[] tablePieces,
      String[] routeTables,
      org.apache.spark.sql.Column fallback) {
    if (ran) {
      throw new IllegalStateException("the job already ran");
    }
    ran = true;
    StructType schema = frame.schema();
    int n = order.length;
    if (n != targets.size()) {
      throw new IllegalArgumentException("order names " + n + " tables, but " + targets.size() + " were added");
    }
    int[] widths = new int[n];
    for (int i = 0; i < n; i++) {
      widths[i] = target(order[i]).width;
    }
    Decoding decoding = Decoding.of(schema, order, widths, groupOf, types, layout, timeZone,
        spark.sessionState().conf().columnNameOfCorruptRecord(), maxDepth, maxFields, reserved, maxValueBytes, sample);
    if (routePath != null) {
      if (types.length != 1 || routeTables.length != n) {
        throw new IllegalArgumentException("routing by the decoder needs one record type and a name per table");
      }
      decoding.route = new Routing(routePath.clone(), namespacePieces.clone(), tablePieces.clone(),
          routeTables.clone(), schema.fieldIndex("_kafka_topic"), Routing.bind(frame, fallback));
    }
    reorder(order);
    JavaRDD<InternalRow> rdd = rows(frame);
    DataWriterFactory[] factories = factories(rdd.getNumPartitions());
    List<TaskResult> results = collect(rdd.mapPartitionsWithIndex(
        (index, rows) -> WriteTasks.writeDecoded(index, rows, factories, decoding, maxShapes), false));
    collectResults(results, maxShapes);
  }

  /** Puts the added tables in {@code order} (each must have been added). */
  private void reorder(String[] order) {
    List<TableWrite> ordered = new ArrayList<>();
    for (String name : order) {
      ordered.add(target(name));
    }
    targets.clear();
    targets.addAll(ordered);
  }

  private DataWriterFactory[] factories(int parts) {
    DataWriterFactory[] out = new DataWriterFactory[targets.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = targets.get(i).batchWrite.createBatchWriterFactory(new PhysicalWriteInfoImpl(parts));
    }
    return out;
  }

  /**
   * The routed job's sample of {@code table}'s records of each of {@code wanted} shapes, as UTF-8
   * text; null when one of them has none (its values passed {@link #SAMPLE_BYTES}).
   */
  public String[] samples(String table, long[] wanted) {
    return target(table).samplesOf(wanted);
  }

  /** Rows of the routed job whose {@code idx} named no table of it. */
  public long unrouted() {
    return unrouted;
  }

  /** The distinct shapes of {@code table}'s rows in the routed job; null when there were too many. */
  public long[] shapes(String table) {
    return target(table).shapeArray();
  }

  /** Tables added so far (namespace.table), in the order they were added. */
  public synchronized String[] names() {
    String[] out = new String[targets.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = targets.get(i).name;
    }
    return out;
  }

  /** The tasks' reports; on a failure every table's files are dropped first. */
  private List<TaskResult> collect(JavaRDD<TaskResult> tasks) {
    try {
      return tasks.collect();
    } catch (RuntimeException e) {
      abortAll();
      throw e;
    }
  }

  private static JavaRDD<InternalRow> rows(Dataset<Row> frame) {
    return JavaRDD.fromRDD(frame.queryExecution().toRdd(), ClassTag$.MODULE$.apply(InternalRow.class));
  }

  private void abortAll() {
    for (TableWrite t : targets) {
      abort(t.name);
    }
  }

  private TableWrite target(String name) {
    TableWrite t = byName.get(name);
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
    target(table).commit(ran);
  }

  /**
   * The Iceberg data files written for {@code table}, for a commit the caller makes itself (icetide's
   * fenced append); the table is done here. {@link #discard} drops them if that commit is refused.
   */
  public Object[] takeFiles(String table) {
    return target(table).takeFiles(ran);
  }

  /** Deletes the files {@link #takeFiles} returned, after the caller's commit was refused. */
  public void discard(String table) {
    target(table).discard(spark.sessionState().newHadoopConf());
  }

  /**
   * Drops {@code table}'s written files uncommitted; a file that cannot be deleted is left to
   * orphan cleanup.
   */
  public void abort(String table) {
    target(table).abort(spark.sessionState().newHadoopConf());
  }
}
