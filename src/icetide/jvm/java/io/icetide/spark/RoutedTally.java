package io.icetide.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * One routed write task's state: a writer per table it met (opened on the table's first good row,
 * so no empty files), and per table the good and bad rows, the largest timestamp, the record shapes
 * (at most {@code maxShapes}, else "too many") and the first value of each new shape (at most
 * {@link MultiTableWrite#SAMPLE_BYTES} per table).
 */
final class RoutedTally {
  private final int index;
  private final long attempt;
  private final DataWriterFactory[] factories;
  private final int maxShapes;
  private final DataWriter<InternalRow>[] writers;
  private final long[] good;
  private final long[] bad;
  private final long[] tsMax;
  private final boolean[] seen;
  private final HashSet<Long>[] shapes;
  private final Map<Long, byte[]>[] samples;
  private final long[] sampleBytes;
  private long other = 0;

  @SuppressWarnings("unchecked")
  RoutedTally(int index, DataWriterFactory[] factories, int maxShapes) {
    int n = factories.length;
    this.index = index;
    this.attempt = TaskContext.get().taskAttemptId();
    this.factories = factories;
    this.maxShapes = maxShapes;
    this.writers = new DataWriter[n];
    this.good = new long[n];
    this.bad = new long[n];
    this.tsMax = new long[n];
    Arrays.fill(tsMax, Long.MIN_VALUE);
    this.seen = new boolean[n];
    this.shapes = new HashSet[n];
    this.samples = new Map[n];
    this.sampleBytes = new long[n];
    for (int i = 0; i < n; i++) {
      shapes[i] = new HashSet<>();
      samples[i] = new HashMap<>();
    }
  }

  /** The table index a row names, or -1 (counted as naming no table here). */
  int target(boolean isNull, int idx) {
    if (isNull || idx < 0 || idx >= factories.length) {
      other++;
      return -1;
    }
    seen[idx] = true;
    return idx;
  }

  void ts(int t, long ts) {
    tsMax[t] = Math.max(tsMax[t], ts);
  }

  /** Records a row's shape; {@code value} (may be null) is kept when the shape is new and room is left. */
  void shape(int t, long shape, byte[] value) {
    if (shapes[t] != null && shapes[t].add(shape)) {
      if (shapes[t].size() > maxShapes) {
        shapes[t] = null;
      } else if (value != null && sampleBytes[t] + value.length <= MultiTableWrite.SAMPLE_BYTES) {
        samples[t].put(shape, value);
        sampleBytes[t] += value.length;
      }
    }
  }

  void write(int t, InternalRow row) throws java.io.IOException {
    if (writers[t] == null) {
      writers[t] = factories[t].createWriter(index, attempt);
    }
    writers[t].write(row);
    good[t]++;
  }

  void bad(int t) {
    bad[t]++;
  }

  /** Commits every writer; one result per table met, then one for the rows that named none. */
  List<TaskResult> finish() throws java.io.IOException {
    List<TaskResult> out = new ArrayList<>();
    for (int t = 0; t < factories.length; t++) {
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
    return out;
  }

  /** Aborts every open writer after {@code e}; their failures are added to it. */
  void abort(Throwable e) {
    for (DataWriter<InternalRow> w : writers) {
      if (w != null) {
        try {
          w.abort();
        } catch (Throwable suppressed) {
          e.addSuppressed(suppressed);
        }
      }
    }
  }

  void close() throws java.io.IOException {
    for (DataWriter<InternalRow> w : writers) {
      if (w != null) {
        w.close();
      }
    }
  }
}
