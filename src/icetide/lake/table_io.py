"""Files under a table's location, through the table's own Iceberg ``FileIO``.

Whatever the catalog configures (``HadoopFileIO`` on a local or HDFS warehouse, ``S3FileIO`` on an
``s3://`` warehouse served by a REST catalog, ``ResolvingFileIO``) is what icetide uses for the
files it keeps next to a table: in-flight markers, orphan deletion, metadata sizes. Hadoop's
``FileSystem`` is never asked about a table location (it has no ``s3://`` scheme, and on a cluster
its configuration is not the catalog's). Spark's checkpoints are not table files: Spark itself
reads and writes them through Hadoop, so :mod:`icetide.lake.checkpoint` does too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos"})


@dataclass(frozen=True)
class TableIO:
    """The ``FileIO`` of one loaded Iceberg table (a py4j handle) and the table's location."""

    io: Any
    location: str
    jvm: Any

    @classmethod
    def of(cls, spark: SparkSession, table: str) -> TableIO:
        jvm: Any = spark._jvm
        loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
        return cls.of_table(spark, loaded)

    @classmethod
    def of_table(cls, spark: SparkSession, iceberg_table: Any) -> TableIO:
        return cls(iceberg_table.io(), str(iceberg_table.location()).rstrip("/"), spark._jvm)

    def write(self, path: str, data: bytes) -> None:
        """Create or overwrite ``path`` with ``data``."""
        out = self.io.newOutputFile(path).createOrOverwrite()
        try:
            out.write(bytearray(data))
        finally:
            out.close()

    def read(self, path: str) -> bytes | None:
        """The file's bytes, None if it does not exist."""
        f = self.io.newInputFile(path)
        if not f.exists():
            return None
        stream = f.newStream()
        try:
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def size(self, path: str) -> int | None:
        f = self.io.newInputFile(path)
        return int(f.getLength()) if f.exists() else None

    def delete(self, path: str) -> None:
        self.io.deleteFile(path)

    def supports_prefix_listing(self) -> bool:
        return bool(self.jvm.org.apache.iceberg.io.SupportsPrefixOperations._java_lang_class.isInstance(self.io))

    def list_names(self, folder: str, name_prefix: str) -> list[str]:
        """Locations of the files directly in ``folder`` whose names start with ``name_prefix``."""
        return list(self.list_files(folder, name_prefix))

    def list_files(self, folder: str, name_prefix: str) -> dict[str, int | None]:
        """Location → creation time (ms; None where the store does not say) of the files directly in
        ``folder`` whose names start with ``name_prefix``.

        Object stores list the narrow key prefix (one cheap request); a file system lists the folder
        (a missing folder lists nothing). FileIOs without prefix operations list nothing.
        """
        if not self.supports_prefix_listing():
            return {}
        folder = folder.rstrip("/") + "/"
        object_store = folder.split("://", 1)[0] in OBJECT_STORE_SCHEMES
        try:
            listed = self.io.listPrefix(folder + name_prefix if object_store else folder)
            found = {str(i.location()): _millis(i) for i in self.jvm.org.apache.iceberg.relocated.com.google
                     .common.collect.Lists.newArrayList(listed)}
        except Exception as e:  # py4j: FileNotFoundException from a file system
            if "FileNotFound" in str(e) or "NoSuchKey" in str(e):
                return {}
            raise
        return {f: t for f, t in found.items() if f.rsplit("/", 1)[-1].startswith(name_prefix)}


def _millis(info: Any) -> int | None:
    try:
        at = int(info.createdAtMillis())
    except Exception:
        return None
    return at if at > 0 else None
