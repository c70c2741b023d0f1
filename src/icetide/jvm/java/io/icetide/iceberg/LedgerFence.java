package io.icetide.iceberg;

import java.util.Map;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.SnapshotAncestryValidator;
import org.apache.iceberg.Table;
import org.apache.iceberg.exceptions.ValidationException;

/**
 * Fencing for icetide's appends: a commit lands only if the table's ledger is still the one the
 * batch started from.
 *
 * <p>Every icetide commit tags its snapshot with {@code icetide.pipeline}, {@code icetide.run} and
 * {@code icetide.batch}. The writer remembers the newest tagged snapshot of its pipeline that it
 * saw (or its own last commit). Iceberg runs {@link #validate} inside the commit, on the table's
 * refreshed metadata, and the catalog's compare-and-swap makes it atomic with the commit: if any
 * other process of the same pipeline (a second run with its own checkpoint, a paused zombie that
 * woke up) committed to this table since, the newest tagged ancestor differs and the commit fails
 * with {@link #MARKER} in its message. Compactions and other pipelines' commits are untagged for
 * this pipeline and do not trip it.
 */
public final class LedgerFence implements SnapshotAncestryValidator {
  /** Text in the failure message by which icetide recognises a fenced commit. */
  public static final String MARKER = "icetide-fence:";

  private final String pipeline;
  private final String run; // null: no tagged snapshot of the pipeline is expected
  private final String batch;
  private volatile String found = "nothing";

  public LedgerFence(String pipeline, String run, long batch) {
    this.pipeline = pipeline;
    this.run = run;
    this.batch = String.valueOf(batch);
  }

  @Override
  public boolean validate(Iterable<Snapshot> ancestors) {
    for (Snapshot s : ancestors) {
      Map<String, String> summary = s.summary();
      if (summary != null && pipeline.equals(summary.get("icetide.pipeline"))) {
        String r = summary.get("icetide.run");
        String b = summary.get("icetide.batch");
        found = "run " + r + " batch " + b + " (snapshot " + s.snapshotId() + ")";
        return run != null && run.equals(r) && batch.equals(b);
      }
    }
    found = "no commit of the pipeline";
    return run == null;
  }

  @Override
  public String errorMessage() {
    String expected = run == null ? "no commit of the pipeline" : "run " + run + " batch " + batch;
    return MARKER + " pipeline " + pipeline + " expected its newest commit to be " + expected + ", found "
        + found + ": another process of the pipeline committed to this table";
  }

  /**
   * Appends {@code files} (Iceberg {@link DataFile}s) with the snapshot {@code properties}, fenced.
   *
   * @return null once committed, else the fence's message (nothing was committed)
   */
  public static String append(
      Table table, Object[] files, Map<String, String> properties, String pipeline, String run, long batch) {
    AppendFiles append = table.newAppend();
    for (Object f : files) {
      append.appendFile((DataFile) f);
    }
    for (Map.Entry<String, String> e : properties.entrySet()) {
      append.set(e.getKey(), e.getValue());
    }
    LedgerFence fence = new LedgerFence(pipeline, run, batch);
    append.validateWith(fence);
    try {
      append.commit();
      return null;
    } catch (ValidationException e) {
      String message = String.valueOf(e.getMessage());
      if (message.contains(MARKER)) {
        return message;
      }
      throw e;
    }
  }
}
