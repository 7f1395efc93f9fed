// The live console: reads /console/data, /cluster and /campaigns once a
// second and draws what changed since the last read. Counters are
// cumulative on the server; every rate here is a difference over the
// seconds between two reads.
"use strict";

const keep = 180; // seconds of history in the charts
const hist = { shake: [], money: [], p99: [] };
let token = "";
let last = null;

function readToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("hongbao-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname); // the token leaves the address bar
  }
  token = sessionStorage.getItem("hongbao-token") || "";
}

async function get(path) {
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const r = await fetch(path, { headers, cache: "no-store" });
  if (r.status === 401 || r.status === 403) {
    throw Object.assign(new Error(r.status + ": a token that may read this is needed"), { auth: true });
  }
  if (!r.ok) {
    throw new Error(path + ": " + r.status);
  }
  return r.json();
}

const $ = (id) => document.getElementById(id);
const fmt = (v) => (v === undefined || v === null || isNaN(v)) ? "–" : Math.round(v).toLocaleString("en-US");
const fmt1 = (v) => (v === undefined || v === null || isNaN(v)) ? "–" : v.toFixed(v < 10 ? 2 : 1);

function push(a, v) {
  a.push(v);
  if (a.length > keep) a.shift();
}

// quantile of the per-bucket counts d (this second's), as an upper bound
// in ms: the bound of the bucket where the q-th answer falls.
function quantile(d, bounds, q) {
  let n = 0;
  for (const c of d) n += c;
  if (n === 0) return NaN;
  let want = Math.ceil(q * n), cum = 0;
  for (let i = 0; i < d.length; i++) {
    cum += d[i];
    if (cum >= want) return i < bounds.length ? bounds[i] / 1000 : Infinity;
  }
  return Infinity;
}

function chart(id, series, label) {
  const c = $(id), g = c.getContext("2d"), w = c.width, h = c.height;
  g.clearRect(0, 0, w, h);
  let max = 0;
  for (const s of series) for (const v of s.data) if (isFinite(v)) max = Math.max(max, v);
  max = max || 1;
  g.strokeStyle = "#2a3139";
  g.beginPath(); g.moveTo(0, h - 0.5); g.lineTo(w, h - 0.5); g.stroke();
  for (const s of series) {
    g.strokeStyle = s.color; g.lineWidth = 2; g.beginPath();
    s.data.forEach((v, i) => {
      const x = w - (s.data.length - 1 - i) * (w / (keep - 1));
      const y = h - 4 - (isFinite(v) ? v : 0) / max * (h - 22);
      i ? g.lineTo(x, y) : g.moveTo(x, y);
    });
    g.stroke();
  }
  g.fillStyle = "#8a96a3"; g.font = "22px monospace";
  g.fillText(label + "  (max " + fmt1(max) + ", last " + keep + " s)", 8, 24);
}

