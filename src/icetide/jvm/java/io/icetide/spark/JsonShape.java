package io.icetide.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.IOException;
import java.util.HashSet;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * The shape of a JSON object: a 64-bit fingerprint of the set of its (field path, value kind)
 * pairs; null when the value is not a JSON object (inference never looks at those); {@link
 * #UNKNOWN} when it cannot tell (malformed, too deep, trailing text): such a record is always
 * inferred.
 *
 * <p>Two records with the same shape give the same schema to Spark's JSON inference, so once a
 * shape is known to need no schema change for a table, the records of that shape need no inference
 * at all. Field order, array lengths and repeated array elements do not change the shape; a new
 * field (at any depth), a value of another kind (string, boolean, null, object, array, an integer
 * that fits 32 bits, one that fits 64 bits, a larger one with its digit count, a fraction) does.
 * Strings are one kind whatever they hold.
 */
public final class JsonShape implements UDF1<byte[], Long> {
  private static final long serialVersionUID = 1L;
  /** A shape that is never known: the record always goes through inference. */
  public static final long UNKNOWN = 0L;
  // Spark's JSON reader accepts single quotes and NaN/Infinity by default: so does the fingerprint.
  private static final JsonFactory FACTORY =
      JsonFactory.builder()
          .enable(JsonReadFeature.ALLOW_SINGLE_QUOTES)
          .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
          .build();
  private static final long FNV_OFFSET = 0xcbf29ce484222325L;
  private static final long FNV_PRIME = 0x100000001b3L;
  private static final int MAX_DEPTH = 64;

  /** The UDF (binary → bigint) to apply to a record value column. */
  public static UserDefinedFunction udf() {
    return functions.udf(new JsonShape(), DataTypes.LongType);
  }

  @Override
  public Long call(byte[] value) {
    if (value == null || value.length == 0) {
      return null;
    }
    try (JsonParser p = FACTORY.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      long[] paths = new long[MAX_DEPTH + 1]; // hash of the path at each open container
      boolean[] inArray = new boolean[MAX_DEPTH + 1];
      int depth = 0;
      paths[0] = FNV_OFFSET;
      long sum = 0;
      HashSet<Long> repeated = null; // pairs under an array: counted once, whatever the length
      int arrays = 0;
      long field = 0; // hash of the path of the value about to be read
      JsonToken t;
      while ((t = p.nextToken()) != null) {
        if (t == JsonToken.FIELD_NAME) {
          field = extend(paths[depth], p.currentName());
          continue;
        }
        long here = inArray[depth] ? extend(paths[depth], "[]") : field;
        if (t == JsonToken.END_OBJECT || t == JsonToken.END_ARRAY) {
          if (depth == 0) {
            break; // the record's own closing brace
          }
          if (inArray[depth]) {
            arrays--;
          }
          depth--;
          continue;
        }
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
          if (depth == MAX_DEPTH) {
            return UNKNOWN; // deeper than any table icetide creates: let inference decide
          }
          depth++;
          paths[depth] = here;
          inArray[depth] = t == JsonToken.START_ARRAY;
          if (inArray[depth]) {
            arrays++;
          }
        }
      }
      if (p.nextToken() != null) {
        return UNKNOWN; // trailing text: let inference decide
      }
      return sum == UNKNOWN ? 1L : sum;
    } catch (IOException | RuntimeException e) {
      return UNKNOWN; // malformed here; Spark's own reader decides what the record is
    }
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
}
