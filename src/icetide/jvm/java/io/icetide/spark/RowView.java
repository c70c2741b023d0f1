package io.icetide.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.CalendarInterval;
import org.apache.spark.unsafe.types.GeographyVal;
import org.apache.spark.unsafe.types.GeometryVal;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.unsafe.types.VariantVal;

/**
 * A table row read, without copying, from the columns of other rows: column {@code c} is field
 * {@code layout[c]} of the decoded record ({@code >= 0}), column {@code -1 - layout[c]} of the frame
 * row, or null ({@link Decoding#NULL}). A routed job's rows sit side by side in its frame (see
 * {@link MultiTableWrite#runRouted}) and a decoded record's fields are the table's columns in
 * another order ({@link MultiTableWrite#runDecoded}), so no row is built per record only for the
 * writer to take it apart again.
 *
 * <p>A null column answers every getter with null (or zero), not only {@link #isNullAt}: Iceberg's
 * Parquet writer reads each column with {@link #get} and lets it return null.
 *
 * <p>Invariant: a view of the rows it was last {@link #of pointed at}; valid until the frame's
 * iterator moves on, as the frame row itself is (a writer reads a row before it asks for the next).
 */
final class RowView extends InternalRow {
  private static final long serialVersionUID = 1L;
  private final int[] layout;
  private final DataType[] types; // the columns' types (for copy)
  private InternalRow record;
  private InternalRow frame;

  RowView(int[] layout, DataType[] types) {
    this.layout = layout;
    this.types = types;
  }

  /** Frame columns {@code start} to {@code start + types.length - 1}. */
  static RowView slice(int start, DataType[] types) {
    int[] layout = new int[types.length];
    for (int c = 0; c < layout.length; c++) {
      layout[c] = -1 - (start + c);
    }
    return new RowView(layout, types);
  }

  RowView of(InternalRow record, InternalRow frame) {
    this.record = record;
    this.frame = frame;
    return this;
  }

  private InternalRow src(int c) {
    return layout[c] >= 0 ? record : frame;
  }

  private int at(int c) {
    int from = layout[c];
    return from >= 0 ? from : -1 - from;
  }

  @Override
  public int numFields() {
    return layout.length;
  }

  @Override
  public void setNullAt(int i) {
    throw new UnsupportedOperationException("a slice of a frame row is read-only");
  }

  @Override
  public void update(int i, Object value) {
    throw new UnsupportedOperationException("a slice of a frame row is read-only");
  }

  @Override
  public InternalRow copy() {
    Object[] values = new Object[layout.length];
    for (int i = 0; i < values.length; i++) {
      values[i] = isNullAt(i) ? null : copied(get(i, types[i]));
    }
    return new GenericInternalRow(values);
  }

  private static Object copied(Object v) {
    if (v instanceof UTF8String) {
      return ((UTF8String) v).copy();
    }
    if (v instanceof InternalRow) {
      return ((InternalRow) v).copy();
    }
    if (v instanceof ArrayData) {
      return ((ArrayData) v).copy();
    }
    if (v instanceof MapData) {
      return ((MapData) v).copy();
    }
    if (v instanceof byte[]) {
      return ((byte[]) v).clone();
    }
    return v;
  }

  @Override
  public boolean isNullAt(int i) {
    return layout[i] == Decoding.NULL || src(i).isNullAt(at(i));
  }

  @Override
  public boolean getBoolean(int i) {
    return layout[i] == Decoding.NULL ? false : src(i).getBoolean(at(i));
  }

  @Override
  public byte getByte(int i) {
    return layout[i] == Decoding.NULL ? 0 : src(i).getByte(at(i));
  }

  @Override
  public short getShort(int i) {
    return layout[i] == Decoding.NULL ? 0 : src(i).getShort(at(i));
  }

  @Override
  public int getInt(int i) {
    return layout[i] == Decoding.NULL ? 0 : src(i).getInt(at(i));
  }

  @Override
  public long getLong(int i) {
    return layout[i] == Decoding.NULL ? 0 : src(i).getLong(at(i));
  }

  @Override
  public float getFloat(int i) {
    return layout[i] == Decoding.NULL ? 0 : src(i).getFloat(at(i));
  }

  @Override
  public double getDouble(int i) {
    return layout[i] == Decoding.NULL ? 0 : src(i).getDouble(at(i));
  }

  @Override
  public Decimal getDecimal(int i, int precision, int scale) {
    return layout[i] == Decoding.NULL ? null : src(i).getDecimal(at(i), precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int i) {
    return layout[i] == Decoding.NULL ? null : src(i).getUTF8String(at(i));
  }

  @Override
  public byte[] getBinary(int i) {
    return layout[i] == Decoding.NULL ? null : src(i).getBinary(at(i));
  }

  @Override
  public GeographyVal getGeography(int i) {
    return layout[i] == Decoding.NULL ? null : src(i).getGeography(at(i));
  }

  @Override
  public GeometryVal getGeometry(int i) {
    return layout[i] == Decoding.NULL ? null : src(i).getGeometry(at(i));
  }

  @Override
  public CalendarInterval getInterval(int i) {
    return layout[i] == Decoding.NULL ? null : src(i).getInterval(at(i));
  }

  @Override
  public VariantVal getVariant(int i) {
    return layout[i] == Decoding.NULL ? null : src(i).getVariant(at(i));
  }

  @Override
  public InternalRow getStruct(int i, int numFields) {
    return layout[i] == Decoding.NULL ? null : src(i).getStruct(at(i), numFields);
  }

  @Override
  public ArrayData getArray(int i) {
    return layout[i] == Decoding.NULL ? null : src(i).getArray(at(i));
  }

  @Override
  public MapData getMap(int i) {
    return layout[i] == Decoding.NULL ? null : src(i).getMap(at(i));
  }

  @Override
  public Object get(int i, DataType type) {
    return layout[i] == Decoding.NULL ? null : src(i).get(at(i), type);
  }
}
