package io.icetide.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * One table's part of a {@link MultiTableWrite}: its connector write, what the tasks reported for
 * it, and its one ending. Invariant: a table ends exactly once: committed ({@link #commit}), handed
 * to the caller's own commit ({@link #takeFiles}), or aborted with its files deleted ({@link #abort}).
 */
final class TableWrite {
  final String name;
  final Dataset<Row> frame; // null in routed mode
  final int width;
  final org.apache.spark.sql.types.StructType rowSchema; // the table's columns, as its rows hold them
  final BatchWrite batchWrite;
  /** How the table asks its rows to be clustered ({@link WriteTargets#clustering}), or null: no ask. */
  final String clustering;
  final List<WriterCommitMessage> messages = new ArrayList<>();
  long good;
  long bad;
  long tsMax = Long.MIN_VALUE;
  HashSet<Long> shapes = new HashSet<>(); // null once more than maxShapes were seen
  final Map<Long, byte[]> samples = new HashMap<>(); // shape → the first value of it seen
  private boolean done;

  TableWrite(String name, Dataset<Row> frame, org.apache.spark.sql.types.StructType rowSchema, BatchWrite batchWrite,
      String clustering) {
    this.name = name;
    this.clustering = clustering;
    this.frame = frame;
    this.rowSchema = rowSchema;
    this.width = rowSchema.fields().length;
    this.batchWrite = batchWrite;
  }

  /** Adds one task's report; more than {@code maxShapes} shapes make them "too many" (null). */
  void add(TaskResult r, int maxShapes) {
    if (r.message != null) {
      messages.add(r.message);
    }
    good += r.good;
    bad += r.bad;
    tsMax = Math.max(tsMax, r.tsMax);
    for (int k = 0; k < r.sampled.length; k++) {
      samples.putIfAbsent(r.sampled[k], r.samples[k]);
    }
    if (r.shapes == null) {
      shapes = null;
    } else if (shapes != null) {
      for (long s : r.shapes) {
        shapes.add(s);
      }
      if (shapes.size() > maxShapes) {
        shapes = null;
      }
    }
  }

  private synchronized void end(boolean ran) {
    if (!ran || done) {
      throw new IllegalStateException("table " + name + " is not ready to commit");
    }
    done = true;
  }

  /** Commits the files: one snapshot, even when no row was written. */
  void commit(boolean ran) {
    end(ran);
    try {
      batchWrite.commit(messages.toArray(new WriterCommitMessage[0]));
    } catch (RuntimeException e) {
      batchWrite.abort(messages.toArray(new WriterCommitMessage[0]));
      throw e;
    }
  }

  /** The Iceberg data files, for a commit the caller makes itself. */
  Object[] takeFiles(boolean ran) {
    end(ran);
    List<Object> out = new ArrayList<>();
    for (WriterCommitMessage m : messages) {
      out.addAll(WrittenFiles.fileObjects(m));
    }
    return out.toArray();
  }

  /** Drops the files uncommitted (Iceberg's abort deletes files only after a failed commit). */
  void abort(org.apache.hadoop.conf.Configuration conf) {
    synchronized (this) {
      if (done) {
        return;
      }
      done = true;
    }
    batchWrite.abort(messages.toArray(new WriterCommitMessage[0]));
    WrittenFiles.delete(conf, messages);
  }

  /** Deletes the files {@link #takeFiles} returned, after the caller's commit was refused. */
  void discard(org.apache.hadoop.conf.Configuration conf) {
    WrittenFiles.delete(conf, messages);
  }

  /** The sample of each of {@code wanted} shapes as UTF-8 text; null when one of them has none. */
  String[] samplesOf(long[] wanted) {
    String[] out = new String[wanted.length];
    for (int i = 0; i < wanted.length; i++) {
      byte[] v = samples.get(wanted[i]);
      if (v == null) {
        return null;
      }
      out[i] = new String(v, java.nio.charset.StandardCharsets.UTF_8);
    }
    return out;
  }

  /** The distinct shapes seen; null when there were too many. */
  long[] shapeArray() {
    HashSet<Long> s = shapes;
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
}
