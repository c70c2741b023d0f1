"""The JFR summary behind the benchmarks' profiles: executor threads only, components counted inclusively."""

from __future__ import annotations

from benchmarks.profile_summary import render, summarize

PRINTED = '''
jdk.ExecutionSample {
  startTime = 22:07:01.123
  sampledThread = "Executor task launch worker for task 1.0 in stage 3.0 (TID 7)" (javaThreadId = 91)
  state = "STATE_RUNNABLE"
  stackTrace = [
    org.apache.iceberg.shaded.org.apache.parquet.io.api.Binary.equals(Object) line: 12
    org.apache.parquet.column.values.dictionary.DictionaryValuesWriter.writeBytes(Binary) line: 3
    org.apache.spark.sql.catalyst.expressions.GeneratedClass$SpecificUnsafeProjection.apply(Object) line: 1
  ]
}

jdk.ExecutionSample {
  startTime = 22:07:01.133
  sampledThread = "Executor task launch worker for task 2.0 in stage 3.0 (TID 8)" (javaThreadId = 92)
  stackTrace = [
    org.apache.avro.io.BinaryDecoder.readLong() line: 5
    org.apache.spark.sql.avro.AvroDataToCatalyst.nullSafeEval(Object) line: 2
  ]
}

jdk.ExecutionSample {
  startTime = 22:07:01.143
  sampledThread = "driver-heartbeater" (javaThreadId = 12)
  stackTrace = [
    org.apache.avro.io.BinaryDecoder.readLong() line: 5
  ]
}
'''


def test_executor_samples_count_for_every_component_on_their_stack() -> None:
    s = summarize(PRINTED)
    assert s.samples == 2  # the heartbeat thread is not an executor's
    assert s.components["Iceberg and Parquet write"] == 1
    assert s.components["of which Parquet dictionary encoding"] == 1
    assert s.components["Spark generated code"] == 1
    assert s.components["Avro: binary decoding"] == 1 and s.components["Avro: from_avro expression"] == 1
    assert s.components["Kafka read"] == 0
    assert s.top == {"org.apache.iceberg.shaded.org.apache.parquet.io.api.Binary.equals": 1,
                     "org.apache.avro.io.BinaryDecoder.readLong": 1}
    text = render(s, 5)
    assert "executor samples: 2" in text and "| Spark generated code | 1 | 50.0% |" in text
