package io.icetide.spark;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Locale;

/**
 * The record checks and the shape fingerprint of one JSON record, taken token by token as a parser
 * reads it (no recursion, so no depth can exhaust a stack). One instance reads one record at a time
 * ({@link #reset}); {@link JsonScan} drives it over a parser of its own, {@link ScanningParser} over
 * the parser Spark's converter reads, so a record is read once for its checks, shape and row.
 *
 * <p>Checks (a failure is {@code "<error class>\t<message>"}): nesting deeper than {@code
 * maxDepth}, more than {@code maxFields} field names, a field name twice in one object ignoring
 * case (exact duplicates are the parser's: {@code STRICT_DUPLICATE_DETECTION}), a top-level name
 * with one of icetide's reserved prefixes, an empty field name, NaN or Infinity as a number.
 *
 * <p>Shape: a 64-bit fingerprint of the set of the object's (field path, value kind) pairs; none
 * when the value is not a JSON object; {@link #UNKNOWN} when it cannot tell (a parser error, a
 * failed check, deeper than {@link #MAX_SHAPE_DEPTH}, trailing text). Field order, array lengths and
 * repeated array elements do not change it; a new field at any depth, or a value of another kind
 * (string, boolean, null, object, array, an integer that fits 32 bits, one that fits 64 bits, a
 * larger one with its digit count, a fraction) does. Invariant: both drivers give one record the
 * same checks and shape (the batch's shapes are compared across both paths).
 */
final class JsonChecks {
  /** A shape that is never known: the record always goes through inference. */
  static final long UNKNOWN = 0L;
  /** Deeper than this the shape is {@link #UNKNOWN} (deeper than any table icetide creates). */
  static final int MAX_SHAPE_DEPTH = 64;

  private static final long FNV_OFFSET = 0xcbf29ce484222325L;
  private static final long FNV_PRIME = 0x100000001b3L;
  private static final int NEW = 0;
  private static final int IN = 1;
  private static final int DONE = 2;
  private static final int NOT_OBJECT = 3;
  private static final int FAILED = 4;

  private final int maxDepth;
  private final int maxFields;
  private final String[] reserved; // lower-case prefixes of top-level names

  private int state;
  private String failure;
  private boolean error; // the parser threw: the shape is unknown
  private boolean trailing;
  private int depth; // open containers; the record's own object is 1
  private int fields;
  private int arrays; // open arrays (on the shape's path)
  private boolean tooDeep;
  private long sum;
  private long field; // hash of the path of the value about to be read
  private final long[] paths = new long[MAX_SHAPE_DEPTH + 1];
  private final boolean[] inArray = new boolean[MAX_SHAPE_DEPTH + 1];
  // per open container (index depth - 1): the lower-cased names of that object; null for an array
  private final ArrayList<HashSet<String>> names = new ArrayList<>();
  private final ArrayList<Boolean> isObject = new ArrayList<>();
  private HashSet<Long> repeated; // pairs under an array: counted once, whatever the length
  // the routing field (see route): its path, the field name open at each level, what was found
  private String[] routePath;
  private String[] fieldAt;
  private String routeText;
  private boolean routeOdd;

  JsonChecks(int maxDepth, int maxFields, String[] reserved) {
    this.maxDepth = maxDepth;
    this.maxFields = maxFields;
    this.reserved = reserved.clone();
  }

  /** Starts a new record. */
  void reset() {
    state = NEW;
    failure = null;
    error = false;
    trailing = false;
    depth = 0;
    fields = 0;
    arrays = 0;
    tooDeep = false;
    sum = 0;
    field = 0;
    if (repeated != null) {
      repeated.clear();
    }
    routeText = null;
    routeOdd = false;
  }

  /**
   * Also takes the string at {@code path} (a routing field, e.g. {@code ["meta", "tenant"]}) as
   * the record goes by: {@link #routeText}, or {@link #routeOdd} when something is at the path that
   * is not a string in objects all the way down (then only Spark's {@code get_json_object} can tell
   * what routing reads there).
   */
  void route(String[] path) {
    routePath = path.clone();
    fieldAt = new String[path.length];
  }

  /** The string at the routing path, or null (absent, or see {@link #routeOdd}). */
  String routeText() {
    return routeText;
  }

  /** Whether the routing path holds something other than a string reached through objects. */
  boolean routeOdd() {
    return routeOdd;
  }

  /** Whether text followed the record's object. */
  boolean trailing() {
    return trailing;
  }

  /** The parser threw while reading the record (malformed, not UTF-8, a duplicate): shape unknown. */
  void parserError() {
    error = true;
  }

