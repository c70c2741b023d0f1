"""results.md and plots of the steady benchmark, from steady.json (re-render with
``python -m benchmarks.steady.report benchmarks/steady/results``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TARGET_RATIO = 1.25
TARGET_WA = 2.0
TARGET_CPU = 0.20
WARM_UP_S = 600


def ratios(s: dict[str, Any]) -> dict[str, float]:
    """icetide ÷ fully compacted, per family.engine.query, for one sample."""
    out = {}
    for fam, f in s["families"].items():
        ice, comp = f["arms"]["ice"]["queries"], f["arms"]["compact"]["queries"]
        for q, t in ice.items():
            out[f"{fam}.{q}"] = round(t / comp[q], 2) if comp[q] > 0 else float("inf")
    return out


def one_line(s: dict[str, Any]) -> str:
    r = ratios(s)
    files = {fam: (f["arms"]["plain"]["layout"]["data_files"], f["arms"]["ice"]["layout"]["data_files"],
                   f["arms"]["compact"]["layout"]["data_files"]) for fam, f in s["families"].items()}
    return f"worst ratio {max(r.values()):.2f} ({max(r, key=lambda k: r[k])}); files plain/ice/compact {files}"


def write(result: dict[str, Any], out: Path) -> None:
    samples = result["samples"]
    late = [s for s in samples if s["elapsed_s"] >= WARM_UP_S]
    lines = [
        "# Steady streaming: icetide's maintained tables vs unmaintained vs fully compacted",
        "",
        f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, "
        f"{result['machine']['memory_gib']} GiB; {result['machine'].get('os', '')}.",
        f"Run: {result['minutes']:g} min, {result['rate']} events/s into each append table of each arm, "
        f"{result['cdc_rate']} changes/s over {result['keys']:,} keys into each CDC table, trigger "
        f"{result['trigger']}, one event-day per run (hour partitions cold after {result['quiet_seconds']} s), "
        f"seed {result['seed']}. icetide's arm: "
        + (f"at most {result['snapshot_max_count']} snapshots (`snapshot_max_count`, down to the newest 20), "
           if result.get("snapshot_max_count") else "snapshots kept by age (24 h), ")
        + f"tier fanout {result.get('fanout', 8)}; CDC tables format v{result.get('cdc_format', 2)}. "
        f"Produced {result.get('produced', 0):,} events and "
        f"{result.get('changes', 0):,} changes per arm.",
        "",
        "## Query time, icetide ÷ fully compacted (lower is better; target ≤ "
        f"{TARGET_RATIO} at every sample after {WARM_UP_S // 60} min)",
        "",
    ]
    keys = sorted(ratios(samples[0])) if samples else []
    lines.append("| sample | " + " | ".join(keys) + " |")
    lines.append("|---|" + "---|" * len(keys))
    for s in samples:
        r = ratios(s)
        lines.append(f"| {s['elapsed_s'] // 60} min | " + " | ".join(_mark(r[k]) for k in keys) + " |")
    worst = max((max(ratios(s).values()) for s in late), default=None)
    lines += ["", f"Worst ratio after {WARM_UP_S // 60} min: **{worst}** (target ≤ {TARGET_RATIO})." if worst
              else "No sample after the warm-up.", ""]
    for fam in sorted({k.split(".")[0] for k in keys}):
        vals = sorted(v for s in late for k, v in ratios(s).items() if k.startswith(f"{fam}."))
        if vals:
            within = sum(v <= TARGET_RATIO for v in vals)
            lines.append(f"- {fam}: median {vals[len(vals) // 2]:.2f}, range {vals[0]:.2f}–{vals[-1]:.2f}; "
                         f"{within} of {len(vals)} query samples within {TARGET_RATIO}")
    lines += ["", "## Unmaintained ÷ fully compacted (what icetide saves)", ""]
    lines.append("| sample | " + " | ".join(keys) + " |")
    lines.append("|---|" + "---|" * len(keys))
    for s in samples:
        row = []
        for k in keys:
            fam, eng, q = k.split(".")
            a = s["families"][fam]["arms"]
            row.append(f"{a['plain']['queries'][f'{eng}.{q}'] / a['compact']['queries'][f'{eng}.{q}']:.2f}")
        lines.append(f"| {s['elapsed_s'] // 60} min | " + " | ".join(row) + " |")
    lines += ["", "## Files", "", "| sample | table | plain files | icetide files (newest partition) | "
              "compacted files | plain avg KiB | icetide avg KiB | icetide delete files | manifests "
              "plain / icetide / compacted | snapshots plain / icetide |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for s in samples:
        for fam, f in s["families"].items():
            p, i, c = (f["arms"][a]["layout"] for a in ("plain", "ice", "compact"))
            lines.append(f"| {s['elapsed_s'] // 60} min | {fam} | {p['data_files']} | {i['data_files']} "
                         f"({i['newest_partition_files']}) | {c['data_files']} | {p['avg_file_bytes'] // 1024} | "
                         f"{i['avg_file_bytes'] // 1024} | {i['delete_files']} | "
                         f"{p.get('manifests', '?')} / {i.get('manifests', '?')} / {c.get('manifests', '?')} | "
                         f"{p.get('snapshots', '?')} / {i.get('snapshots', '?')} |")
    end = result.get("end")
    if end:
        lines += ["", "## Cost", ""]
        for fam, wa in end["write_amplification"].items():
            amp = wa["rewritten_bytes"] / wa["ingested_bytes"] if wa["ingested_bytes"] else 0
            if not wa["ingested_bytes"] or wa.get("ledger_gaps"):
                lines.append(f"- write amplification, {fam}: **not measured** (ingested bytes incomplete: "
                             f"{wa.get('ledger_gaps', '?')} snapshots expired before they were read)")
                continue
            lines.append(f"- write amplification, {fam}: {wa['rewritten_bytes']:,} bytes rewritten (icetide's "
                         f"action log) ÷ {wa['ingested_bytes']:,} committed by the stream = **{amp:.2f}** "
                         f"(target ≤ {TARGET_WA})"
                         + (f"; by step: {', '.join(f'{k} {v:,}' for k, v in sorted(wa['by_step'].items()))}"
                            if wa.get("by_step") else ""))
        cpu = result["cpu_s"]
        share = cpu["maintenance"] / (cpu["ingest"] / 2) if cpu["ingest"] else 0
        lines.append(f"- CPU: ingest process {cpu['ingest']:.0f} s for both arms (icetide's arm ≈ half), maintenance "
                     f"process {cpu['maintenance']:.0f} s: maintenance ÷ ingest of its arm = **{share:.2f}** "
                     f"(target ≤ {TARGET_CPU})")
        lines.append(f"- failed or restarted stream batches: **{end['stream_failures']}**; CDC MERGE commits "
                     f"retried after a conflict with a compaction: {end['merge_conflict_retries']}")
        lines.append(f"- maintenance actions: {end['actions']}")
        ir = end["icetide_rewrite"]
        mb = 1024 * 1024
        ice_rate = ir["bytes"] / mb / ir["seconds"] if ir["seconds"] else 0
        for fam, ll in end.get("like_for_like", {}).items():
            i, p = ll["icetide"], ll["plain"]
            ratio = ll["ratio"]["mb_per_s"]
            verdict = (f"**{ratio:.2f}×** (target ≥ 1.0)" if ratio is not None
                       else "no ratio: the plain call rewrote nothing (its default min-input-files is 5 per group)")
            lines.append(f"- compaction throughput, like for like ({fam} table's final state registered twice, idle): "
                         f"icetide's rewrite {i['mb_per_s']:.1f} MB/s ({i['bytes'] / mb:.1f} MB in "
                         f"{i['seconds']:.1f} s → {i['files_after']} files; its whole cycle with planning and "
                         f"logging {i['cycle_seconds']:.1f} s)"
                         f" vs plain `rewrite_data_files` {p['mb_per_s']:.1f} MB/s ({p['bytes'] / mb:.1f} MB in "
                         f"{p['seconds']:.1f} s → {p['files_after']} files): {verdict}")
        lines.append(f"- icetide's rewrites during the run, under ingest load: {ice_rate:.2f} MB/s over "
                     f"{ir['actions']} rewrites of {ir['bytes'] / mb / max(1, ir['actions']):.2f} MB on average "
                     "(small inputs: per-call planning and commit dominate)")
        lines.append(f"- rows per arm at the end: {end['rows']}")
    lines += per_file_cost(samples)
    if (out / "analysis.md").exists():
        lines += ["", "Why targets were missed, from these measurements: [analysis.md](analysis.md)."]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    _plots(result, out)


def per_file_cost(samples: list[dict[str, Any]]) -> list[str]:
    """Least-squares fit of query time on data + delete files, over every arm and sample, per query:
    what one more file costs, and how much of icetide's excess over the compacted copy it explains."""
    pts: dict[str, list[tuple[float, float, float]]] = {}
    for s in samples:
        for fam, f in s["families"].items():
            for arm in ("plain", "ice", "compact"):
                lay = f["arms"][arm]["layout"]
                n = lay["data_files"] + lay["delete_files"]
                for q, t in f["arms"][arm]["queries"].items():
                    pts.setdefault(f"{fam}.{q}", []).append((float(n), t * 1000, 1.0 if arm == "ice" else 0.0))
    out = ["", "## What one more file costs (fit over all arms and samples: ms = a + b · files)", "",
           "| query | a ms | b ms/file | r² | icetide's last sample: files, excess over compacted explained by b |",
           "|---|---|---|---|---|"]
    last = samples[-1] if samples else None
    for k in sorted(pts):
        xs, ys = [p[0] for p in pts[k]], [p[1] for p in pts[k]]
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        if n < 3 or sxx == 0:
            continue
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        a = my - b * mx
        ss = sum((y - my) ** 2 for y in ys)
        r2 = 1 - sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True)) / ss if ss else 0.0
        note = ""
        if last is not None:
            fam, eng, q = k.split(".")
            arms = last["families"][fam]["arms"]
            files = {arm: arms[arm]["layout"]["data_files"] + arms[arm]["layout"]["delete_files"]
                     for arm in ("ice", "compact")}
            t_ice, t_comp = (arms[arm]["queries"][f"{eng}.{q}"] * 1000 for arm in ("ice", "compact"))
            excess = t_ice - t_comp
            explained = b * (files["ice"] - files["compact"])
            note = (f"{files['ice']} vs {files['compact']}: {excess:.0f} ms excess, {explained:.0f} ms from files"
                    if excess > 0 else f"{files['ice']} vs {files['compact']}: no excess")
        out.append(f"| {k} | {a:.0f} | {b:.1f} | {r2:.2f} | {note} |")
    return out


