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
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * Checks a record value for shapes no table should take, in one streaming pass (no recursion, so
 * no depth can exhaust a stack): nesting deeper than {@code maxDepth}, more than {@code maxFields}
 * field names, a field name twice in one object (exactly, or ignoring case: Spark and Iceberg
 * resolve names ignoring case), a top-level field name with one of icetide's reserved prefixes,
 * an empty field name, NaN or Infinity as a number, bytes that are not UTF-8.
 *
 * <p>Returns null for a value that passes (or that is not a JSON object, or not JSON at all: Spark's
 * own reader classifies those), else {@code "<error class>\t<message>"}.
 */
public final class JsonCheck implements UDF1<byte[], String> {
  private static final long serialVersionUID = 1L;
  // arrays hold no field names: one shared placeholder, never written to
  private static final HashSet<String> NO_NAMES = new HashSet<>();
  private final int maxDepth;
  private final int maxFields;
  private final String[] reserved; // lower-case prefixes of top-level names
  private transient JsonFactory factory;

  public JsonCheck(int maxDepth, int maxFields, String[] reserved) {
    this.maxDepth = maxDepth;
    this.maxFields = maxFields;
    this.reserved = reserved.clone();
  }

  /** The UDF (binary → string) to apply to a record value column. */
  public static UserDefinedFunction udf(int maxDepth, int maxFields, String[] reserved) {
    return functions.udf(new JsonCheck(maxDepth, maxFields, reserved), DataTypes.StringType);
  }

  private JsonFactory factory() {
    if (factory == null) {
      // Spark's JSON reader accepts single quotes by default: so does the check. NaN/Infinity are
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
  public String call(byte[] value) {
    if (value == null || value.length == 0) {
      return null;
    }
    try (JsonParser p = factory().createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      int depth = 1;
      int fields = 0;
      // per open container: the lower-cased names seen in that object (null for an array)
      ArrayDeque<HashSet<String>> names = new ArrayDeque<>();
      names.push(new HashSet<>());
      JsonToken t;
      while (depth > 0 && (t = p.nextToken()) != null) {
        switch (t) {
          case FIELD_NAME:
            if (++fields > maxFields) {
              return "too_wide\tthe record has more than " + maxFields + " fields (source.max_fields)";
            }
            String name = p.currentName();
            if (name.isEmpty()) {
              return "invalid_field\ta field name is empty (names must match [A-Za-z_][A-Za-z0-9_]{0,127})";
            }
            String lower = name.toLowerCase(Locale.ROOT);
            if (depth == 1) {
              for (String prefix : reserved) {
                if (lower.startsWith(prefix)) {
                  return "reserved_field\tfield '" + clip(name, 64) + "': top-level names starting with "
                      + String.join(", ", reserved) + " are reserved for icetide's columns; rename it upstream";
                }
              }
            }
            HashSet<String> here = names.peek();
            if (!here.add(lower)) {
              return "ambiguous_field\tfield '" + clip(name, 64) + "' differs from another field of the same "
                  + "object only by case; Spark and Iceberg resolve names ignoring case";
            }
            break;
          case START_OBJECT:
          case START_ARRAY:
            if (++depth > maxDepth) {
              return "too_deep\tthe record is nested more than " + maxDepth + " levels (source.max_depth)";
            }
            names.push(t == JsonToken.START_OBJECT ? new HashSet<>() : NO_NAMES);
            break;
          case END_OBJECT:
          case END_ARRAY:
            depth--;
            names.pop();
            break;
          case VALUE_STRING:
            p.getTextLength(); // decodes the string: invalid UTF-8 fails here
            break;
          default:
            break;
        }
      }
      return null;
    } catch (JsonParseException e) {
      String m = String.valueOf(e.getOriginalMessage());
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
    } catch (CharConversionException e) {
      return "invalid_utf8\tthe record is not valid UTF-8: " + clip(String.valueOf(e.getMessage()), 120);
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }

  private static String clip(String s, int n) {
    String one = s.replace('\t', ' ').replace('\n', ' ');
    return one.length() <= n ? one : one.substring(0, n) + "...";
  }
}
