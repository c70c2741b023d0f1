"""Pure rules behind "nothing from outside can stop the pipeline": the restart budget, the
fault-injection switch, and evolution's naming rules (case, reserved prefixes)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from icetide import faults
from icetide.ingest.evolution import diff
from icetide.lake.offsets import Watermark
from icetide.loops import RestartBudget


def test_restart_budget_counts_consecutive_failures_not_a_lifetime() -> None:
    b = RestartBudget(3)
    # ten failures over a long life, each after progress: never used up
    assert all(b.failed(progress) for progress in range(1, 11))
    assert b.used == 1
    # four in a row without a batch committed in between: the fourth is refused
    assert [b.failed(10) for _ in range(3)] == [True, True, False]
    assert b.used == 4
    assert b.failed(11) and b.used == 1  # a batch committed: the streak starts over


def test_restart_backoff_doubles_and_is_capped() -> None:
    b = RestartBudget(10, max_backoff=20.0)
    waits = []
    for _ in range(6):
        b.failed(0)
        waits.append(b.backoff())
    assert waits == [2.0, 4.0, 8.0, 16.0, 20.0, 20.0]


def test_fault_spec_parses_point_count_and_text() -> None:
    f = faults.parse("before_table_commit@2:ns.k1")
    assert f is not None and (f.point, f.nth, f.text) == ("before_table_commit", 2, "ns.k1")
    assert faults.parse("after_batch_before_checkpoint") == faults.Fault("after_batch_before_checkpoint")
    assert faults.parse("") is None and faults.parse(None) is None


@pytest.mark.parametrize("spec", ["no_such_point", "after_table_commit@x", "after_table_commit@-1",
                                  "after_table_commit@0"])
def test_fault_spec_errors_name_the_variable(spec: str) -> None:
    with pytest.raises(ValueError, match="ICETIDE_FAULT"):
        faults.parse(spec)


def test_an_unset_fault_switch_never_fires() -> None:
    faults.point("before_table_commit", "anything")  # returns: the test process is still here


def _schema(*names: str) -> StructType:
    return StructType([StructField(n, LongType(), True) for n in names])


def test_evolution_never_adds_a_name_equal_ignoring_case_to_a_column() -> None:
    evo = diff(_schema("id", "amount"), _schema("ID", "Amount", "fresh"), 100)
    assert [p.name for p, _ in evo.added] == ["fresh"]
    assert sorted((p.name, c) for p, c in evo.rejected) == [("Amount", "ambiguous_field"), ("ID", "ambiguous_field")]


def test_of_two_new_names_equal_ignoring_case_the_lower_case_one_is_added() -> None:
    evo = diff(StructType([]), _schema("Color", "COLOR", "color"), 100)
    assert [p.name for p, _ in evo.added] == ["color"]
    assert sorted(p.name for p, _ in evo.rejected) == ["COLOR", "Color"]


def test_evolution_never_adds_icetide_reserved_top_level_names_but_allows_them_nested() -> None:
    nested = StructType([StructField("_kafka_topic", StringType(), True)])
    seen = StructType([StructField("_kafka_topic", LongType(), True), StructField("_ICETIDE_x", LongType(), True),
                       StructField("_cdc_op", StringType(), True), StructField("payload", nested, True)])
    evo = diff(StructType([]), seen, 100)
    assert [p.name for p, _ in evo.added] == ["payload"]
    assert {c for _, c in evo.rejected} == {"reserved_field"} and len(evo.rejected) == 3


def test_evolution_case_rule_applies_inside_structs() -> None:
    have = StructType([StructField("s", StructType([StructField("a", LongType(), True)]), True)])
    seen = StructType([StructField("s", StructType([StructField("A", LongType(), True),
                                                    StructField("b", LongType(), True)]), True)])
    evo = diff(have, seen, 100)
    assert [p.name for p, _ in evo.added] == ["s.b"]
    assert [(p.name, c) for p, c in evo.rejected] == [("s.A", "ambiguous_field")]


def test_a_fence_expects_the_snapshot_it_read_and_nothing_for_a_mirrored_watermark() -> None:
    tagged = Watermark(offsets={("t", 0): 5}, run="r1", batch=7)
    assert tagged.fence() == ("r1", 7)
    mirrored = Watermark.from_property(tagged.to_property())
    assert mirrored.source == "property" and mirrored.fence() == (None, -1)


def test_retention_cuts_whole_days_and_covers_only_icetide_logs() -> None:
    from datetime import datetime

    from icetide.config.models import PipelineConfig
    from icetide.maintenance.retention import cutoff, targets

    now = int(datetime(2026, 11, 26, 15, 30).timestamp() * 1000)
    assert cutoff(now, 30 * 86400) == datetime(2026, 10, 27)
    cfg = PipelineConfig.model_validate({
        "name": "p", "source": {"bootstrap_servers": "k:9092", "topics": ["t"]},
        "catalog": {"type": "jdbc", "uri": "jdbc:sqlite:/tmp/x.db", "warehouse": "/tmp/w"},
        "target": {"table": "ns.events"}})
    tables = {t for t, _, _ in targets(cfg)}
    assert cfg.dead_letter.table not in tables  # dead letters are kept unless asked
    assert {cfg.stream.batch_log_table, cfg.health.history_table, cfg.maintenance.log_table} <= tables
    assert "ns.events" not in tables
    cfg2 = cfg.model_copy(update={"dead_letter": cfg.dead_letter.model_copy(update={"retention": "7 days"})})
    assert (cfg.dead_letter.table, "_kafka_timestamp", 7 * 86400.0) in targets(cfg2)


def test_a_column_type_follows_most_values_not_one_outlier() -> None:
    from pyspark.sql.types import BooleanType, DoubleType

    from icetide.ingest.value_checks import _majority

    assert _majority(present=300, numbers=299, integers=299, booleans=0) == LongType()
    assert _majority(present=300, numbers=299, integers=120, booleans=0) == DoubleType()
    assert _majority(present=300, numbers=0, integers=0, booleans=299) == BooleanType()
    assert _majority(present=300, numbers=1, integers=1, booleans=0) is None  # strings win: keep string
    assert _majority(present=2, numbers=1, integers=1, booleans=0) is None  # half is not most
    assert _majority(present=6, numbers=2, integers=1, booleans=2) is None  # no kind is a majority
    assert _majority(present=1, numbers=1, integers=1, booleans=0) is None


def test_item8_a_batch_failure_is_never_terminal_unless_it_is_configuration() -> None:
    """#31 item 8: an AnalysisException provoked by a batch's records (a routed name colliding with
    an alias, say) is marked by the sink and restarted within the budget; a ConfigError stops."""
    from icetide.app.runner import _terminal
    from icetide.errors import BATCH_MARKER

    spark_text = ("StreamingQueryException: [FOREACH_BATCH_USER_FUNCTION_ERROR] ... BatchFailedError: "
                  f"{BATCH_MARKER} batch 4: [AMBIGUOUS_REFERENCE] AnalysisException: Reference `x`.`id` is ambiguous")
    assert not _terminal(RuntimeError(spark_text))
    assert _terminal(RuntimeError("pyspark.errors.exceptions.captured.AnalysisException: [TABLE_OR_VIEW_NOT_FOUND]"))
    assert _terminal(RuntimeError(f"{BATCH_MARKER} ... icetide.errors.ConfigError: target.schema: not a valid"))


def test_item13_case_clashes_across_records_are_refused_at_any_depth_in_a_new_field() -> None:
    """#31 item 13: {"meta":{"A":1}} and {"meta":{"a":2}} in one batch infer meta struct<A, a>; the new
    column keeps one spelling (lower case first) at every depth, also inside lists and deeper structs."""
    inner = StructType([StructField("X", LongType(), True), StructField("x", LongType(), True)])
    meta = StructType([StructField("A", LongType(), True), StructField("a", LongType(), True),
                       StructField("deep", inner, True)])
    seen = StructType([StructField("meta", meta, True),
                       StructField("items", ArrayType(StructType([StructField("K", LongType(), True),
                                                                  StructField("k", LongType(), True)])), True)])
    evo = diff(StructType([]), seen, 100)
    added = dict((p.name, t) for p, t in evo.added)
    assert added["meta"].simpleString() == "struct<a:bigint,deep:struct<x:bigint>>"
    assert added["items"].simpleString() == "array<struct<k:bigint>>"
    assert sorted((p.name, c) for p, c in evo.rejected) == [
        ("items.element.K", "ambiguous_field"), ("meta.A", "ambiguous_field"), ("meta.deep.X", "ambiguous_field")]


def test_item12_everyday_field_names_are_kept() -> None:
    """#31 item 12: HTTP headers, OpenTelemetry attributes and analytics fields keep their names;
    only what no engine can hold is refused."""
    from icetide.ingest import names

    everyday = ["user-agent", "service.name", "Order Id", "2fa", "größe", "$ref", "a/b", "x" * 255]
    seen = StructType([StructField(n, LongType(), True) for n in everyday]
                      + [StructField("attributes", StructType([StructField("http.status_code", LongType(), True)]),
                                     True)])
    evo = diff(StructType([]), seen, 1000)
    assert sorted(p.name for p, _ in evo.added) == sorted([*everyday, "attributes"]) and not evo.rejected
    bad = ["", "tab\there", "bell\x07", "x" * 256]
    assert [names.problem(n) is not None for n in bad] == [True] * 4
    evo = diff(StructType([]), StructType([StructField(n, LongType(), True) for n in bad[1:]]), 1000)
    assert sorted(c for _, c in evo.rejected) == ["invalid_field"] * 3 and not evo.added


def test_item12_a_dotted_name_never_collides_with_a_nested_path() -> None:
    """A top-level 'service.name' and a struct 'service' holding 'name' are the same name to Iceberg:
    whichever comes second is refused, whether the table has the first or the same batch adds it."""
    service = StructField("service", StructType([StructField("name", StringType(), True)]), True)
    dotted = StructField("service.name", StringType(), True)
    evo = diff(StructType([service]), StructType([service, dotted]), 100)
    assert [(p.name, c) for p, c in evo.rejected] == [("service.name", "ambiguous_field")] and not evo.added
    evo = diff(StructType([dotted]), StructType([dotted, service]), 100)
    assert [(p.name, c) for p, c in evo.rejected] == [("service", "ambiguous_field")]
    evo = diff(StructType([]), StructType([service, dotted]), 100)  # both new in one batch
    assert len(evo.added) == 1 and [c for _, c in evo.rejected] == ["ambiguous_field"]
    # inside a list the short form counts too: items.element.id is also items.id
    items = StructField("items", ArrayType(StructType([StructField("id", LongType(), True)])), True)
    evo = diff(StructType([items]), StructType([items, StructField("items.id", LongType(), True)]), 100)
    assert [c for _, c in evo.rejected] == ["ambiguous_field"]


def test_item12_sanitize_gives_identifiers_and_remembers_the_producers_names() -> None:
    from icetide.ingest import names

    assert [names.sanitize(n) for n in ["user-agent", "service.name", "Order Id", "2fa", "größe", "ok_1"]] == [
        "user_x2Dagent", "service_x2Ename", "Order_x20Id", "_2fa", "gr_xF6_xDFe", "ok_1"]
    seen = StructType([StructField("user-agent", StringType(), True),
                       StructField("attributes", StructType([StructField("service.name", StringType(), True)]), True),
                       StructField("user_x2Dagent", StringType(), True)])  # a literal that maps to the same name
    table_type = names.sanitized_type(seen)
    assert table_type.simpleString() == ("struct<user_x2Dagent:string,attributes:struct<service_x2Ename:string>,"
                                         "user_x2Dagent:string>")
    assert names.record_type(table_type) == StructType([  # what the records are read by
        StructField("user-agent", StringType(), True),
        StructField("attributes", StructType([StructField("service.name", StringType(), True)]), True),
        StructField("user_x2Dagent", StringType(), True)])
    assert names.renamed(table_type) and not names.renamed(seen)
    evo = diff(StructType([]), table_type, 100)
    added = {p.name: p for p, _ in evo.added}
    assert added["user_x2Dagent"].given == ("user-agent",)  # the value checks read the producer's name
    assert evo.comments[added["user_x2Dagent"]] == names.ORIGINAL + "user-agent"
    assert [(p.name, c) for p, c in evo.rejected] == [("user_x2Dagent", "ambiguous_field")]  # never merged


def test_item12_sanitized_names_keep_the_producers_name_at_every_depth_through_evolution() -> None:
    from icetide.ingest import names

    seen = StructType([StructField("attributes", StructType([StructField("service.name", StringType(), True),
                                                             StructField("empty", StructType([]), True)]), True)])
    evo = diff(StructType([]), names.sanitized_type(seen), 100)
    [(_, added)] = evo.added
    assert isinstance(added, StructType) and [f.name for f in added.fields] == ["service_x2Ename"]
    assert names.record_type(added) == StructType([StructField("service.name", StringType(), True)])


def test_hole7_the_producers_names_live_in_a_table_property_and_collisions_are_refused() -> None:
    """#41, hole 7: a column comment is documentation a user may edit; the mapping records are read
    by lives in the table property, and a literal field equal to a sanitized column (or the other way
    round) is refused, never read into the other field's column."""
    from icetide.ingest import names

    seen = StructType([StructField("user-agent", StringType(), True),
                       StructField("attributes", StructType([StructField("service.name", StringType(), True)]), True),
                       StructField("tags", ArrayType(StructType([StructField("größe", LongType(), True)])), True)])
    table = names.sanitized_type(seen)
    assert isinstance(table, StructType)
    mapping = names.originals(table)
    assert mapping == {"user_x2Dagent": "user-agent", "attributes.service_x2Ename": "service.name",
                       "tags.element.gr_xF6_xDFe": "größe"}
    # a user edits one comment and copies the marker onto another column: the property still rules
    edited = StructType([StructField("user_x2Dagent", StringType(), True, {"comment": "the client"}),
                         StructField("note", StringType(), True, {"comment": names.ORIGINAL + "user-agent"}),
                         *table.fields[1:]])
    read = names.record_type(names.with_originals(edited, mapping))
    assert isinstance(read, StructType)
    assert [f.name for f in read.fields] == ["user-agent", "note", "attributes", "tags"]
    assert read["attributes"].dataType == StructType([StructField("service.name", StringType(), True)])
    assert names.with_originals(edited, None) is edited  # a table made before the property: the comments
    # a literal "user_x2Dagent" arrives at a table whose user_x2Dagent is "user-agent": refused
    literal = names.sanitized_type(StructType([StructField("user_x2Dagent", StringType(), True)]))
    evo = diff(table, literal, 100)  # type: ignore[arg-type]
    assert [(p.name, p.given, c) for p, c in evo.rejected] == [("user_x2Dagent", ("user_x2Dagent",), "name_collision")]
    # and the other way round: a literal column, then "user-agent"
    evo = diff(StructType([StructField("user_x2Dagent", StringType(), True)]), table, 100)
    assert ("user_x2Dagent", ("user-agent",), "name_collision") in [(p.name, p.given, c) for p, c in evo.rejected]
    assert not diff(table, table, 100).rejected  # the same names again: nothing refused


