package io.icetide.spark;

import java.io.Serializable;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * Routing by a JSON field, read by the decoder from the record's own token stream (one record
 * type for all tables): the table is rendered from the value as {@code routing.with_route}
 * renders it; a record the decoder cannot vouch for is routed by Spark's own routing expression
 * ({@code fallback}, bound to the frame), so every record gets the table the usual path gives it.
 */
final class Routing implements Serializable {
  private static final long serialVersionUID = 1L;
  static final String VALUE = "{value}"; // templates have no braces but placeholders
  static final String TOPIC = "{topic}";
  final String[] path;
  final String[] namespace; // pieces: a literal, VALUE or TOPIC
  final String[] table;
  final String[] tables; // for each table of the job's order: its name when routing may name it, else null
  final int topicColumn;
  final org.apache.spark.sql.catalyst.expressions.Expression fallback;
  private transient java.util.HashMap<String, Integer> index;

  Routing(String[] path, String[] namespace, String[] table, String[] tables, int topicColumn,
      org.apache.spark.sql.catalyst.expressions.Expression fallback) {
    this.path = path;
    this.namespace = namespace;
    this.table = table;
    this.tables = tables;
    this.topicColumn = topicColumn;
    this.fallback = fallback;
  }

  /** The position of the record's table in the job's order, or -1 (none of them). */
  int target(JsonRowDecoder d, InternalRow row) {
    String name;
    if (d.routeSure) {
      String v = d.routeText;
      if (v == null || !valueOk(v)) {
        return -1; // missing_route, invalid_route: no table
      }
      String topic = row.isNullAt(topicColumn) ? "" : row.getUTF8String(topicColumn).toString();
      name = render(namespace, v, topic) + "." + render(table, v, topic);
    } else {
      Object got = fallback.eval(row);
      if (got == null) {
        return -1;
      }
      name = got.toString();
    }
    if (index == null) {
      index = new java.util.HashMap<>();
      for (int i = 0; i < tables.length; i++) {
        if (tables[i] != null) {
          index.put(tables[i], i);
        }
      }
    }
    Integer at = index.get(name);
    return at == null ? -1 : at;
  }

  /** routing.VALUE_PATTERN: 1-64 of A-Z a-z 0-9 _. */
  static boolean valueOk(String v) {
    int n = v.length();
    if (n == 0 || n > 64) {
      return false;
    }
    for (int i = 0; i < n; i++) {
      char c = v.charAt(i);
      if (!(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_')) {
        return false;
      }
    }
    return true;
  }

  private static String render(String[] pieces, String value, String topic) {
    StringBuilder out = new StringBuilder();
    for (String p : pieces) {
      if (VALUE.equals(p)) {
        out.append(value.toLowerCase(java.util.Locale.ROOT));
      } else if (TOPIC.equals(p)) {
        out.append(topic.replace('.', '_').replace('-', '_').toLowerCase(java.util.Locale.ROOT));
      } else {
        out.append(p);
      }
    }
    return out.toString();
  }

  /** {@code column} as an expression evaluated on the rows of {@code frame}'s job. */
  static org.apache.spark.sql.catalyst.expressions.Expression bind(
      Dataset<Row> frame, org.apache.spark.sql.Column column) {
    org.apache.spark.sql.catalyst.plans.logical.LogicalPlan plan =
        org.apache.spark.sql.catalyst.optimizer.ReplaceExpressions$.MODULE$.apply(
            frame.select(column).queryExecution().analyzed());
    if (!(plan instanceof org.apache.spark.sql.catalyst.plans.logical.Project)) {
      throw new IllegalStateException("cannot bind " + column + ": " + plan.simpleString(200));
    }
    org.apache.spark.sql.catalyst.expressions.Expression e =
        (org.apache.spark.sql.catalyst.expressions.Expression)
            ((org.apache.spark.sql.catalyst.plans.logical.Project) plan).projectList().head();
    return org.apache.spark.sql.catalyst.expressions.BindReferences$.MODULE$.bindReference(
        e, org.apache.spark.sql.catalyst.expressions.package$.MODULE$.AttributeSeq(
            frame.queryExecution().analyzed().output()), false);
  }
}