def _mark(r: float) -> str:
    return f"**{r:.2f}**" if r > TARGET_RATIO else f"{r:.2f}"


def _plots(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    if not samples:
        return
    mins = [s["elapsed_s"] / 60 for s in samples]
    keys = sorted(ratios(samples[0]))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, eng in zip(axes, ("spark", "pyiceberg"), strict=True):
        for k in (k for k in keys if f".{eng}." in k):
            ax.plot(mins, [ratios(s)[k] for s in samples], marker="o", label=k.replace(f".{eng}", ""))
        ax.axhline(TARGET_RATIO, color="red", linestyle="--", linewidth=1, label=f"target {TARGET_RATIO}")
        ax.axhline(1.0, color="grey", linewidth=0.5)
        ax.set_title(f"query time, icetide ÷ fully compacted ({eng})")
        ax.set_xlabel("minutes streamed")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "query_ratio.png", dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, fam in zip(axes, ("day", "hour", "cdc"), strict=True):
        for arm, style in (("plain", "-"), ("ice", "-"), ("compact", "--")):
            ax.plot(mins, [s["families"][fam]["arms"][arm]["layout"]["data_files"] for s in samples], style,
                    marker="o", label=arm)
        ax.set_title(f"{fam}: data files")
        ax.set_yscale("log")
        ax.set_xlabel("minutes streamed")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "files.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    write(json.loads((folder / "steady.json").read_text()), folder)
