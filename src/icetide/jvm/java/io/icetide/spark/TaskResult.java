package io.icetide.spark;

import java.io.Serializable;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/** What one write task reports back to the driver, per table it met. */
final class TaskResult implements Serializable {
  private static final long serialVersionUID = 1L;
  final int target; // -1: the rows that named no table here
  final WriterCommitMessage message;
  final long good;
  final long bad;
  final long tsMax;
  final long[] shapes; // null: too many
  final long[] sampled; // shapes with a value in samples
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
