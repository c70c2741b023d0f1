package io.icetide.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.CharConversionException;
import java.io.IOException;
import java.util.ArrayDeque;
import java.util.HashSet;
import java.util.Locale;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * One streaming pass over a record value (no recursion, so no depth can exhaust a stack) that both
 * checks it and fingerprints its shape; returns {@code struct<check string, shape bigint>}.
 *
 * <p>{@code check}: null for a value that passes (or that is not a JSON object, or not JSON at all:
 * Spark's own reader classifies those), else {@code "<error class>\t<message>"}: nesting deeper than
 * {@code maxDepth}, more than {@code maxFields} field names, a field name twice in one object
 * (exactly, or ignoring case: Spark and Iceberg resolve names ignoring case), a top-level field name
 * with one of icetide's reserved prefixes, an empty field name, NaN or Infinity as a number, bytes
 * that are not UTF-8.
 *
 * <p>{@code shape}: a 64-bit fingerprint of the set of the object's (field path, value kind) pairs;
 * null when the value is not a JSON object (inference never looks at those); {@link #UNKNOWN} when
 * it cannot tell (malformed, failed the check, deeper than {@link #MAX_SHAPE_DEPTH}, trailing text):
 * such a record is always inferred. Two records with the same shape give the same schema to Spark's
 * JSON inference (but for which strings read as timestamps). Field order, array lengths and
 * repeated array elements do not change the shape; a new field (at any depth), a value of another
 * kind (string, boolean, null, object, array, an integer that fits 32 bits, one that fits 64 bits, a
 * larger one with its digit count, a fraction) does. Strings are one kind whatever they hold.
 *
 * <p>Checking and fingerprinting used to be two UDFs, each reading every record with its own
 * parser; one pass reads each record once.
 */
public final class JsonScan implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  /** A shape that is never known: the record always goes through inference. */
  public static final long UNKNOWN = 0L;
  /** Deeper than this the shape is {@link #UNKNOWN} (deeper than any table icetide creates). */
  public static final int MAX_SHAPE_DEPTH = 64;
  // arrays hold no field names: one shared placeholder, never written to
  private static final HashSet<String> NO_NAMES = new HashSet<>();
  private static final long FNV_OFFSET = 0xcbf29ce484222325L;
  private static final long FNV_PRIME = 0x100000001b3L;
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

  private JsonFactory factory() {
    if (factory == null) {
      // Spark's JSON reader accepts single quotes by default: so does the scan. NaN/Infinity are
      // refused: Spark's from_json takes them, but its get_json_object and json_object_keys (used
      // for routing and evolution) read such a record as not JSON at all.
      factory =
          JsonFactory.builder()
              .enable(JsonReadFeature.ALLOW_SINGLE_QUOTES)
              .streamReadConstraints(
                  StreamReadConstraints.builder().maxNestingDepth(Math.max(maxDepth + 2, 10)).build())
              .build();
      factory.enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);
    }
    return factory;
  }

  @Override
  public Row call(byte[] value) {
    if (value == null || value.length == 0) {
      return RowFactory.create(null, null);
    }
    try (JsonParser p = factory().createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return RowFactory.create(null, null);
      }
      return scan(p);
    } catch (JsonParseException e) {
      return RowFactory.create(classify(String.valueOf(e.getOriginalMessage())), UNKNOWN);
    } catch (CharConversionException e) {
      return RowFactory.create(
          "invalid_utf8\tthe record is not valid UTF-8: " + clip(String.valueOf(e.getMessage()), 120), UNKNOWN);
    } catch (IOException | RuntimeException e) {
      return RowFactory.create(null, UNKNOWN); // malformed: Spark's own reader classifies it
    }
  }

  /** The object the parser has just opened, to its end; then the shape sees trailing text. */
  private Row scan(JsonParser p) throws IOException {
    int depth = 1; // open containers; the record's own object is 1
    int fields = 0;
    // per open container: the lower-cased names seen in that object (NO_NAMES for an array)
    ArrayDeque<HashSet<String>> names = new ArrayDeque<>();
    names.push(new HashSet<>());
    // the shape: hash of the path of each open container (index depth - 1), whether it is an array
    long[] paths = new long[MAX_SHAPE_DEPTH + 1];
    boolean[] inArray = new boolean[MAX_SHAPE_DEPTH + 1];
    paths[0] = FNV_OFFSET;
    boolean tooDeep = false;
    long sum = 0;
    HashSet<Long> repeated = null; // pairs under an array: counted once, whatever the length
    int arrays = 0;
    long field = 0; // hash of the path of the value about to be read
    JsonToken t;
    while (depth > 0 && (t = p.nextToken()) != null) {
      int s = depth - 1;
      if (t == JsonToken.FIELD_NAME) {
        if (++fields > maxFields) {
          return failed("too_wide\tthe record has more than " + maxFields + " fields (source.max_fields)");
        }
        String name = p.currentName();
        if (name.isEmpty()) {
          return failed("invalid_field\ta field name is empty (names must match [A-Za-z_][A-Za-z0-9_]{0,127})");
        }
        String lower = lower(name);
        if (depth == 1) {
          for (String prefix : reserved) {
            if (lower.startsWith(prefix)) {
              return failed("reserved_field\tfield '" + clip(name, 64) + "': top-level names starting with "
                  + String.join(", ", reserved) + " are reserved for icetide's columns; rename it upstream");
            }
          }
        }
        if (!names.peek().add(lower)) {
          return failed("ambiguous_field\tfield '" + clip(name, 64) + "' differs from another field of the same "
              + "object only by case; Spark and Iceberg resolve names ignoring case");
        }
        if (!tooDeep) {
          field = extend(paths[s], name);
        }
        continue;
      }
      if (t == JsonToken.END_OBJECT || t == JsonToken.END_ARRAY) {
        if (!tooDeep && s <= MAX_SHAPE_DEPTH && inArray[s]) {
          arrays--;
        }
        depth--;
        names.pop();
        continue;
      }
      if (t == JsonToken.VALUE_STRING) {
        p.getTextLength(); // decodes the string: invalid UTF-8 fails here
      }
      if (!tooDeep) {
        long here = inArray[s] ? extend(paths[s], "[]") : field;
        long pair = mix(here * 31 + kind(p, t));
        if (arrays > 0) {
          if (repeated == null) {
            repeated = new HashSet<>();
          }
          if (repeated.add(pair)) {
            sum += pair;
          }
        } else {
          sum += pair;
        }
        if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
          if (s + 1 > MAX_SHAPE_DEPTH) {
            tooDeep = true; // the check goes on; the shape is unknown
          } else {
            paths[s + 1] = here;
            inArray[s + 1] = t == JsonToken.START_ARRAY;
            if (inArray[s + 1]) {
              arrays++;
            }
          }
        }
      }
      if (t == JsonToken.START_OBJECT || t == JsonToken.START_ARRAY) {
        if (++depth > maxDepth) {
          return failed("too_deep\tthe record is nested more than " + maxDepth + " levels (source.max_depth)");
        }
        names.push(t == JsonToken.START_OBJECT ? new HashSet<>() : NO_NAMES);
      }
    }
    long shape = tooDeep || depth > 0 ? UNKNOWN : (sum == UNKNOWN ? 1L : sum);
    try {
      if (shape != UNKNOWN && p.nextToken() != null) {
        shape = UNKNOWN; // trailing text: let inference decide
      }
    } catch (IOException | RuntimeException e) {
      shape = UNKNOWN; // the check never reads past the record's object
    }
    return RowFactory.create(null, shape);
  }

  private static Row failed(String check) {
    return RowFactory.create(check, UNKNOWN);
  }

  private String classify(String m) {
    if (m.startsWith("Duplicate field")) {
      return "duplicate_key\tthe record has a field twice in one object: " + clip(m, 160);
    }
    if (m.contains("UTF-8") || m.contains("UTF8")) {
      return "invalid_utf8\tthe record is not valid UTF-8: " + clip(m, 120);
    }
    if (m.contains("Non-standard token") || m.contains("NaN") || m.contains("Infinity")) {
      return "non_finite_number\tNaN and Infinity are not JSON numbers; send null (or a string) instead";
    }
    if (m.contains("nesting depth")) {
      return "too_deep\tthe record is nested more than " + maxDepth + " levels (source.max_depth)";
    }
    return null; // malformed: Spark's own reader classifies it
  }

  /** Lower case (Locale.ROOT), without a copy for the usual all-lower-case ASCII name. */
  private static String lower(String name) {
    for (int i = 0; i < name.length(); i++) {
      char c = name.charAt(i);
      if (c >= 'A' && c <= 'Z' || c > 127) {
        return name.toLowerCase(Locale.ROOT);
      }
    }
    return name;
  }

  private static long kind(JsonParser p, JsonToken t) throws IOException {
    switch (t) {
      case START_OBJECT:
        return 1;
      case START_ARRAY:
        return 2;
      case VALUE_STRING:
        return 3;
      case VALUE_TRUE:
      case VALUE_FALSE:
        return 4;
      case VALUE_NULL:
        return 5;
      case VALUE_NUMBER_FLOAT:
        return 6;
      case VALUE_NUMBER_INT:
        switch (p.getNumberType()) {
          case INT:
            return 7;
          case LONG:
            return 8;
          default: // a big integer: Spark infers a decimal as wide as its digits
            return 100 + p.getText().length();
        }
      default:
        return 9;
    }
  }

  private static long extend(long parent, String name) {
    long h = (parent ^ 0x01) * FNV_PRIME; // separator: a path is never the concatenation of names
    for (int i = 0; i < name.length(); i++) {
      h = (h ^ name.charAt(i)) * FNV_PRIME;
    }
    return h;
  }

  private static long mix(long z) { // SplitMix64 finalizer: sums of mixed values rarely collide
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }

  private static String clip(String s, int n) {
    String one = s.replace('\t', ' ').replace('\n', ' ');
    return one.length() <= n ? one : one.substring(0, n) + "...";
  }
}
