package io.icetide.spark;

/** The text checks of a JSON record's bytes, shared by the scan and the decoder. */
final class Utf8 {
  private Utf8() {}

  /**
   * The check of a value that is not well-formed UTF-8 (RFC 3629: no overlong forms, no encoded
   * surrogates, nothing above U+10FFFF; Jackson's byte parser decodes those leniently, and Spark's
   * reader would replace them with U+FFFD), or null. ASCII is skipped a byte at a time.
   */
  static String check(byte[] b) {
    int n = b.length;
    int i = 0;
    while (i < n) {
      while (i < n && b[i] >= 0) {
        i++;
      }
      if (i == n) {
        return null;
      }
      int c = b[i] & 0xff;
      int len = c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
      boolean ok = len > 0 && i + len <= n;
      for (int k = 1; ok && k < len; k++) {
        ok = (b[i + k] & 0xC0) == 0x80;
      }
      if (ok && len >= 3) {
        int c1 = b[i + 1] & 0xff;
        ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0) // overlong, surrogate
            && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90); // overlong, above U+10FFFF
      }
      if (!ok) {
        return String.format(
            "invalid_utf8\tthe record is not valid UTF-8: byte 0x%02x at offset %d", c, i);
      }
      i += len;
    }
    return null;
  }

  /** {@code s} on one line, cut to {@code n} characters. */
  static String clip(String s, int n) {
    String one = s.replace('\t', ' ').replace('\n', ' ');
    return one.length() <= n ? one : one.substring(0, n) + "...";
  }
}
