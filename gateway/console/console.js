// quotagate admin console: polls /metrics (open) and /console/state
// (protected like /config) every second and derives rates from the
// differences between scrapes; draws /console/history (protected: the
// gateway's own samples of its metrics) as plain SVG; looks a tenant up
// (POST /console/lookup) and grants or resets its keys (POST
// /console/grant, /console/reset), all with the admin token. No
// dependencies; text is set with textContent only.
"use strict";

const POLL_MS = 1000;
const HISTORY_EVERY = 2; // polls between reads of /console/history
let polls = 0;
let lookedUp = null; // the body of the last lookup, to repeat it after an action
const WINDOW_MS = 5000; // rates and ratios cover the last 5 s
const history = []; // {t, samples}
let token = sessionStorage.getItem("quotagate-admin-token") || "";
let state = null;

const $ = (id) => document.getElementById(id);
const BREAKER_NAMES = ["closed", "half-open", "open"];
const BREAKER_CLASSES = ["ok", "warn", "bad"];

function parseMetrics(text) {
  const out = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    let name, labels = {}, rest;
    const brace = line.indexOf("{");
    const space = line.indexOf(" ");
    if (brace >= 0 && (space < 0 || brace < space)) {
      name = line.slice(0, brace);
      let i = brace + 1;
      while (i < line.length && line[i] !== "}") {
        const eq = line.indexOf("=", i);
        const key = line.slice(i, eq).replace(/^[\s,]+/, "");
        let j = eq + 2, val = "";
        while (j < line.length && line[j] !== '"') {
          if (line[j] === "\\") { j++; val += line[j] === "n" ? "\n" : line[j]; } else { val += line[j]; }
          j++;
        }
        labels[key] = val;
        i = j + 1;
        while (line[i] === ",") i++;
      }
      rest = line.slice(i + 1);
    } else {
      name = line.slice(0, space);
      rest = line.slice(space);
    }
    const value = parseFloat(rest.trim().split(/\s+/)[0]);
    out.push({ name, labels, value });
  }
  return out;
}

function sum(samples, name, match) {
  let s = 0;
  for (const x of samples) {
    if (x.name !== name) continue;
    let ok = true;
    for (const k in match) {
      const want = match[k];
      if (Array.isArray(want) ? !want.includes(x.labels[k]) : x.labels[k] !== want) { ok = false; break; }
    }
    if (ok) s += x.value;
  }
  return s;
}

function labelValues(samples, name, label) {
  const seen = new Set();
  for (const x of samples) if (x.name === name && x.labels[label] !== undefined) seen.add(x.labels[label]);
  return [...seen].sort();
}

// rate returns the per-second increase of sum(name, match) over the
// window, or null without two scrapes. A counter reset counts from zero.
function rate(name, match) {
  if (history.length < 2) return null;
  const last = history[history.length - 1], first = history[0];
  const dt = (last.t - first.t) / 1000;
  if (dt <= 0) return null;
  const a = sum(first.samples, name, match), b = sum(last.samples, name, match);
  return (b >= a ? b - a : b) / dt;
}

function quantile(q, name, match) {
  if (history.length < 2) return null;
  const last = history[history.length - 1], first = history[0];
  const les = labelValues(last.samples, name, "le");
  const buckets = les.map((le) => {
    const m = Object.assign({}, match, { le });
    return { le: le === "+Inf" ? Infinity : parseFloat(le), n: sum(last.samples, name, m) - sum(first.samples, name, m) };
  }).sort((x, y) => x.le - y.le);
  if (buckets.length === 0) return null;
  const total = buckets[buckets.length - 1].n;
  if (total <= 0) return null;
  const rank = q * total;
  let prevLe = 0, prevN = 0;
  for (const b of buckets) {
    if (b.n >= rank) {
      if (b.le === Infinity) return prevLe;
      return prevLe + (b.le - prevLe) * ((rank - prevN) / Math.max(b.n - prevN, 1e-9));
    }
    prevLe = b.le; prevN = b.n;
  }
  return prevLe;
}

function fmtRate(v) { return v === null ? "–" : v < 10 ? v.toFixed(2) : v.toFixed(0); }
function fmtSeconds(v) {
  if (v === null) return "–";
  if (v < 0.001) return (v * 1e6).toFixed(0) + " µs";
  if (v < 1) return (v * 1000).toFixed(1) + " ms";
  return v.toFixed(2) + " s";
}
function fmtTime(iso) { return iso ? new Date(iso).toLocaleTimeString() : "–"; }

