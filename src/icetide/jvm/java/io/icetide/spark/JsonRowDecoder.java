package io.icetide.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.json.UTF8StreamJsonParser;
import java.io.IOException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.json.CreateJacksonParser;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.catalyst.json.JacksonParser;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.Iterator;

/**
 * One JSON record value → its checks, its shape and its row, in one read of its UTF-8 bytes.
 *
 * <p>The row is Spark's own: {@link JacksonParser} (the converter behind {@code from_json}, with
 * {@code from_json}'s options) reads the record from a byte parser wrapped in a {@link
 * ScanningParser}, which takes the checks and the shape ({@link JsonChecks}) from the same tokens.
 * {@code from_json} reads through a {@code Reader} with its own UTF-8 decoder per record
 * (SPARK-16548); the byte parser reports malformed UTF-8 instead, which is a dead letter here as in
 * the checks.
 *
 * <p>Invariant: for every value, {@link #good} is true exactly when the usual path ({@link
 * JsonScan}'s checks, then {@code from_json} in PERMISSIVE mode with icetide's error rules) takes
 * the record as a good row, {@link #row} is that row, and {@link #shape} is {@link JsonScan}'s.
 * Values the byte parser would read differently from {@code from_json} (a byte-order mark, a
 * UTF-16 or UTF-32 encoding) are read the old way: {@link JsonScan}'s parser for the checks, then
 * Spark's reader. One instance per task: not thread-safe.
 */
final class JsonRowDecoder {
  /** Jackson's default longest string, in chars (a UTF-8 value of at most this many bytes has none longer). */
  private static final int MAX_STRING = com.fasterxml.jackson.core.StreamReadConstraints.DEFAULT_MAX_STRING_LEN;

  private final JacksonParser converter;
  private final JsonFactory factory;
  private final JsonChecks checks;
  private final int maxDepth;
  private final int maxValueBytes;
  private final scala.Function2<JsonFactory, byte[], JsonParser> fast;
  private final scala.Function2<JsonFactory, byte[], JsonParser> slow;
  private final scala.Function1<byte[], UTF8String> literal;
  private JsonParser prepared;

  /** Whether the last record is a good row; then {@link #row} holds it. */
  boolean good;
  /** The last record's row (the schema's fields, in order), or null. */
  InternalRow row;
  /** Whether the last record has a shape ({@link #shape}); false when it is not a JSON object. */
  boolean hasShape;
  /** The last record's shape ({@link JsonScan#UNKNOWN} when it cannot tell). */
  long shape;
  /**
   * With {@link #route}: whether {@link #routeText} is what Spark's {@code get_json_object} reads
   * at the routing path (a good record, read by the byte parser, no text after it, a string
   * reached through objects only, and no single quote anywhere: Spark 4.1's {@code
   * get_json_object} reads single quotes too, but this is kept out of what the test proves);
   * when false, only Spark's routing expression can tell.
   */
  boolean routeSure;
  /** With {@link #route}: the string at the routing path, or null (absent, or not a string). */
  String routeText;
  private boolean routed;

  JsonRowDecoder(StructType schema, String timeZone, String corruptColumn, int maxDepth, int maxFields,
      String[] reserved, int maxValueBytes) {
    java.util.Map<String, String> given = new java.util.HashMap<>();
    given.put("mode", "PERMISSIVE");
    given.put("columnNameOfCorruptRecord", corruptColumn);
    scala.collection.immutable.Map<String, String> options =
        scala.collection.immutable.Map$.MODULE$.from(scala.jdk.javaapi.CollectionConverters.asScala(given));
    JSONOptions parsed = new JSONOptions(options, timeZone, corruptColumn);
    this.converter =
        new JacksonParser(schema, parsed, false, JacksonParser.$lessinit$greater$default$4());
    this.factory = JsonScan.factory(maxDepth);
    this.checks = new JsonChecks(maxDepth, maxFields, reserved);
    this.maxDepth = maxDepth;
    this.maxValueBytes = maxValueBytes;
    this.fast = (f, value) -> prepared;
    this.slow = (f, value) -> CreateJacksonParser.utf8String(f, UTF8String.fromBytes(value));
    this.literal = UTF8String::fromBytes;
  }

  /** Also reads the routing field at {@code path} from each record ({@link #routeText}). */
  void route(String[] path) {
    checks.route(path);
    routed = true;
  }

  /** Reads {@code value} (null: a tombstone); the result is in the public fields. */
  void decode(byte[] value) {
    good = false;
    row = null;
    hasShape = false;
    shape = JsonChecks.UNKNOWN;
    routeSure = false;
    routeText = null;
    if (value == null || value.length == 0) {
      return;
    }
    if (Utf8.check(value) != null) {
      hasShape = true; // JsonScan: a failed check, an unknown shape
      return;
    }
    checks.reset();
    JsonParser p;
    try {
      // An InputStream, not the array: Spark's converter copies a non-string value for a string
      // column straight from a byte-array source (its text as sent), but from_json's Reader makes
      // it re-render the value (1.50 → 1.5): the two paths must keep the same text.
      p = factory.createParser(new java.io.ByteArrayInputStream(value));
    } catch (IOException | RuntimeException e) {
      hasShape = true; // JsonScan: an unreadable value has an unknown shape, and no check
      if (value.length <= maxValueBytes) {
        convert(value, slow);
      }
      return;
    }
    boolean bom = value.length >= 3 && value[0] == (byte) 0xEF && value[1] == (byte) 0xBB
        && value[2] == (byte) 0xBF;
    // over MAX_STRING bytes a string may pass Jackson's length limit: the byte parser's checks read
    // every string, from_json only the table's columns, so such a value is read the old way
    if (value.length > maxValueBytes || value.length > MAX_STRING || bom || !(p instanceof UTF8StreamJsonParser)) {
      // oversized (a dead letter, but its shape counts) or not plain UTF-8: JsonScan's read, then
      // from_json's own
      String failed = JsonScan.scan(p, checks, maxDepth);
      hasShape = checks.hasShape();
      shape = hasShape ? checks.shape() : JsonChecks.UNKNOWN;
      if (value.length <= maxValueBytes && failed == null) {
        convert(value, slow);
      }
      return;
    }
    prepared = new ScanningParser(p, checks);
    convert(value, fast);
    prepared = null;
    hasShape = checks.hasShape();
    shape = hasShape ? checks.shape() : JsonChecks.UNKNOWN;
    if (checks.failure() != null || !checks.done()) { // a failed check, or a parser error Spark took
      good = false;
      row = null;
    }
    if (routed && good && !checks.trailing() && !checks.routeOdd() && !hasSingleQuote(value)) {
      routeSure = true;
      routeText = checks.routeText();
    }
  }

  private static boolean hasSingleQuote(byte[] value) {
    for (byte b : value) {
      if (b == '\'') {
        return true;
      }
    }
    return false;
  }

  private void convert(byte[] value, scala.Function2<JsonFactory, byte[], JsonParser> create) {
    try {
      Iterator<InternalRow> rows = converter.parse(value, create, literal).iterator();
      if (rows.hasNext()) {
        row = rows.next();
        good = row != null;
      }
    } catch (org.apache.spark.SparkUpgradeException e) {
      throw e; // from_json fails the batch on it (spark.sql.legacy.timeParserPolicy=EXCEPTION): so does this
    } catch (RuntimeException e) { // BadRecordException, a failed check: the usual path classifies it
      good = false;
      row = null;
    } catch (Exception e) { // a checked exception Scala code threw undeclared
      good = false;
      row = null;
    }
  }
}
