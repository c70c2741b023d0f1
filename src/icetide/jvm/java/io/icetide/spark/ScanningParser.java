package io.icetide.spark;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.SerializableString;
import com.fasterxml.jackson.core.util.JsonParserDelegate;
import java.io.IOException;

/**
 * A parser that hands every token it reads to {@link JsonChecks} on the way, so whoever reads the
 * record (Spark's converter to a row) takes its checks and shape in the same pass.
 *
 * <p>Invariants: every token reaches the checks exactly once, however it is read ({@code
 * nextToken}, {@code nextValue}, {@code skipChildren} of a field the row does not have, a
 * generator copying a value as text); a failed check throws {@link CheckFailed} at the token that
 * failed it; {@link #close} reads the rest of a record its reader left early and looks for text
 * after it, so the shape is the one {@link JsonScan} gives the same bytes.
 */
final class ScanningParser extends JsonParserDelegate {
  /** A record check failed ({@link JsonChecks#failure}): the record is a dead letter. */
  static final class CheckFailed extends RuntimeException {
    private static final long serialVersionUID = 1L;

    CheckFailed(String check) {
      super(check, null, false, false);
    }
  }

  private final JsonChecks checks;
  private boolean closed;

  ScanningParser(JsonParser parser, JsonChecks checks) {
    super(parser);
    this.checks = checks;
  }

  @Override
  public JsonToken nextToken() throws IOException {
    JsonToken t;
    try {
      t = delegate.nextToken();
    } catch (IOException | RuntimeException e) {
      checks.parserError();
      throw e;
    }
    String failed;
    try {
      failed = checks.token(delegate, t);
    } catch (IOException | RuntimeException e) { // a string that is not UTF-8, a number it cannot read
      checks.parserError();
      throw e;
    }
    if (failed != null) {
      throw new CheckFailed(failed);
    }
    return t;
  }

  @Override
  public JsonToken nextValue() throws IOException {
    JsonToken t = nextToken();
    return t == JsonToken.FIELD_NAME ? nextToken() : t;
  }

  @Override
  public String nextFieldName() throws IOException {
    return nextToken() == JsonToken.FIELD_NAME ? currentName() : null;
  }

  @Override
  public boolean nextFieldName(SerializableString str) throws IOException {
    return nextToken() == JsonToken.FIELD_NAME && str.getValue().equals(currentName());
  }

  @Override
  public String nextTextValue() throws IOException {
    return nextToken() == JsonToken.VALUE_STRING ? getText() : null;
  }

  @Override
  public int nextIntValue(int defaultValue) throws IOException {
    return nextToken() == JsonToken.VALUE_NUMBER_INT ? getIntValue() : defaultValue;
  }

  @Override
  public long nextLongValue(long defaultValue) throws IOException {
    return nextToken() == JsonToken.VALUE_NUMBER_INT ? getLongValue() : defaultValue;
  }

  @Override
  public Boolean nextBooleanValue() throws IOException {
    JsonToken t = nextToken();
    return t == JsonToken.VALUE_TRUE ? Boolean.TRUE : t == JsonToken.VALUE_FALSE ? Boolean.FALSE : null;
  }

  @Override
  public JsonParser skipChildren() throws IOException {
    JsonToken t = currentToken();
    if (t != JsonToken.START_OBJECT && t != JsonToken.START_ARRAY) {
      return this;
    }
    int open = 1;
    while (true) {
      JsonToken n = nextToken();
      if (n == null) {
        return this;
      }
      if (n.isStructStart()) {
        open++;
      } else if (n.isStructEnd() && --open == 0) {
        return this;
      }
    }
  }

  @Override
  public void close() throws IOException {
    if (closed) {
      return;
    }
    closed = true;
    try {
      while (checks.open()) { // the reader stopped early (a value it could not convert): read on
        nextToken();
      }
      if (checks.done() && checks.shape() != JsonChecks.UNKNOWN) {
        try {
          if (delegate.nextToken() != null) {
            checks.trailingText();
          }
        } catch (IOException | RuntimeException e) {
          checks.trailingText();
        }
      }
    } catch (IOException | RuntimeException e) {
      checks.parserError(); // a failed check has its own record; the shape is unknown either way
    } finally {
      delegate.close();
    }
  }
}
