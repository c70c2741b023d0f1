package io.icetide.iceberg;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.metrics.CounterResult;
import org.apache.iceberg.metrics.MetricsReport;
import org.apache.iceberg.metrics.MetricsReporter;
import org.apache.iceberg.metrics.ScanMetricsResult;
import org.apache.iceberg.metrics.ScanReport;
import org.apache.iceberg.metrics.TimerResult;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * An Iceberg {@link MetricsReporter} that keeps every table scan's report as query telemetry.
 *
 * <p>Register it on any Iceberg catalog of any Spark application with the catalog property
 * {@code metrics-reporter-impl=io.icetide.iceberg.ScanTelemetry} (icetide's jar on the classpath).
 * Each {@link ScanReport} (table, filter with literals sanitized by Iceberg, projected columns,
 * result/skipped data files, bytes, planning time) becomes one JSON line. Lines are buffered and
 * written, at most every {@code icetide.telemetry.flush-ms} (5000) or 500 reports and at JVM exit,
 * as one new file under {@code icetide.telemetry.location} (default: {@code
 * <warehouse>/_icetide/telemetry}) through the catalog's own FileIO, so it works for local and
 * object-store warehouses alike. icetide's maintenance cycle loads those files into
 * {@code maintenance.telemetry_table} and deletes them.
 *
 * <p>Reporting never fails a query: every error is logged and the report dropped.
 */
public class ScanTelemetry implements MetricsReporter {
  public static final String LOCATION = "icetide.telemetry.location";
  public static final String FLUSH_MS = "icetide.telemetry.flush-ms";
  private static final int MAX_BUFFERED = 500;
  private static final Logger LOG = LoggerFactory.getLogger(ScanTelemetry.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final List<String> buffer = new ArrayList<>();
  private FileIO io;
  private String location;
  private long flushMs = 5000;
  private long lastFlush = System.currentTimeMillis();

  @Override
  public void initialize(Map<String, String> properties) {
    String warehouse = properties.getOrDefault(CatalogProperties.WAREHOUSE_LOCATION, "");
    location = stripSlash(properties.getOrDefault(LOCATION, stripSlash(warehouse) + "/_icetide/telemetry"));
    flushMs = Long.parseLong(properties.getOrDefault(FLUSH_MS, "5000"));
    String impl = properties.getOrDefault(CatalogProperties.FILE_IO_IMPL, "org.apache.iceberg.hadoop.HadoopFileIO");
    io = CatalogUtil.loadFileIO(impl, properties, new org.apache.hadoop.conf.Configuration());
    Runtime.getRuntime().addShutdownHook(new Thread(this::flush, "icetide-telemetry-flush"));
  }

  @Override
  public void report(MetricsReport report) {
    if (!(report instanceof ScanReport) || io == null) {
      return;
    }
    try {
      String line = JSON.writeValueAsString(toJson((ScanReport) report));
      boolean due;
      synchronized (buffer) {
        buffer.add(line);
        due = buffer.size() >= MAX_BUFFERED || System.currentTimeMillis() - lastFlush >= flushMs;
      }
      if (due) {
        flush();
      }
    } catch (Exception e) {
      LOG.warn("icetide telemetry: dropped a scan report of {}: {}", ((ScanReport) report).tableName(), e.toString());
    }
  }

  static ObjectNode toJson(ScanReport r) {
    ObjectNode o = JSON.createObjectNode();
    o.put("table_name", r.tableName());
    o.put("queried_at_ms", System.currentTimeMillis());
    o.put("snapshot_id", r.snapshotId());
    o.put("filter", String.valueOf(r.filter()));
    ArrayNode cols = o.putArray("projected");
    for (String name : r.projectedFieldNames()) {
      cols.add(name);
    }
    ScanMetricsResult m = r.scanMetrics();
    if (m != null) {
      o.put("result_data_files", value(m.resultDataFiles()));
      o.put("skipped_data_files", value(m.skippedDataFiles()));
      o.put("result_delete_files", value(m.resultDeleteFiles()));
      o.put("scanned_data_manifests", value(m.scannedDataManifests()));
      o.put("skipped_data_manifests", value(m.skippedDataManifests()));
      o.put("total_file_bytes", value(m.totalFileSizeInBytes()));
      TimerResult t = m.totalPlanningDuration();
      o.put("planning_ms", t == null ? 0 : t.totalDuration().toMillis());
    }
    return o;
  }

  private static long value(CounterResult c) {
    return c == null ? 0 : c.value();
  }

  /** Write the buffered reports as one new file; keeps them for the next flush if the write fails. */
  public void flush() {
    List<String> lines;
    synchronized (buffer) {
      if (buffer.isEmpty()) {
        return;
      }
      lines = new ArrayList<>(buffer);
      buffer.clear();
      lastFlush = System.currentTimeMillis();
    }
    String path = location + "/" + System.currentTimeMillis() + "-" + UUID.randomUUID() + ".jsonl";
    try (OutputStream out = io.newOutputFile(path).create()) {
      out.write((String.join("\n", lines) + "\n").getBytes(StandardCharsets.UTF_8));
    } catch (IOException | RuntimeException e) {
      LOG.warn("icetide telemetry: could not write {} reports to {}: {}", lines.size(), path, e.toString());
      synchronized (buffer) {
        if (buffer.size() < 10 * MAX_BUFFERED) {
          buffer.addAll(0, lines);
        }
      }
    }
  }

  @Override
  public void close() {
    flush();
  }

  private static String stripSlash(String s) {
    return s.endsWith("/") ? s.substring(0, s.length() - 1) : s;
  }
}
