package io.icetide.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/** The data files in Iceberg's task commit messages: to commit them elsewhere, or to delete them. */
final class WrittenFiles {
  private WrittenFiles() {}

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

  /** Deletes the files of {@code messages}; one that cannot be is left to orphan cleanup. */
  static void delete(org.apache.hadoop.conf.Configuration conf, List<WriterCommitMessage> messages) {
    for (WriterCommitMessage m : messages) {
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
}