function draw(cur, clusterMap, campaigns) {
  const st = cur.stats;
  $("who").textContent = clusterMap ? "gateway " + clusterMap.node + " of " + clusterMap.nodes + ", " + cur.sets + " SETs" : cur.sets + " SETs";
  $("clock").textContent = new Date(cur.time).toLocaleTimeString();
  $("t-conns").textContent = fmt(st.connections);
  $("t-pool").textContent = fmt(st.shake.pool);
  if (last) {
    const dt = (Date.parse(cur.time) - Date.parse(last.time)) / 1000 || 1;
    const rate = (f) => (f(cur) - f(last)) / dt;
    const shakes = rate((x) => x.answered.shake || 0);
    const money = rate((x) => x.stats.shake.got_amount + x.stats.envelopes.opened_amount);
    $("t-shake").textContent = fmt(shakes);
    $("t-money").textContent = fmt(money);
    $("t-got").textContent = fmt(rate((x) => x.stats.shake.got));
    $("t-dealt").textContent = fmt(rate((x) => x.stats.shake.created));
    $("t-sent").textContent = fmt(rate((x) => x.stats.envelopes.created));
    $("t-opened").textContent = fmt(rate((x) => x.stats.envelopes.opened));
    push(hist.shake, shakes);
    push(hist.money, money);
    const rows = [];
    let shakeP99 = NaN;
    for (const typ of Object.keys(cur.latency)) {
      const d = cur.latency[typ].map((c, i) => c - (last.latency[typ] ? last.latency[typ][i] : 0));
      const n = d.reduce((a, b) => a + b, 0);
      if (n === 0 && !["shake", "open", "send"].includes(typ)) continue;
      const p99 = quantile(d, cur.latency_bounds_us, 0.99);
      if (typ === "shake") shakeP99 = p99;
      rows.push("<tr><td>" + typ.toUpperCase() + "</td><td>" + fmt(n / dt) + "</td><td>" + fmt1(quantile(d, cur.latency_bounds_us, 0.5)) +
        "</td><td>" + fmt1(p99) + "</td><td>" + fmt1(quantile(d, cur.latency_bounds_us, 1)) + "</td></tr>");
    }
    $("lat").tBodies[0].innerHTML = rows.join("");
    push(hist.p99, shakeP99);
    if (cur.journal && last.journal) {
      const syncs = cur.journal.syncs - last.journal.syncs;
      $("j-rec").textContent = fmt(rate((x) => x.journal.records));
      $("j-mb").textContent = fmt(rate((x) => x.journal.bytes) / 1024);
      $("j-sync").textContent = fmt(syncs / dt);
      $("j-ms").textContent = syncs ? fmt1((cur.journal.sync_ns - last.journal.sync_ns) / syncs / 1e6) : "–";
    }
  }
  chart("c-shake", [{ data: hist.shake, color: "#e5534b" }], "SHAKE answers/s");
  chart("c-money", [{ data: hist.money, color: "#e0b341" }], "fen told/s");
  chart("c-p99", [{ data: hist.p99, color: "#539bf5" }], "SHAKE p99 ms");
  $("rings").innerHTML = (cur.rings || []).map((r) =>
    '<div class="bar" title="SET ' + r.set + ": " + r.len + " of " + r.size + '"><i style="height:' +
    Math.min(100, Math.max(r.len ? 2 : 0, 100 * r.len / r.size)).toFixed(1) + '%"></i><span>' + r.set + "</span></div>").join("");
  if (cur.journal) {
    $("j-state").innerHTML = cur.journal.failed ? '<span class="bad">failed: no money is handed out (see /healthz)</span>' :
      "not durable yet: " + fmt(cur.journal.lag_bytes) + " bytes";
  } else {
    $("j-state").textContent = "no journal here (-journal off, or on JetStream: see the cluster)";
  }
  $("camps").tBodies[0].innerHTML = (campaigns || []).slice(-12).map((c) =>
    "<tr><td>" + c.id + "</td><td>" + c.kind + "</td><td>" + fmt(c.dealt) + "</td><td>" + fmt(c.total) + "</td><td>" + (c.sets ?? "") +
    '</td><td class="' + (c.state === "running" ? "warn" : "ok") + '">' + c.state + (c.waiting ? " (" + c.waiting + ")" : "") + "</td></tr>").join("");
  $("cluster").hidden = !clusterMap;
  if (clusterMap) {
    $("gws").tBodies[0].innerHTML = clusterMap.gateways.map((g) =>
      "<tr><td>" + (g.name || "gw" + g.node) + (g.self ? " (here)" : "") + "</td><td>" + (g.addr || "") + "</td><td>" + g.sets.length +
      "</td><td>" + (g.self ? "" : g.up || g.last_seen_s ? fmt1(g.last_seen_s) + " s ago" : "never") + '</td><td class="' + (g.up ? "ok" : "bad") + '">' +
      (g.up ? (g.leaving ? "leaving" : "up") : "down") + "</td></tr>").join("");
    const owner = {};
    for (const g of clusterMap.gateways) for (const s of g.sets) owner[s] = g.name || "gw" + g.node;
    const cells = (clusterMap.placement && clusterMap.placement.length) ? clusterMap.placement.map((p) =>
      '<div class="cell ' + (p.owner ? p.role : "none") + '" title="' + p.role + (p.phase ? " " + p.phase : "") + ", epoch " + p.epoch + '"><b>SET ' + p.set +
      "</b>" + (p.owner || "none") + "</div>") : Object.keys(owner).map((s) => '<div class="cell serving"><b>SET ' + s + "</b>" + owner[s] + "</div>");
    $("sets").innerHTML = cells.join("");
    $("moves").textContent = (clusterMap.moves || []).map((m) => "SET " + m.set + " " + (m.phase || "") + " → " + (m.to || "")).join(", ") || "no move in flight";
  }
}

async function tick() {
  try {
    const cur = await get("/console/data");
    let clusterMap = null, campaigns = null;
    try { clusterMap = await get("/cluster"); } catch (e) { if (e.auth) throw e; }
    try { campaigns = await get("/campaigns"); } catch (e) { if (e.auth) throw e; }
    draw(cur, clusterMap, campaigns);
    last = cur;
    $("status").textContent = "live";
    $("status").className = "ok";
    $("login").className = "";
  } catch (e) {
    $("status").textContent = e.message;
    $("status").className = "bad";
    if (e.auth) $("login").className = "show";
  }
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem("hongbao-token", $("token").value);
  token = $("token").value;
  last = null;
  tick();
});

readToken();
tick();
setInterval(tick, 1000);