function fillTable(id, rows) {
  const body = $(id).tBodies[0];
  body.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      const v = typeof c === "object" && c !== null ? c : { text: String(c) };
      td.textContent = v.text;
      if (v.cls) td.className = v.cls;
      if (v.key) tr.dataset[v.key] = v.text;
      tr.appendChild(td);
    }
    return tr;
  }));
}

function render() {
  const last = history.length ? history[history.length - 1].samples : [];
  $("requests").textContent = fmtRate(rate("quotagate_requests_total", {}));
  const op = { op: "decide" };
  const hist = "quotagate_store_call_duration_seconds_bucket";
  $("latency").textContent = fmtSeconds(quantile(0.5, hist, op)) + " / " + fmtSeconds(quantile(0.99, hist, op));
  const b = last.some((x) => x.name === "quotagate_store_breaker_state") ? sum(last, "quotagate_store_breaker_state", {}) : null;
  const breaker = $("breaker");
  breaker.textContent = BREAKER_NAMES[b] || "–";
  breaker.className = BREAKER_CLASSES[b] || "";

  const stages = ["global", "fallback"];
  const names = new Set(labelValues(last, "quotagate_decisions_total", "policy"));
  const policies = state ? state.policies : [];
  for (const p of policies) names.delete(p.name);
  const rows = [];
  const row = (name, scope, onError) => {
    const all = rate("quotagate_decisions_total", { policy: name, stage: stages });
    const denied = rate("quotagate_decisions_total", { policy: name, stage: stages, result: "denied" });
    const allowed = rate("quotagate_decisions_total", { policy: name, stage: stages, result: "allowed" });
    const decided = (denied || 0) + (allowed || 0);
    const ratio = denied === null || decided === 0 ? null : denied / decided;
    rows.push([{ text: name, key: "policy" }, scope, onError, { text: fmtRate(all), cls: "num" },
      { text: fmtRate(denied), cls: "num" },
      { text: ratio === null ? "–" : (ratio * 100).toFixed(1) + " %", cls: "num ratio" + (ratio > 0.05 ? " bad" : "") }]);
  };
  for (const p of policies) row(p.name, p.scope + (p.shadow ? " (shadow)" : ""), p.on_store_error);
  for (const n of names) {
    if (n === "local") continue; // stage 1 has its own row below
    row(n, "–", "–");
  }
  const localAll = rate("quotagate_decisions_total", { stage: "local" });
  const localDenied = rate("quotagate_decisions_total", { stage: "local", result: "denied" });
  rows.push([{ text: "stage 1 (per caller)", key: "policy" }, "instance", "–", { text: fmtRate(localAll), cls: "num" },
    { text: fmtRate(localDenied), cls: "num" },
    { text: localAll ? (100 * localDenied / localAll).toFixed(1) + " %" : "–", cls: "num ratio" }]);
  fillTable("policies", rows);

  fillTable("fallbacks", labelValues(last, "quotagate_store_fallback_total", "mode").map((m) =>
    [m, { text: fmtRate(rate("quotagate_store_fallback_total", { mode: m })), cls: "num" }]));
  fillTable("errors", labelValues(last, "quotagate_store_errors_total", "kind").map((k) =>
    [k, { text: fmtRate(rate("quotagate_store_errors_total", { kind: k })), cls: "num" }]));

  if (state) {
    $("fleet").textContent = state.fleet_size + " (" + state.store_kind + ")";
    $("config").textContent = state.config_version + " since " + fmtTime(state.config_since);
    const r = state.last_reload;
    const reload = $("reload");
    reload.textContent = r ? r.result + " at " + fmtTime(r.at) : "none yet";
    reload.className = r && r.result !== "ok" ? "bad" : "";
    const domains = (state.breakers || []).filter((d) => d.domain !== "");
    $("breakers").hidden = $("breakers-title").hidden = domains.length === 0;
    fillTable("breakers", domains.map((d) => [{ text: d.domain, key: "domain" },
      { text: BREAKER_NAMES[d.state] || "–", cls: BREAKER_CLASSES[d.state] || "" }]));
    fillTable("hotkeys", (state.hot_keys || []).map((k) => [{ text: k.key }, { text: fmtRate(k.per_second), cls: "num" }]));
    renderRegions(state.regions);
  }
}

