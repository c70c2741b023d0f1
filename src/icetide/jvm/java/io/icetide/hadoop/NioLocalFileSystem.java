package io.icetide.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system for a local warehouse, without its two per-file costs.
 *
 * <p>Without Hadoop's native library (pip's pyspark ships none), {@link RawLocalFileSystem} sets
 * the permission of every file it creates by forking {@code chmod}; from a JVM with a large heap a
 * fork costs milliseconds, and a streaming micro-batch creates dozens of data and metadata files.
 * Here permissions are set through {@code java.nio}. And, being the raw file system, it writes no
 * {@code .crc} checksum sidecar next to each file (Parquet and Avro files carry their own checks).
 *
 * <p>icetide configures it as {@code fs.file.impl} only for a local warehouse, and only when the
 * user has not set {@code fs.file.impl} themselves.
 */
public class NioLocalFileSystem extends RawLocalFileSystem {
  @Override
  public String getScheme() {
    return "file";
  }

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    short mode = permission.toShort();
    Set<PosixFilePermission> perms = EnumSet.noneOf(PosixFilePermission.class);
    PosixFilePermission[] bits = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
      PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
      PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
      PosixFilePermission.OWNER_READ
    };
    for (int i = 0; i < bits.length; i++) {
      if ((mode & (1 << i)) != 0) {
        perms.add(bits[i]);
      }
    }
    Files.setPosixFilePermissions(pathToFile(p).toPath(), perms);
  }
}
