package io.icetide.spark;

import java.io.Serializable;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/** The write tasks of {@link MultiTableWrite}: what runs on the executors, one call per partition. */
final class WriteTasks {
  private WriteTasks() {}

  /**
   * One partition of one table's frame (good, ts, then the table's columns, of {@code types[t]}):
   * {@link MultiTableWrite#run}; the writer is handed a view of the frame's row, no copy.
   */
  static Iterator<TaskResult> writePartition(
      int index, Iterator<InternalRow> rows, int[] starts, DataWriterFactory[] factories, DataType[][] types)
      throws Exception {
    int t = 0;
    while (starts[t + 1] <= index) {
      t++;
    }
    RowView view = RowView.slice(2, types[t]);
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
          writer.write(view.of(null, row));
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

  /**
   * One partition of a routed frame (idx, good, ts, shape, then the tables' columns side by side):
   * {@link MultiTableWrite#runRouted}; table {@code t}'s row is the slice of {@code slices[t]}'s
   * types from column {@code starts[t]}, handed to its writer without a copy.
   */
  static Iterator<TaskResult> writeRouted(
      int index,
      Iterator<InternalRow> rows,
      DataWriterFactory[] factories,
      int[] starts,
      DataType[][] slices,
      int maxShapes,
      int sampleColumn) throws Exception {
    RoutedTally tally = new RoutedTally(index, factories, maxShapes);
    RowView[] views = new RowView[starts.length];
    try {
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        int t = tally.target(row.isNullAt(0), row.isNullAt(0) ? -1 : row.getInt(0));
        if (t < 0) {
          continue;
        }
        if (!row.isNullAt(2)) {
          tally.ts(t, row.getLong(2));
        }
        boolean ok = !row.isNullAt(1) && row.getBoolean(1);
        // A record that failed its parse with an unknown shape (malformed JSON, trailing text) is a
        // dead letter whatever the table's schema: it does not stop the table's shapes settling.
        if (!row.isNullAt(3) && (ok || row.getLong(3) != JsonScan.UNKNOWN)) {
          byte[] value = sampleColumn >= 0 && !row.isNullAt(sampleColumn) ? row.getBinary(sampleColumn) : null;
          tally.shape(t, row.getLong(3), value);
        }
        if (ok) {
          RowView view = views[t] == null ? (views[t] = RowView.slice(starts[t], slices[t])) : views[t];
          tally.write(t, view.of(null, row));
        } else {
          tally.bad(t);
        }
      }
      return tally.finish().iterator();
    } catch (Throwable e) {
      tally.abort(e);
      throw e;
    } finally {
      tally.close();
    }
  }

  /**
   * One partition of a frame (idx, ts, value, then the frame columns tables take) whose values are
   * decoded here, each read once for its checks, shape and row ({@link JsonRowDecoder}).
   */
  static Iterator<TaskResult> writeDecoded(
      int index, Iterator<InternalRow> rows, DataWriterFactory[] factories, Decoding d, int maxShapes)
      throws Exception {
    RoutedTally tally = new RoutedTally(index, factories, maxShapes);
    JsonRowDecoder[] decoders = new JsonRowDecoder[d.types.length];
    RowView[] views = new RowView[d.layouts.length];
    try {
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        byte[] value = row.isNullAt(2) ? null : row.getBinary(2);
        int t;
        int g;
        JsonRowDecoder decoder;
        if (d.route != null) { // one record type: decode, then route by what the decoder read
          g = 0;
          decoder = decoders[0] == null ? (decoders[0] = d.decoder(0)) : decoders[0];
          decoder.decode(value);
          int at = d.route.target(decoder, row);
          t = tally.target(at < 0, at);
        } else {
          t = tally.target(row.isNullAt(0), row.isNullAt(0) ? -1 : row.getInt(0));
          if (t < 0) {
            continue;
          }
          g = d.groupOf[t];
          decoder = decoders[g] == null ? (decoders[g] = d.decoder(g)) : decoders[g];
          decoder.decode(value);
        }
        if (t < 0) {
          continue;
        }
        if (!row.isNullAt(1)) {
          tally.ts(t, row.getLong(1));
        }

        if (decoder.hasShape && (decoder.good || decoder.shape != JsonScan.UNKNOWN)) {
          tally.shape(t, decoder.shape, d.sample ? value : null);
        }
        if (!decoder.good) {
          tally.bad(t);
          continue;
        }
        RowView view = views[t] == null ? (views[t] = new RowView(d.layouts[t], d.columnTypes(t))) : views[t];
        tally.write(t, view.of(decoder.row, row));
      }
      return tally.finish().iterator();
    } catch (Throwable e) {
      tally.abort(e);
      throw e;
    } finally {
      tally.close();
    }
  }

}