  /** Text after the record's object (or an error reading past it): shape unknown. */
  void trailingText() {
    trailing = true;
  }

  /** Whether the record's object is open (a reader stopped early must read on, see {@link ScanningParser}). */
  boolean open() {
    return state == IN;
  }

  /** Whether the record's object was read to its end with no failure. */
  boolean done() {
    return state == DONE && !error;
  }

  /** The failed check, {@code "<class>\t<message>"}, or null. */
  String failure() {
    return failure;
  }

  /** Whether the record has a shape at all (it is, or failed to parse as, a JSON object). */
  boolean hasShape() {
    return state != NOT_OBJECT && (state != NEW || error);
  }

  /** The record's shape (see the class comment); call after the record was read. */
  long shape() {
    if (error || state != DONE || tooDeep || depth > 0 || trailing) {
      return UNKNOWN;
    }
    return sum == UNKNOWN ? 1L : sum;
  }

  /**
   * Observes the token the parser has just read ({@code t}, null at the end of input).
   *
   * @return the failed check, or null
   */
  String token(JsonParser p, JsonToken t) throws IOException {
    switch (state) {
      case NEW:
        if (t != JsonToken.START_OBJECT) {
          state = NOT_OBJECT;
          return null;
        }
        state = IN;
        depth = 1;
        paths[0] = FNV_OFFSET;
        openLevel(0, true);
        return null;
      case IN:
        return inside(p, t);
      case DONE:
        if (t != null) {
          trailing = true;
        }
        return null;
      default:
        return failure;
    }
  }

  private String inside(JsonParser p, JsonToken t) throws IOException {
    if (t == null) {
      state = DONE; // still open: the shape is unknown (the parser reports the truncation)
      return null;
    }
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
            return failed("reserved_field\tfield '" + Utf8.clip(name, 64) + "': top-level names starting with "
                + String.join(", ", reserved) + " are reserved for icetide's columns; rename it upstream");
          }
        }
      }
      if (isObject.get(s) && !names.get(s).add(lower)) {
        return failed("ambiguous_field\tfield '" + Utf8.clip(name, 64) + "' differs from another field of the same "
            + "object only by case; Spark and Iceberg resolve names ignoring case");
      }
      if (!tooDeep) {
        field = extend(paths[s], name);
      }
      if (routePath != null && s < routePath.length) {
        fieldAt[s] = name;
      }
      return null;
    }
    if (t == JsonToken.END_OBJECT || t == JsonToken.END_ARRAY) {
      if (!tooDeep && s <= MAX_SHAPE_DEPTH && inArray[s]) {
        arrays--;
      }
      if (--depth == 0) {
        state = DONE;
      }
      return null;
    }
    if (routePath != null && s < routePath.length && onRoute(s)) {
      if (s == routePath.length - 1 && t == JsonToken.VALUE_STRING && routeText == null) {
        routeText = p.getText();
      } else if (s == routePath.length - 1 || t != JsonToken.START_OBJECT) {
        routeOdd = true;
      }
    }
    if (t == JsonToken.VALUE_STRING) {
      p.getTextLength(); // decodes the string: invalid UTF-8 fails here
    } else if (t == JsonToken.VALUE_NUMBER_FLOAT && p.isNaN()) { // a parser that allows them
      return failed("non_finite_number\tNaN and Infinity are not JSON numbers; send null (or a string) instead");
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
          tooDeep = true; // the checks go on; the shape is unknown
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
      openLevel(depth - 1, t == JsonToken.START_OBJECT);
    }
    return null;
  }

  /** Whether the value about to be read at level {@code s} is the one at the routing path's first s+1 names. */
  private boolean onRoute(int s) {
    for (int k = 0; k <= s; k++) {
      if (!isObject.get(k) || !routePath[k].equals(fieldAt[k])) {
        return false;
      }
    }
    return true;
  }

  private void openLevel(int level, boolean object) {
    while (names.size() <= level) {
      names.add(null);
      isObject.add(Boolean.FALSE);
    }
    isObject.set(level, object);
    if (routePath != null && level < routePath.length) {
      fieldAt[level] = null; // a new container: no field of it is open yet
    }
    if (object) {
      HashSet<String> set = names.get(level);
      if (set == null || set.size() > 256) {
        names.set(level, new HashSet<>()); // a wide object's table is not cleared record after record
      } else {
        set.clear();
      }
    }
  }

  private String failed(String check) {
    state = FAILED;
    failure = check;
    return check;
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
      case VALUE_STRING: // "" apart: Spark infers it as null, so a shape of "" alone drops its field
        return p.getTextLength() == 0 ? 10 : 3;
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
