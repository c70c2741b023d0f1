package io.icetide.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.CharConversionException;
import java.io.IOException;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * A record value's checks and shape ({@link JsonChecks}) as a UDF: {@code struct<check string,
 * shape bigint>}, read in one streaming pass.
 *
 * <p>{@code check}: null for a value that passes (or that is not a JSON object, or not JSON at all:
 * Spark's own reader classifies those), else {@code "<error class>\t<message>"}: the checks of
 * {@link JsonChecks}, a field name twice in one object, bytes that are not UTF-8. {@code shape}:
 * null when the value is not a JSON object; {@link #UNKNOWN} when it cannot tell.
 *
 * <p>The usual path of a batch reads records with this UDF; the one pass reads them with {@link
 * JsonRowDecoder}, which takes the same checks and shape from the token stream of the row itself.
 */
public final class JsonScan implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  /** A shape that is never known: the record always goes through inference. */
  public static final long UNKNOWN = JsonChecks.UNKNOWN;
  /** Deeper than this the shape is {@link #UNKNOWN} (deeper than any table icetide creates). */
  public static final int MAX_SHAPE_DEPTH = JsonChecks.MAX_SHAPE_DEPTH;
  private static final StructType TYPE =
      new StructType().add("check", DataTypes.StringType).add("shape", DataTypes.LongType);
  private final int maxDepth;
  private final int maxFields;
  private final String[] reserved; // lower-case prefixes of top-level names
  private transient JsonFactory factory;

  public JsonScan(int maxDepth, int maxFields, String[] reserved) {
    this.maxDepth = maxDepth;
    this.maxFields = maxFields;
    this.reserved = reserved.clone();
  }

  /** The UDF (binary → struct&lt;check, shape&gt;) to apply to a record value column. */
  public static UserDefinedFunction udf(int maxDepth, int maxFields, String[] reserved) {
    return functions.udf(new JsonScan(maxDepth, maxFields, reserved), TYPE);
  }

  /**
   * The parser factory of the checks: Spark's JSON reader accepts single quotes by default, so do
   * the checks; NaN/Infinity are refused (Spark's from_json takes them, but its get_json_object and
   * json_object_keys, used for routing and evolution, read such a record as not JSON at all); a
   * field twice in one object is an error.
   */
  static JsonFactory factory(int maxDepth) {
    JsonFactory f =
        JsonFactory.builder()
            .enable(JsonReadFeature.ALLOW_SINGLE_QUOTES)
            .streamReadConstraints(
                StreamReadConstraints.builder().maxNestingDepth(Math.max(maxDepth + 2, 10)).build())
            .build();
    f.enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);
    return f;
  }

  @Override
  public Row call(byte[] value) {
    if (value == null || value.length == 0) {
      return RowFactory.create(null, null);
    }
    if (factory == null) {
      factory = factory(maxDepth);
    }
    String invalid = Utf8.check(value);
    if (invalid != null) {
      return RowFactory.create(invalid, UNKNOWN);
    }
    JsonChecks checks = new JsonChecks(maxDepth, maxFields, reserved);
    String check;
    try {
      check = scan(factory.createParser(value), checks, maxDepth);
    } catch (IOException | RuntimeException e) {
      return RowFactory.create(null, UNKNOWN);
    }
    return RowFactory.create(check, checks.hasShape() ? checks.shape() : null);
  }

  /**
   * Reads one record with {@code p} (closed here) into {@code checks} (reset here).
   *
   * @return the failed check, {@code "<class>\t<message>"}, or null; the shape is then in {@code
   *     checks}
   */
  static String scan(JsonParser p, JsonChecks checks, int maxDepth) {
    checks.reset();
    try (JsonParser closing = p) {
      JsonToken t = p.nextToken();
      checks.token(p, t);
      while (checks.open()) {
        String failed = checks.token(p, p.nextToken());
        if (failed != null) {
          return failed;
        }
      }
      if (checks.done() && checks.shape() != UNKNOWN) {
        try {
          if (p.nextToken() != null) {
            checks.trailingText(); // let inference decide
          }
        } catch (IOException | RuntimeException e) {
          checks.trailingText(); // the checks never read past the record's object
        }
      }
      return null;
    } catch (JsonParseException e) {
      checks.parserError();
      return classify(String.valueOf(e.getOriginalMessage()), maxDepth);
    } catch (CharConversionException e) {
      checks.parserError();
      return "invalid_utf8\tthe record is not valid UTF-8: " + Utf8.clip(String.valueOf(e.getMessage()), 120);
    } catch (IOException | RuntimeException e) {
      checks.parserError();
      return null; // malformed: Spark's own reader classifies it
    }
  }

  /** The check a parser error is, or null (malformed: Spark's own reader classifies it). */
  static String classify(String m, int maxDepth) {
    if (m.startsWith("Duplicate field")) {
      return "duplicate_key\tthe record has a field twice in one object: " + Utf8.clip(m, 160);
    }
    if (m.contains("UTF-8") || m.contains("UTF8")) {
      return "invalid_utf8\tthe record is not valid UTF-8: " + Utf8.clip(m, 120);
    }
    if (m.contains("Non-standard token") || m.contains("NaN") || m.contains("Infinity")) {
      return "non_finite_number\tNaN and Infinity are not JSON numbers; send null (or a string) instead";
    }
    if (m.contains("nesting depth")) {
      return "too_deep\tthe record is nested more than " + maxDepth + " levels (source.max_depth)";
    }
    return null;
  }
}