// renderRegions shows this instance's region and its cross-region
// policies (absent without store.global): the partition state, and per
// policy the grants held, the demand, admissions and utilisation of the
// last report (the region's reporter alone knows them).
function renderRegions(r) {
  $("regions").hidden = !r;
  if (!r) return;
  const state = $("region-state");
  state.textContent = r.state === "never" ? "never heard from the global owner" :
    r.state + " (last report " + r.since_report_s.toFixed(1) + " s ago)";
  state.className = r.state === "connected" ? "ok" : "bad";
  $("region-name").textContent = r.region + (r.reporter ? ", this instance reports" : "");
  const opt = (v, f) => (v === null || v === undefined ? "–" : f(v));
  fillTable("region-classes", r.classes.map((c) => [{ text: c.policy, key: "policy" },
    { text: (c.safe_share * 100).toFixed(0) + " %", cls: "num safe" },
    { text: c.granted + " of " + c.keys, cls: "num keys" },
    { text: fmtRate(c.granted_rate), cls: "num granted" },
    { text: opt(c.demand_rate, fmtRate), cls: "num demand" },
    { text: opt(c.admitted_rate, fmtRate), cls: "num admitted" },
    { text: opt(c.utilisation, (u) => (u * 100).toFixed(0) + " %"), cls: "num utilisation" },
    { text: r.state, cls: "partition " + (r.state === "connected" ? "ok" : "bad") }]));
}

function setStatus(text, bad) {
  const s = $("status");
  s.textContent = text;
  s.className = bad ? "status bad" : "status";
}

async function fetchState() {
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const resp = await fetch("/console/state", { headers, cache: "no-store" });
  if (resp.status === 401 || resp.status === 403) {
    $("token-form").hidden = false;
    $("token-why").textContent = resp.status === 401
      ? "This listener needs the admin token (server.admin_token_env)."
      : "Refused: set server.admin_token_env to use the console on a non-loopback listener.";
    state = null;
    return;
  }
  if (!resp.ok) throw new Error("/console/state answered " + resp.status);
  $("token-form").hidden = true;
  state = await resp.json();
}

function authHeaders(extra) {
  return Object.assign(token ? { Authorization: "Bearer " + token } : {}, extra || {});
}

