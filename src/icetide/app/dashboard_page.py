"""The dashboard's single page: polls ``/api/state`` and redraws (text set with ``textContent``
only: table names, reasons and dead-letter messages come from data and are never parsed as HTML)."""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>icetide</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<style>
body { font-family: system-ui, sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #12355b; color: #fff; padding: .6em 1.2em; display: flex; gap: 1em; align-items: baseline; }
header h1 { font-size: 1.2em; margin: 0; } header span { opacity: .8; font-size: .9em; }
main { padding: 1em 1.2em; } section { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px;
  padding: .6em 1em; margin-bottom: 1em; } h2 { font-size: 1em; margin: .2em 0 .6em; }
table { border-collapse: collapse; width: 100%; font-size: .9em; }
td, th { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: left; white-space: nowrap; }
td.msg { white-space: normal; max-width: 40em; } td.num, th.num { text-align: right; }
.healthy { color: #080; } .warning { color: #b80; } .critical { color: #b00; font-weight: bold; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(440px, 1fr)); gap: .6em; }
.chart { width: 100%; } .reason { color: #555; font-size: .85em; } .step { color: #0a5; font-weight: 600; }
</style></head><body>
<header><h1>icetide</h1><span id="catalog"></span><span id="updated" data-version="0">loading…</span></header>
<main>
<section><h2>Tables, worst first</h2><table id="tables"><thead><tr><th>table</th><th>tier</th>
<th class="num">score</th><th class="num">data files</th><th class="num">small</th><th class="num">avg size</th>
<th class="num">max/partition</th><th class="num">delete ratio</th><th class="num">commits/h</th>
<th class="num">freshness</th><th class="num">Kafka lag</th></tr></thead><tbody></tbody></table>
<div id="reasons"></div></section>
<section><h2>Partitions</h2><div id="heatmap" class="chart"></div></section>
<section><h2>Over time</h2><div id="series" class="grid"></div></section>
<section><h2>Maintenance plan (dry run)</h2><div id="plan"></div></section>
<section><h2>Recent maintenance actions</h2><table id="actions"><thead><tr><th>started</th><th>table</th>
<th>step</th><th>outcome</th><th>files in → out</th><th class="num">s</th><th>reason</th></tr></thead>
<tbody></tbody></table></section>
<section><h2>Dead letters</h2><p id="dead-summary"></p><table id="dead"><thead><tr><th>class</th><th>topic</th>
<th>target</th><th class="num">count</th><th class="num">pending</th><th>last</th><th>example</th></tr></thead>
<tbody></tbody></table></section>
</main>
<script src="/vega.js"></script>
<script>
(() => {  // own scope: the Vega bundle declares top-level names of its own
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined && text !== null)
  e.textContent = String(text); if (cls) e.className = cls; return e; };
const row = (cells) => { const tr = document.createElement('tr'); cells.forEach(c => tr.appendChild(c)); return tr; };
const size = (b) => b >= 1048576 ? (b / 1048576).toFixed(1) + ' MiB' : (b / 1024).toFixed(1) + ' KiB';
const secs = (ms) => ms === null || ms === undefined ? '–' : (ms / 1000).toFixed(1) + ' s';
let shownSeries = '';
function fill(id, rows) { const body = document.querySelector(id + ' tbody'); body.replaceChildren(...rows); }
function draw(s) {
  document.getElementById('catalog').textContent = 'catalog ' + s.catalog;
  const up = document.getElementById('updated');
  up.textContent = 'updated ' + new Date(s.collected_at_ms).toLocaleTimeString();
  up.dataset.version = s.version;
  fill('#tables', s.tables.map(t => { const tr = row([el('td', t.name), el('td', t.tier, t.tier),
    el('td', t.score.toFixed(1), 'num'), el('td', t.data_files, 'num'), el('td', t.small_files, 'num'),
    el('td', size(t.avg_file_bytes), 'num'), el('td', t.max_partition_files, 'num'),
    el('td', (100 * t.delete_ratio).toFixed(1) + '%', 'num'), el('td', t.commits_last_hour, 'num'),
    el('td', secs(t.freshness_ms), 'num'), el('td', t.kafka_lag ?? '–', 'num')]);
    tr.dataset.table = t.name; tr.dataset.files = t.data_files; tr.dataset.freshness = t.freshness_ms ?? '';
    return tr; }));
  const reasons = document.getElementById('reasons'); reasons.replaceChildren();
  for (const [name, rs] of Object.entries(s.reasons)) for (const r of rs) reasons.appendChild(el('div', name + ': ' + r, 'reason'));
  vegaEmbed('#heatmap', s.heatmap, {actions: false, renderer: 'svg'});
  const key = JSON.stringify(s.series.map(x => x.spec.data.values.length));
  if (key !== shownSeries) {  // redraw the series only when they changed (keeps zoom otherwise)
    shownSeries = key; const grid = document.getElementById('series'); grid.replaceChildren();
    s.series.forEach(x => { const d = el('div', null, 'chart'); d.id = 'series-' + x.figure; d.dataset.figure = x.figure;
      grid.appendChild(d); vegaEmbed(d, x.spec, {actions: false, renderer: 'svg'}); });
  }
  const plan = document.getElementById('plan'); plan.replaceChildren();
  s.plan.forEach((p, i) => { const d = el('div'); d.appendChild(el('b', (i + 1) + '. ' + p.table.split('.').slice(-2).join('.')));
    d.appendChild(el('span', '  priority ' + p.priority + ' (' + p.tier + ', score ' + p.score.toFixed(1) + ')'));
    if (!p.steps.length) d.appendChild(el('div', 'nothing to do', 'reason'));
    p.steps.forEach(st => { const x = el('div'); x.appendChild(el('span', st.action, 'step'));
      x.appendChild(el('span', ': ' + st.reason)); x.appendChild(el('div', 'expected: ' + st.expected, 'reason')); d.appendChild(x); });
    p.skipped.forEach(sk => d.appendChild(el('div', 'left alone: ' + sk, 'reason'))); plan.appendChild(d); });
  fill('#actions', s.actions.map(a => row([el('td', String(a.started_at).slice(0, 19)), el('td', a.table_name),
    el('td', a.step), el('td', a.outcome, a.outcome === 'ok' ? 'healthy' : 'warning'),
    el('td', (a.files_in ?? '') + ' → ' + (a.files_out ?? '')), el('td', (a.seconds || 0).toFixed(1), 'num'),
    el('td', a.reason, 'msg')])));
  const dl = s.dead_letters;
  document.getElementById('dead-summary').textContent = dl.total + ' dead letters, ' + dl.pending + ' pending, in ' + dl.table;
  fill('#dead', dl.groups.map(g => row([el('td', g.error_class), el('td', g.topic), el('td', g.target_table ?? '–'),
    el('td', g.count, 'num'), el('td', g.pending, 'num'), el('td', g.last), el('td', g.example_message, 'msg')])));
}
let seen = -1;
async function poll() {
  try { const r = await fetch('/api/state', {cache: 'no-store'}); const s = await r.json();
    if (s.version !== seen && s.tables) { seen = s.version; draw(s); } }
  catch (e) { document.getElementById('updated').textContent = 'not reachable: ' + e; }
  setTimeout(poll, 2000);
}
poll();
})();
</script></body></html>
"""