def test_chaos_1202_a_catalog_restarting_while_the_query_starts_is_waited_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Chaos seed 1202: the REST catalog went down while a restarted run loaded its tables to start
    its query; the run exited 1 (the error escaped the restart loop). Now it is a failed start, waited
    out within the restart budget; a terminal error still stops at once."""
    import threading
    from types import SimpleNamespace

    from icetide.app.runner import Runner
    from icetide.errors import ConfigError

    r = Runner.__new__(Runner)
    r.restarts = 0
    r._stop = threading.Event()
    r.writer = SimpleNamespace(counters=SimpleNamespace(batches=0))  # type: ignore[assignment]
    failures = [RuntimeError("Py4JJavaError: org.apache.iceberg.exceptions.RESTException: Error occurred while "
                             "processing GET request")] * 2
    started = object()

    def start() -> object:
        if failures:
            raise failures.pop()
        return started
    monkeypatch.setattr(r, "_start", start)
    waits: list[float] = []
    monkeypatch.setattr(r._stop, "wait", lambda s: waits.append(s) or False)
    assert r._start_or_wait(RestartBudget(10)) is started and waits == [2.0, 4.0] and r.restarts == 2
    monkeypatch.setattr(r, "_start", lambda: (_ for _ in ()).throw(ConfigError("target.table: no")))
    with pytest.raises(ConfigError):
        r._start_or_wait(RestartBudget(10))
    failures[:] = [RuntimeError("RESTException")] * 3
    monkeypatch.setattr(r, "_start", start)
    with pytest.raises(RuntimeError):
        r._start_or_wait(RestartBudget(1))  # the budget runs out
    from icetide.errors import ServiceUnreachableError  # Kafka down while a start without a checkpoint plans

    failures[:] = [ServiceUnreachableError("source.bootstrap_servers: cannot reach Kafka at k:9092")]
    assert r._start_or_wait(RestartBudget(10)) is started