// drawChart draws series (arrays of numbers or null, one per time in ts)
// into svg as one polyline per unbroken run, scaled to the largest value
// (at least floor) over the history's span, newest at the right.
function drawChart(svg, ts, series, span, floor, fmt) {
  const W = 300, H = 100;
  let top = floor;
  for (const s of series) for (const v of s) if (v !== null && v > top) top = v;
  const end = ts.length ? ts[ts.length - 1] : 0;
  const nodes = [];
  series.forEach((s, k) => {
    let run = [];
    const flush = () => {
      if (run.length === 1) { // one point alone: a short dash, to be seen
        const [x, y] = run[0].split(",");
        run.unshift((parseFloat(x) - 2).toFixed(1) + "," + y);
      }
      if (run.length > 0) {
        const line = document.createElementNS(svg.namespaceURI, "polyline");
        line.setAttribute("class", "s" + k);
        line.setAttribute("points", run.join(" "));
        nodes.push(line);
      }
      run = [];
    };
    s.forEach((v, i) => {
      if (v === null) { flush(); return; }
      const x = W - (W * (end - ts[i])) / span;
      const y = H - 4 - ((H - 8) * v) / top;
      run.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    flush();
  });
  const label = document.createElementNS(svg.namespaceURI, "text");
  label.setAttribute("x", "3");
  label.setAttribute("y", "10");
  label.textContent = fmt(top);
  nodes.push(label);
  svg.replaceChildren(...nodes);
  svg.dataset.points = String(ts.length);
}

function last(a) { return a.length ? a[a.length - 1] : null; }

async function fetchHistory() {
  const resp = await fetch("/console/history", { headers: authHeaders(), cache: "no-store" });
  if (!resp.ok) throw new Error("/console/history answered " + resp.status);
  const h = await resp.json();
  const span = h.max_points * h.interval_s * 1000;
  $("history-span").textContent = "(every " + h.interval_s + " s, the last " + Math.round(span / 60000) +
    " minutes, from the gateway's own metrics)";
  drawChart($("chart-decisions"), h.t, [h.decisions_per_s, h.denied_per_s, h.local_denied_per_s], span, 1, fmtRate);
  drawChart($("chart-fallbacks"), h.t, [h.fallbacks_per_s, h.store_errors_per_s], span, 1, fmtRate);
  drawChart($("chart-latency"), h.t, [h.store_p50_s, h.store_p99_s], span, 0.001, fmtSeconds);
  if (h.t.length) {
    $("now-decisions").textContent = fmtRate(last(h.decisions_per_s)) + " decisions/s, " + fmtRate(last(h.denied_per_s)) +
      " denied/s, " + fmtRate(last(h.local_denied_per_s)) + " denied/s by stage 1";
    $("now-fallbacks").textContent = fmtRate(last(h.fallbacks_per_s)) + " fallbacks/s, " + fmtRate(last(h.store_errors_per_s)) + " errors/s";
    $("now-latency").textContent = last(h.store_p50_s) === null ? "no store decision in the last " + h.interval_s + " s"
      : fmtSeconds(last(h.store_p50_s)) + " / " + fmtSeconds(last(h.store_p99_s));
  }
}

// post sends body as JSON to a protected console endpoint and returns the
// answer's JSON, or throws with the problem's message.
async function post(path, body) {
  const resp = await fetch(path, { method: "POST", cache: "no-store", body: JSON.stringify(body),
    headers: authHeaders({ "Content-Type": "application/json" }) });
  let data = null;
  try { data = await resp.json(); } catch (_) { /* not JSON */ }
  if (!resp.ok) throw new Error((data && data.message) || path + " answered " + resp.status);
  return data;
}

function who() {
  const kind = $("lookup-kind").value, value = $("lookup-who").value.trim();
  if (kind === "credential") return { credential: value };
  const w = { tenant: value };
  if (kind) w.kind = kind;
  const tier = $("lookup-tier").value.trim();
  if (tier) w.tier = tier;
  return w;
}

function fmtMillis(ms) { return ms <= 0 ? "now" : fmtSeconds(ms / 1000); }

function showLookup(rep) {
  $("lookup-status").textContent = rep.tenant + " (" + rep.kind + ", tier " + rep.tier + ", " + rep.tenant_hash + ")" +
    (rep.truncated ? ": more keys than one read reads" : "");
  $("lookup-status").className = "";
  $("lookup").hidden = false;
  fillTable("lookup", rep.policies.map((q) => [{ text: q.name }, q.route || "–", q.algorithm, { text: String(q.limit), cls: "num" },
    { text: String(q.remaining), cls: "num remaining" }, { text: fmtMillis(q.reset_ms), cls: "num" }, { text: String(q.debt), cls: "num" }]));
  const rows = $("lookup").tBodies[0].rows;
  rep.policies.forEach((q, i) => { rows[i].dataset.key = q.name + "/" + (q.route || ""); });
  const keys = rep.policies.filter((q) => q.algorithm !== "concurrency");
  const select = $("action-key");
  const before = select.value;
  select.replaceChildren(...keys.map((q) => {
    const o = document.createElement("option");
    o.value = JSON.stringify({ policy: q.name, route: q.route || "" });
    o.textContent = q.name + (q.route ? " on " + q.route : "");
    return o;
  }));
  if ([...select.options].some((o) => o.value === before)) select.value = before;
  $("action-form").hidden = keys.length === 0;
}

async function lookup(body) {
  try {
    showLookup(await post("/console/lookup", body));
    lookedUp = body;
  } catch (err) {
    $("lookup-status").textContent = err.message;
    $("lookup-status").className = "bad";
  }
}

async function act(action) {
  const status = $("action-status");
  if (!lookedUp || !$("action-key").value) return;
  const key = JSON.parse($("action-key").value);
  const body = Object.assign({}, lookedUp, key, { reason: $("action-reason").value, by: $("action-by").value });
  if (action === "grant") body.units = parseInt($("action-units").value, 10);
  if (!body.reason.trim()) {
    status.textContent = "give a reason: it is logged with the " + action;
    status.className = "bad";
    return;
  }
  try {
    const r = await post("/console/" + action, body);
    status.textContent = (action === "grant" ? "granted " + r.units + " units of " : "reset ") + r.policy +
      (r.route ? " on " + r.route : "") + " (logged)";
    status.className = "ok";
  } catch (err) {
    status.textContent = err.message;
    status.className = "bad";
  }
  await lookup(lookedUp);
}

async function poll() {
  try {
    const resp = await fetch("/metrics", { cache: "no-store" });
    if (!resp.ok) throw new Error("/metrics answered " + resp.status);
    const samples = parseMetrics(await resp.text());
    const t = Date.now();
    history.push({ t, samples });
    while (history.length > 2 && t - history[1].t >= WINDOW_MS) history.shift();
    await fetchState();
    $("history").hidden = $("support").hidden = state === null;
    if (state !== null && polls++ % HISTORY_EVERY === 0) await fetchHistory();
    render();
    setStatus("updated " + new Date(t).toLocaleTimeString(), false);
  } catch (err) {
    setStatus("not updating: " + err.message, true);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

$("lookup-kind").addEventListener("change", () => {
  $("lookup-who").type = $("lookup-kind").value === "credential" ? "password" : "text";
});
$("lookup-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  lookup(who());
});
$("action-grant").addEventListener("click", () => act("grant"));
$("action-reset").addEventListener("click", () => act("reset"));

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value;
  sessionStorage.setItem("quotagate-admin-token", token);
});

poll();
