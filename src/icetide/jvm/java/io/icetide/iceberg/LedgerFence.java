package io.icetide.iceberg;

import java.util.Map;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.ManageSnapshots;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.SnapshotAncestryValidator;
import org.apache.iceberg.SnapshotRef;
import org.apache.iceberg.SnapshotUpdate;
import org.apache.iceberg.Table;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.util.ContentFileUtil;
import org.apache.iceberg.util.SnapshotUtil;

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
 *
 * <p>When snapshot expiry removed every tagged snapshot of the pipeline (another pipeline's commits
 * to a shared table pushed them out), the mirrored ledger, the table property {@code
 * icetide.watermark.<pipeline>} that maintenance sets before it expires, stands for the newest one.
 *
 * <p>Writes Spark commits itself (MERGEs of CDC tables, appends the multi-table writer refuses) are
 * fenced by {@link #stage} and {@link #publish}: Spark commits to a branch made at main's head after
 * the fence validated that head; main is then fast-forwarded to the branch while main's head is
 * still the branch's base, or the branch's one snapshot is replayed onto main's new head with the
 * fence validated again inside that commit. So such a write lands only where the fence approves.
 */
public final class LedgerFence implements SnapshotAncestryValidator {
  /** Text in the failure message by which icetide recognises a fenced commit. */
  public static final String MARKER = "icetide-fence:";

  private final String pipeline;
  private final String run; // null: no tagged snapshot of the pipeline is expected
  private final String batch;
  private volatile String found = "nothing";

  private final Table table; // for the mirrored ledger; may be null

  public LedgerFence(String pipeline, String run, long batch, Table table) {
    this.pipeline = pipeline;
    this.run = run;
    this.batch = String.valueOf(batch);
    this.table = table;
  }

  public LedgerFence(String pipeline, String run, long batch) {
    this(pipeline, run, batch, null);
  }

  /** The mirrored ledger's run and batch ({@code null} if there is none or it is unreadable). */
  private String[] mirrored() {
    if (table == null) {
      return null;
    }
    String value = table.properties().get("icetide.watermark." + pipeline);
    if (value == null) {
      return null;
    }
    java.util.regex.Matcher r = java.util.regex.Pattern.compile("\"run\":\"([^\"]*)\"").matcher(value);
    java.util.regex.Matcher b = java.util.regex.Pattern.compile("\"batch\":(-?[0-9]+)").matcher(value);
    return r.find() && b.find() ? new String[] {r.group(1), b.group(1)} : null;
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
    String[] mirror = mirrored();
    if (mirror != null && run != null) {
      // the pipeline's tagged snapshots expired: the mirror is the newest commit maintenance saw
      found = "run " + mirror[0] + " batch " + mirror[1] + " (mirrored ledger; its snapshots expired)";
      return run.equals(mirror[0]) && batch.equals(mirror[1]);
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
    return commitFenced(append, new LedgerFence(pipeline, run, batch, table));
  }

  /**
   * Before a fenced write Spark commits itself: validates the fence on main's head and points
   * {@code branch} at it (a table without snapshots first gets an empty one). Spark then writes to
   * the branch.
   *
   * @return the staged snapshot's id (decimal) when staged, else the fence's message (starts with
   *     {@link #MARKER}; nothing was changed)
   */
  public static String stage(Table table, String branch, String pipeline, String run, long batch) {
    table.refresh();
    if (table.currentSnapshot() == null) {
      table.newAppend().set("icetide.empty", "true").commit();
    }
    Snapshot head = table.currentSnapshot();
    LedgerFence fence = new LedgerFence(pipeline, run, batch, table);
    if (!fence.validate(SnapshotUtil.ancestorsOf(head.snapshotId(), table::snapshot))) {
      return fence.errorMessage();
    }
    ManageSnapshots update = table.manageSnapshots();
    if (table.refs().containsKey(branch)) {
      update.replaceBranch(branch, head.snapshotId());
    } else {
      update.createBranch(branch, head.snapshotId());
    }
    // a branch left behind by a crash between stage and publish expires a day from now (the age
    // counts from its head snapshot's time, which on an idle table may be long past)
    long age = Math.max(0L, System.currentTimeMillis() - head.timestampMillis()) + 24L * 3600 * 1000;
    update.setMaxRefAgeMs(branch, age).commit();
    return String.valueOf(head.snapshotId());
  }

  /**
   * After a write committed to {@code branch} (one snapshot on top of the staged base): lands it on
   * main, fenced, and removes the branch. Returns null once landed, else the fence's message
   * (nothing landed on main).
   *
   * <p>While main's head is still the base, main is fast-forwarded to the branch (the catalog's
   * compare-and-swap makes that atomic). When other writers committed to main meanwhile (a
   * compaction, another pipeline), the branch's snapshot is replayed onto main's head as one commit
   * with the same files and icetide tags, fenced again and validated as Spark validates a MERGE
   * committed straight to main (serializable, from the base): the files it removes still exist, the
   * data files its deletes reference still exist, and nobody added data or deletes it could miss. A
   * compaction of other files therefore costs nothing; one that rewrote the files it touched fails
   * the replay with a {@link ValidationException}, and the write runs again on the new head.
   */
  public static String publish(
      Table table, String branch, long staged, boolean merge, String pipeline, String run, long batch) {
    table.refresh();
    SnapshotRef ref = table.refs().get(branch);
    if (ref == null) {
      throw new ValidationException("Cannot fast-forward: branch %s is gone", branch);
    }
    Snapshot tip = table.snapshot(ref.snapshotId());
    if (tip == null || tip.parentId() == null || tip.parentId() != staged) {
      // expired and made again, or written twice: not the one write on the state the fence approved
      throw new ValidationException("Cannot fast-forward: branch %s is not one write on snapshot %s", branch, staged);
    }
    Snapshot head = table.currentSnapshot();
    if (head != null && head.snapshotId() == staged) {
      try {
        table.manageSnapshots().fastForwardBranch(SnapshotRef.MAIN_BRANCH, branch).removeBranch(branch).commit();
        return null;
      } catch (IllegalArgumentException | CommitFailedException e) {
        table.refresh(); // main moved since the refresh above: replay onto its new head
        head = table.currentSnapshot();
      }
    }
    if (head == null || !SnapshotUtil.isAncestorOf(head.snapshotId(), staged, table::snapshot)) {
      throw new ValidationException("Cannot fast-forward: main no longer descends from snapshot %s", staged);
    }
    LedgerFence fence = new LedgerFence(pipeline, run, batch, table);
    String refused = replay(table, tip, staged, merge, fence);
    if (refused != null) {
      return refused;
    }
    table.manageSnapshots().removeBranch(branch).commit();
    return null;
  }

  /**
   * Commits {@code tip}'s changes (relative to its parent {@code base}) onto main, fenced. A plain
   * append commutes with everything; a MERGE ({@code merge}) is validated as Spark validates one.
   */
  private static String replay(Table table, Snapshot tip, long base, boolean merge, LedgerFence fence) {
    org.apache.iceberg.io.FileIO io = table.io();
    java.util.List<DeleteFile> deletes = new java.util.ArrayList<>();
    tip.addedDeleteFiles(io).forEach(deletes::add);
    java.util.List<DataFile> removed = new java.util.ArrayList<>();
    tip.removedDataFiles(io).forEach(removed::add);
    java.util.List<DeleteFile> removedDeletes = new java.util.ArrayList<>();
    tip.removedDeleteFiles(io).forEach(removedDeletes::add);
    SnapshotUpdate<?> update;
    if (!merge && deletes.isEmpty() && removed.isEmpty() && removedDeletes.isEmpty()) {
      AppendFiles append = table.newAppend(); // appends commute with every other commit
      tip.addedDataFiles(io).forEach(append::appendFile);
      update = append;
    } else {
      RowDelta delta = table.newRowDelta();
      tip.addedDataFiles(io).forEach(delta::addRows);
      removed.forEach(delta::removeRows);
      removedDeletes.forEach(delta::removeDeletes);
      java.util.List<String> referenced = new java.util.ArrayList<>();
      for (DeleteFile d : deletes) {
        delta.addDeletes(d);
        String location = ContentFileUtil.referencedDataFileLocation(d);
        if (location == null) { // a partition-scoped position delete file: which files, unknown here
          throw new ValidationException("Cannot replay: delete file %s references no single data file", d.location());
        }
        referenced.add(location);
      }
      update = delta.validateFromSnapshot(base)
          .conflictDetectionFilter(Expressions.alwaysTrue())
          .validateDataFilesExist(referenced)
          .validateDeletedFiles()
          .validateNoConflictingDataFiles()
          .validateNoConflictingDeleteFiles();
    }
    for (Map.Entry<String, String> e : tip.summary().entrySet()) {
      if (e.getKey().startsWith("icetide.") || e.getKey().equals("spark.app.id")) {
        update.set(e.getKey(), e.getValue());
      }
    }
    update.set("icetide.replayed-from", String.valueOf(tip.snapshotId()));
    // as a cherry-pick records it: expiring the branch's snapshot then keeps the files main now holds
    update.set("source-snapshot-id", String.valueOf(tip.snapshotId()));
    return commitFenced(update, fence);
  }

  /**
   * Commits {@code update} with {@code fence} validated inside the commit.
   *
   * @return null once committed, else the fence's message (nothing was committed); any other
   *     validation failure is thrown
   */
  private static String commitFenced(SnapshotUpdate<?> update, LedgerFence fence) {
    update.validateWith(fence);
    try {
      update.commit();
      return null;
    } catch (ValidationException e) {
      String message = String.valueOf(e.getMessage());
      if (message.contains(MARKER)) {
        return message;
      }
      throw e;
    }
  }

  /** Removes {@code branch} if it exists (after a failed MERGE). */
  public static void drop(Table table, String branch) {
    table.refresh();
    if (table.refs().containsKey(branch)) {
      table.manageSnapshots().removeBranch(branch).commit();
    }
  }
}
