"""The HTML kit of the dashboard's pages: the stylesheet, the script that draws the Plotly figures (and polls in a
live page), and the elements every page uses. Self-contained: nothing is fetched."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

from lightning_mgpu.dashboard.charts import Chart, LineChart


def escape(value: Any) -> str:
    """``value`` as text safe in HTML content and in a quoted attribute."""
    return html.escape(str(value), quote=True)


#: The stylesheet of every page.
CSS = """
:root{--fg:#1d2433;--muted:#5b6577;--line:#d9dee7;--bg:#f5f7fa;--card:#fff}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
  color:var(--fg);background:var(--bg)}
header{background:#1d2433;color:#fff;padding:18px 28px}
header h1{margin:0 0 4px;font-size:20px;font-weight:600}
header .sub{color:#c4cad6;font-size:13px;word-break:break-all}
nav{padding:8px 28px;background:#fff;border-bottom:1px solid var(--line);position:sticky;top:0;z-index:2}
nav a{margin-right:16px;color:#2459a8;text-decoration:none;font-size:13px}
main{padding:18px 28px 40px;max-width:1700px}
section{margin:0 0 26px}
h2{font-size:17px;margin:0 0 10px;font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:22px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 16px;min-width:150px}
.card .k{color:var(--muted);font-size:12px}.card .v{font-size:20px;font-weight:600}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:16px}
figure.chart{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px;
  position:relative}
figure.chart figcaption{font-weight:600;margin:0 0 4px;display:flex;justify-content:space-between;gap:8px}
figure.chart figcaption a{font-weight:400;font-size:12px;color:#2459a8}
.plot{min-height:300px;width:100%}
.live{font-size:12px;background:#2ca02c;border-radius:10px;padding:2px 8px;vertical-align:middle;margin-left:8px}
.note{color:var(--muted);background:#fff;border:1px dashed var(--line);border-radius:8px;padding:10px 14px}
table{border-collapse:collapse;background:#fff;border:1px solid var(--line);border-radius:8px;font-size:13px;width:100%}
th,td{padding:6px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:#eef1f6;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td ul{margin:0;padding-left:18px}
.badge{display:inline-block;white-space:nowrap;padding:2px 8px;border-radius:10px;font-size:12px;font-weight:600;
  color:#fff}
.v-input-bound{background:#d62728}.v-communication-bound{background:#ff7f0e}.v-compute-bound{background:#1f77b4}
.v-healthy{background:#2ca02c}.v-low-utilisation-unexplained{background:#9467bd}.v-throttled{background:#8c564b}
details{margin-top:8px}summary{cursor:pointer;color:#2459a8}
pre{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px;overflow:auto;font-size:12px}
.src{color:var(--muted);font-size:12px;margin:6px 0 0}
h2 a.export{font-size:12px;font-weight:400;margin-left:10px;color:#2459a8}
"""

#: The page's script: draws every chart from the embedded JSON with the inlined plotly.js; in a live page, polls
#: data.json and replaces data (Plotly.react keeps zoom and legend state) or, when the set of charts changed, the whole
#: main.
JS = """
(function(){
  var state=JSON.parse(document.getElementById('dashboard-data').textContent);
  var config={displaylogo:false,responsive:true,toImageButtonOptions:{format:'png',scale:2}};
  function draw(figs){
    var jobs=Object.keys(figs).map(function(id){var el=document.getElementById('plot-'+id);
      return el?Plotly.react(el,figs[id].data,figs[id].layout,config):null;});
    return Promise.all(jobs).then(function(){
      document.body.setAttribute('data-rendered',String(document.querySelectorAll('.js-plotly-plot').length));
      document.body.setAttribute('data-version',String(state.version));
      document.body.setAttribute('data-last-step',String(state.last_step));});
  }
  function update(next){
    var same=JSON.stringify(Object.keys(next.figures))===JSON.stringify(Object.keys(state.figures));
    if(same){document.querySelectorAll('[data-live-region]').forEach(function(el){
      var html=next.regions[el.getAttribute('data-live-region')];if(html!==undefined)el.innerHTML=html;});}
    else{document.querySelector('main').innerHTML=next.main;}
    state=next;return draw(next.figures);
  }
  draw(state.figures);
  var every=parseFloat(document.body.getAttribute('data-live')||'0')*1000;
  if(every>0){
    var poll=function(){
      fetch('data.json?since='+state.version,{cache:'no-store'}).then(function(r){return r.json();})
        .then(function(next){if(next.version!==state.version)return update(next);})
        .catch(function(err){document.body.setAttribute('data-live-error',String(err));})
        .then(function(){setTimeout(poll,every);});
    };
    setTimeout(poll,every);
  }
})();
"""


def chart_html(chart: Chart, png: str | None) -> str:
    """The ``<figure>`` a chart is drawn into (by :data:`JS`, from the page's JSON), with a link to its PNG."""
    kind = "line" if isinstance(chart, LineChart) else "stacked-bar"
    link = f'<a href="{escape(png)}">PNG</a>' if png else ""
    return (
        f'<figure class="chart" id="chart-{escape(chart.id)}" data-chart="{escape(chart.id)}"'
        f' data-kind="{kind}"><figcaption><span>{escape(chart.title)}</span>{link}</figcaption><div class="plot"'
        f' id="plot-{escape(chart.id)}"></div></figure>'
    )


def table_html(rows: Iterable[Sequence[str]], header: Sequence[str], table_id: str, numeric_from: int = 1) -> str:
    """A ``<table>``; columns from ``numeric_from`` on are right-aligned numbers."""
    head = "".join(f"<th{' class=num' if i >= numeric_from else ''}>{escape(h)}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if i >= numeric_from else ''}>{escape(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def inline_json(data: Any) -> str:
    """``data`` as JSON to put inside ``<script>``, where "</" would end the element early."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
