import os, time
from benchmarks.steady.load import tree_cpu_seconds
from icetide import paths
from icetide.config import load_config
from icetide.spark import build_session
from icetide.lake.offsets import mirror_all
work = sorted((paths.home() / "bench").glob("steady-*"), key=lambda p: p.stat().st_mtime)[-1]
spark = build_session(load_config(work / "steady.yaml"))
C = "icetide"
def cpu(): return tree_cpu_seconds(os.getpid())
def make(name, commits=60):
    spark.sql(f"DROP TABLE IF EXISTS {C}.xp.{name} PURGE"); spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {C}.xp")
    spark.sql(f"CREATE TABLE {C}.xp.{name} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ('commit.manifest.min-count-to-merge'='8')")
    for i in range(commits):
        spark.sql(f"INSERT INTO {C}.xp.{name} VALUES ({i}, 'x{i}'), ({i+1000}, 'y')")
        if i % 10 == 9:
            spark.sql(f"CALL {C}.system.rewrite_data_files(table => 'xp.{name}', options => map('min-input-files','2'))")
def older(name):
    r = spark.sql(f"SELECT committed_at FROM {C}.xp.{name}.snapshots ORDER BY committed_at DESC").collect()
    return r[19]["committed_at"]
res = {}
for rnd in range(2):
    for how in (("proc", "api") if rnd == 0 else ("api", "proc")):
        name = f"e_{how}_{rnd}"; make(name)
        ts = older(name); n0 = spark.sql(f"SELECT count(*) FROM {C}.xp.{name}.snapshots").first()[0]
        c0, t0 = cpu(), time.monotonic()
        if how == "proc":
            spark.sql(f"CALL {C}.system.expire_snapshots(table => 'xp.{name}', older_than => TIMESTAMP '{ts}', retain_last => 20)").collect()
        else:
            jvm = spark._jvm
            t = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"{C}.xp.{name}")
            t.expireSnapshots().expireOlderThan(int(ts.timestamp() * 1000)).retainLast(20).commit()
        c1, t1 = cpu(), time.monotonic()
        spark.sql(f"REFRESH TABLE {C}.xp.{name}")
        n1 = spark.sql(f"SELECT count(*) FROM {C}.xp.{name}.snapshots").first()[0]
        files = sum(len(fs) for _, _, fs in os.walk(work / "warehouse" / "xp" / name / "data"))
        print(rnd, how, f"snapshots {n0}->{n1}", f"data files on disk {files}", f"wall {t1-t0:.2f}s cpu {c1-c0:.2f}s", flush=True)
c0, t0 = cpu(), time.monotonic()
mirror_all(spark, f"{C}.bench.cdc_ice")
print("mirror_all", f"wall {time.monotonic()-t0:.2f}s cpu {cpu()-c0:.2f}s")
c0, t0 = cpu(), time.monotonic()
mirror_all(spark, f"{C}.bench.cdc_ice")
print("mirror_all again", f"wall {time.monotonic()-t0:.2f}s cpu {cpu()-c0:.2f}s")
