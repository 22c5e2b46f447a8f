// quotagate admin console: polls /metrics (open) and /console/state
// (protected like /config) every second and derives rates from the
// differences between scrapes. No dependencies; text is set with
// textContent only.
"use strict";

const POLL_MS = 1000;
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
  }
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

async function poll() {
  try {
    const resp = await fetch("/metrics", { cache: "no-store" });
    if (!resp.ok) throw new Error("/metrics answered " + resp.status);
    const samples = parseMetrics(await resp.text());
    const t = Date.now();
    history.push({ t, samples });
    while (history.length > 2 && t - history[1].t >= WINDOW_MS) history.shift();
    await fetchState();
    render();
    setStatus("updated " + new Date(t).toLocaleTimeString(), false);
  } catch (err) {
    setStatus("not updating: " + err.message, true);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value;
  sessionStorage.setItem("quotagate-admin-token", token);
});

poll();
