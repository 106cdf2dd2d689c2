"""The live status page: one self-contained HTML document polling ``/status.json``."""

from __future__ import annotations

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>inferlane worker</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#1d2430;background:#f6f7f9}
 h1{font-size:20px;margin:0 0 .2em} h2{font-size:15px;margin:1.2em 0 .4em}
 table{border-collapse:collapse;background:#fff;min-width:22em}
 th,td{padding:.3em .8em;border-bottom:1px solid #e3e6ea;text-align:right}
 th:first-child,td:first-child{text-align:left}
 th{background:#eef1f4;font-weight:600}
 .ok{color:#187a3b}.bad{color:#b3261e}.muted{color:#6b7480}
 .pill{display:inline-block;padding:.1em .6em;border-radius:1em;font-weight:600}
 .pill.ok{background:#dff3e6}.pill.bad{background:#fbe3e1}
 .grid{display:flex;flex-wrap:wrap;gap:0 2em}
</style></head><body>
<h1>inferlane worker <span id="ready" class="pill">…</span></h1>
<div class="muted">up <span id="uptime">&ndash;</span> s ·
 window <span id="window">&ndash;</span> s · refreshed <span id="refreshed">never</span></div>
<div id="missing" class="bad"></div>
<div class="grid">
<section><h2>Lanes</h2><table id="lanes"><thead><tr><th>lane</th><th>depth</th>
 <th>results/s</th><th>p50 ms</th><th>p99 ms</th><th>results</th></tr></thead>
 <tbody></tbody></table></section>
<section><h2>Models</h2><table id="models"><thead><tr><th>model</th><th>batch cap</th>
 <th>mean batch</th><th>utilization</th><th>results/s</th><th>results</th></tr></thead>
 <tbody></tbody></table></section>
</div>
<div class="grid">
<section><h2>Consumer lag (records)</h2><table id="lag"><thead><tr><th>partition</th>
 <th>lag</th></tr></thead><tbody></tbody></table></section>
<section><h2>Pipeline</h2><table id="pipeline"><thead><tr><th>series</th><th>value</th>
 </tr></thead><tbody></tbody></table></section>
<section><h2>Process</h2><table id="process"><thead><tr><th>series</th><th>value</th></tr>
 </thead><tbody></tbody></table></section>
<section><h2>Drift</h2><table id="drift"><thead><tr><th>series</th><th>value</th></tr>
 </thead><tbody></tbody></table></section>
</div>
<h2>Rollouts</h2><table id="rollouts"><thead><tr><th>model</th><th>candidate</th>
 <th>mode</th><th>state</th><th>share</th><th>gates (value / threshold)</th></tr></thead>
 <tbody></tbody></table>
<h2>Recent errors</h2><table id="errors"><thead><tr><th>time</th><th>request id</th>
 <th>model</th><th>status</th><th>code</th></tr></thead><tbody></tbody></table>
<h2>Other subsystems</h2><table id="other"><thead><tr><th>series</th><th>value</th></tr>
 </thead><tbody></tbody></table>
<script>
"use strict";
const REFRESH_MS = 1000;
function cell(v){const td=document.createElement("td");
 td.textContent=(v===null||v===undefined)?"\u2013":String(v);return td;}
function fill(id, rows){const body=document.querySelector("#"+id+" tbody");
 body.replaceChildren(...rows.map(r=>{const tr=document.createElement("tr");
  r.forEach(v=>tr.appendChild(cell(v)));return tr;}));
 if(!rows.length){const tr=document.createElement("tr");const td=cell("none");
  td.colSpan=9;td.className="muted";tr.appendChild(td);body.appendChild(tr);}}
function labels(l){const k=Object.keys(l);
 return k.length?"{"+k.map(x=>x+"="+l[x]).join(",")+"}":"";}
function num(v){return typeof v==="number"?(Math.abs(v)>=1e6?v.toExponential(3):
 Math.round(v*1000)/1000):v;}
function render(s){
 const r=document.getElementById("ready");r.textContent=s.readiness.ready?"ready":"not ready";
 r.className="pill "+(s.readiness.ready?"ok":"bad");
 document.getElementById("missing").textContent=s.readiness.missing.join("; ");
 document.getElementById("uptime").textContent=s.uptime_s;
 document.getElementById("window").textContent=s.window_s;
 document.getElementById("refreshed").textContent=new Date().toLocaleTimeString();
 fill("lanes",Object.entries(s.lanes).map(([k,v])=>[k,v.depth,v.rate_per_s,v.p50_ms,v.p99_ms,
  v.results_total]));
 fill("models",Object.entries(s.models).map(([k,v])=>[k,v.batch_cap,v.mean_batch,
  (v.utilization*100).toFixed(1)+" %",v.rate_per_s,v.results_total]));
 fill("lag",s.lag.map(x=>[x.topic+"["+x.partition+"]",x.records]));
 fill("pipeline",Object.entries(s.pipeline).map(([k,v])=>[k,num(v)]));
 fill("process",Object.entries(s.process).map(([k,v])=>[k,num(v)]));
 fill("drift",s.drift.map(x=>[x.name+labels(x.labels),num(x.value)]));
 fill("rollouts",s.rollouts.map(x=>[x.model,x.candidate,x.mode,x.state,
  (x.share*100).toFixed(1)+" %",Object.entries(x.gates).map(([g,v])=>
  g+" "+(v.value===null?"\u2013":num(v.value))+" / "+num(v.threshold)).join("; ")]));
 fill("errors",s.errors.map(e=>[new Date(e.at_s*1000).toLocaleTimeString(),e.request_id,
  e.model,e.status,e.code]));
 fill("other",s.other.map(x=>[x.name+labels(x.labels),num(x.value)]));
}
async function tick(){
 try{const resp=await fetch("status.json",{cache:"no-store"});render(await resp.json());}
 catch(e){document.getElementById("missing").textContent="worker unreachable: "+e;}
 setTimeout(tick,REFRESH_MS);}
tick();
</script></body></html>
"""
