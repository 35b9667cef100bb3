// The AgentOS dashboard: draws the JSON documents of /api/* (the CLI's --json) and follows
// /api/stream (server-sent events). Everything is put in the page as text nodes or
// attribute values, never as HTML, so whatever an agent or a request wrote shows as text.
"use strict";

const ACTIVE = ["pending", "running", "gating", "merging", "starting"];

// --- the token: `agentos dashboard` prints a URL ending in #token=...; the page keeps it
// for this tab and takes it out of the address bar.
(function keepToken() {
  const match = location.hash.match(/token=([A-Za-z0-9_-]+)/);
  if (match) {
    sessionStorage.setItem("agentos-token", match[1]);
    history.replaceState(null, "", location.pathname + location.search);
  }
})();
const token = () => sessionStorage.getItem("agentos-token") || "";

// --- building the page -------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children.flat()) el.append(child instanceof Node ? child : String(child));
  return el;
}

const main = () => document.getElementById("main");
const show = (...nodes) => main().replaceChildren(...nodes);
const status = (s) => h("span", { class: `status status-${s}` }, s);
const when = (t) => (t ? new Date(t * 1000).toLocaleTimeString() : "");
// What an agent or a run used, as agentos.usage.describe says it: "1234 tokens, cost 0.0035".
const used = (u) => [
  u && u.tokens != null ? `${u.tokens} tokens` : "",
  u && u.cost != null ? `cost ${Number(u.cost.toPrecision(4))}` : "",
].filter(Boolean).join(", ");
const table = (columns, rows) =>
  h("table", {}, h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c))))));
const runLink = (id) => h("a", { href: `/runs/${encodeURIComponent(id)}` }, id);

async function api(path, options) {
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({ error: `${response.status}` }));
  if (!response.ok) throw new Error(data.error || `${response.status}`);
  return data;
}

function post(path, body) {
  return api(path, {
    method: "POST",
    headers: { "content-type": "application/json", "x-agentos-token": token() },
    body: JSON.stringify(body || {}),
  });
}

function failed(error) {
  show(h("p", { class: "error" }, String(error.message || error)));
}

// One stream per page: `onEvent` gets each event of the stream, `onLog` each chunk of an
// agent's output; `params()` says where to go on from (asked again after a lost connection).
function follow(params, onEvent, onLog) {
  const live = document.getElementById("live");
  let last = 0;
  const open = () => {
    const query = new URLSearchParams({ ...params(), after: String(last) });
    const source = new EventSource(`/api/stream?${query}`);
    source.addEventListener("open", () => { live.textContent = "live"; live.className = "ok"; });
    source.addEventListener("error", () => {
      live.textContent = "reconnecting…";
      live.className = "muted";
      source.close();
      setTimeout(open, 1000);
    });
    source.addEventListener("event", (m) => {
      const event = JSON.parse(m.data);
      last = Math.max(last, event.id);
      onEvent(event);
    });
    if (onLog) source.addEventListener("log", (m) => onLog(JSON.parse(m.data)));
  };
  open();
}

function debounce(fn, ms) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

// --- pages -------------------------------------------------------------------------------

async function runsPage() {
  const draw = async () => {
    const [{ runs }, live] = await Promise.all([api("/api/runs"), api("/api/status")]);
    const health = Object.fromEntries(live.runs.map((r) => [r.id, r.health]));
    show(
      h("h1", {}, "Runs"),
      table(["run", "status", "agents", "used", "started", "request"],
        runs.map((r) => [
          runLink(r.id),
          status(r.status),
          r.agents.map((a) => {
            const seen = (health[r.id] || {})[a.agent];
            return h("div", {}, `${a.agent}: `, status(a.status),
              seen ? h("span", { class: "muted" }, ` ${seen.health}, output ${seen.output_age}s ago`) : "");
          }),
          used(r.usage),
          new Date(r.created_at * 1000).toLocaleString(),
          r.request,
        ])),
    );
  };
  await draw();
  follow(() => ({}), debounce(() => draw().catch(failed), 150));
}

async function runPage(id) {
  let run = await api(`/api/runs/${encodeURIComponent(id)}`);
  const logs = {};
  const offsets = {};
  const events = h("ul", { id: "events" });
  const agents = h("div", { id: "agents" });
  const head = h("div", { id: "run-head" });
  const outputs = h("div", { id: "outputs" });

  const output = (agent) => {
    if (!logs[agent]) {
      logs[agent] = h("pre", { id: `log-${agent}`, "data-agent": agent });
      outputs.append(h("h2", {}, `${agent} output`), logs[agent]);
    }
    return logs[agent];
  };
  const drawRun = () => {
    const cancel = ACTIVE.includes(run.status)
      ? h("button", {
        id: "cancel",
        onclick: () => post(`/api/runs/${encodeURIComponent(run.id)}/cancel`)
          .then(refresh).catch((e) => alert(e.message)),
      }, "Cancel run")
      : null;
    head.replaceChildren(
      h("h1", {}, `Run ${run.id} `, h("span", { id: "run-status" }, status(run.status)), " ", cancel),
      h("p", {}, h("strong", {}, "request: "), h("span", { id: "request" }, run.request)),
      h("p", { class: "muted" }, run.message || ""),
      h("p", {}, h("strong", {}, "used: "), h("span", { id: "run-usage" }, used(run.usage) || "(not reported)")),
      h("p", { class: "muted" }, "receipts: ", run.receipts.join(", ") || "(none)"),
    );
    agents.replaceChildren(
      h("h2", {}, "Agents"),
      table(["agent", "version", "status", "attempts", "exit", "used", "gate", "branch"],
        run.agents.map((a) => [
          a.agent, a.version, status(a.status), a.attempts, a.exit_code ?? "", used(a.usage),
          a.gate ? h("span", { class: a.gate.passed ? "ok" : "bad" }, a.gate.summary || "") : "",
          a.branch || "",
        ])),
    );
    for (const a of run.agents) output(a.agent);
  };
  const refresh = async () => {
    run = await api(`/api/runs/${encodeURIComponent(id)}`);
    drawRun();
  };
  drawRun();
  show(head, agents, outputs, h("h2", {}, "Events"), events);
  const again = debounce(() => refresh().catch(failed), 100);
  follow(() => ({ run: run.id, offsets: JSON.stringify(offsets) }), (e) => {
    events.append(h("li", {}, h("span", { class: "muted" }, when(e.at), " "), e.message));
    if (e.kind === "phase" || e.kind === "agent") again();
  }, (chunk) => {
    if (chunk.from !== (offsets[chunk.agent] || 0)) return; // not where this page is
    offsets[chunk.agent] = chunk.offset;
    const pre = output(chunk.agent);
    pre.append(chunk.text);
    pre.scrollTop = pre.scrollHeight;
  });
}

async function receiptsPage() {
  const [{ receipts }, verified] = await Promise.all([api("/api/receipts"), api("/api/receipts/verify")]);
  const text = h("pre", { id: "receipt-text" }, "(choose a receipt)");
  const open = (id) => api(`/api/receipts/${encodeURIComponent(id)}`)
    .then((r) => { text.textContent = r.text; }).catch((e) => { text.textContent = e.message; });
  show(
    h("h1", {}, "Receipts"),
    verified.ok
      ? h("p", { id: "chain", class: "ok" }, `chain intact: ${receipts.length} receipt(s) verified`)
      : h("div", { id: "chain", class: "bad" }, h("p", {}, "the chain does not verify:"),
        h("ul", {}, verified.problems.map((p) => h("li", {}, p)))),
    table(["id", "time", "kind", "run"],
      receipts.slice().reverse().map((r) => [
        h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); open(r.id); } }, r.id),
        r.time, r.kind, r.run_id ? runLink(r.run_id) : "",
      ])),
    text,
  );
}

async function packagesPage() {
  const { packages } = await api("/api/packages");
  show(
    h("h1", {}, "Hub packages"),
    table(["name", "version", "active", "sha256", "source"],
      packages.map((p) => [p.name, p.version, p.active ? "active" : "", p.sha256.slice(0, 12), p.source])),
  );
}

async function guardianPage() {
  const draw = async () => {
    const g = await api("/api/guardian");
    show(
      h("h1", {}, "Guardian"),
      h("p", { id: "guardian-state", class: g.running ? "ok" : "muted" },
        g.running ? `running (pid ${g.pid}), a cycle every ${g.interval}s` : "not running"),
      h("h2", {}, "Agents' health"),
      table(["session", "run", "agent", "health", "output age (s)", "action", "reason"],
        Object.entries(g.agents).map(([session, a]) => [
          session, a.run ? runLink(a.run) : "", a.agent, a.health, a.output_age, a.action || "", a.reason || "",
        ])),
      h("h2", {}, "Interventions"),
      table(["when", "run", "agent", "action", "reason", "receipt"],
        g.interventions.map((i) => [new Date(i.at * 1000).toLocaleString(), runLink(i.run), i.agent, i.action, i.reason, i.receipt || ""])),
    );
  };
  await draw();
  follow(() => ({}), debounce(() => draw().catch(failed), 300));
}

async function knowledgePage() {
  const query = new URLSearchParams(location.search).get("q") || "";
  const results = h("div", { id: "hits" });
  const input = h("input", { type: "text", name: "q", value: query, placeholder: "words to look for", size: 50 });
  show(h("h1", {}, "Knowledge store"),
    h("form", { method: "get", action: "/knowledge" }, input, " ", h("button", { type: "submit" }, "Search")),
    results);
  if (!query) return;
  const found = await api(`/api/knowledge?q=${encodeURIComponent(query)}`);
  if (!found.hits.length) { results.append(h("p", { class: "muted" }, "no results")); return; }
  for (const hit of found.hits) {
    // The snippet marks matched terms «like this»: drawn as <mark> elements, as text.
    const snippet = h("pre", {});
    hit.snippet.split(/(«[^»]*»)/).forEach((part) => {
      snippet.append(part.startsWith("«") && part.endsWith("»") ? h("mark", {}, part.slice(1, -1)) : part);
    });
    results.append(h("h2", {}, `${hit.path}:${hit.start_line}-${hit.end_line} `,
      h("span", { class: "muted" }, `${hit.score.toFixed(2)} ${hit.language}`)), snippet);
  }
}

function barChart(points, { width = 640, height = 180, label }) {
  // points: [{x: label, y: 0..1}]
  const chart = svg("svg", { class: "chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  chart.append(svg("title", {}, label));
  const pad = 24;
  const step = points.length ? (width - 2 * pad) / points.length : 0;
  points.forEach((p, i) => {
    const y = Math.max(0, Math.min(1, p.y ?? 0));
    const barHeight = y * (height - 2 * pad);
    const barWidth = Math.min(48, Math.max(2, step - 4));
    const bar = svg("rect", {
      x: pad + i * step + (step - barWidth) / 2, y: height - pad - barHeight, width: barWidth, height: barHeight,
      fill: p.colour || "#1565c0",
    });
    bar.append(svg("title", {}, `${p.x}: ${p.y === null ? "no score" : p.y.toFixed(3)}`));
    chart.append(bar, svg("text", { x: pad + i * step + step / 2, y: height - 6, "text-anchor": "middle", "font-size": 10 }, p.x));
  });
  chart.append(svg("line", { x1: pad, y1: height - pad, x2: width - pad, y2: height - pad, stroke: "#999" }));
  return chart;
}

const VERDICT_COLOURS = { initial: "#6b7385", accept: "#1a7f37", refine: "#b58900", reject: "#c62828" };

function familyTree(archive) {
  const children = {};
  for (const g of archive) (children[g.parent ?? "root"] ||= []).push(g);
  const branch = (key) => h("ul", { class: "tree" }, (children[key] || []).map((g) =>
    h("li", {}, `generation ${g.gen} `, h("span", { class: `verdict-${g.verdict}` }, g.verdict),
      g.score === null ? "" : ` ${g.score.toFixed(3)}`, h("span", { class: "muted" }, ` — ${g.reason}`),
      children[g.gen] ? branch(g.gen) : "")));
  return branch("root");
}

async function evalsPage() {
  const [{ evals }, evolutions] = await Promise.all([api("/api/evals"), api("/api/evolutions")]);
  const parts = [h("h1", {}, "Evals"),
    evals.length
      ? barChart(evals.slice().reverse().map((e) => ({ x: e.id.slice(-6), y: e.composite })),
        { label: "composite score per eval, oldest first" })
      : h("p", { class: "muted" }, "no eval has been kept yet"),
    table(["id", "suite", "split", "agent", "composite", "passed"],
      evals.map((e) => [e.id, e.suite, e.split, e.agent, e.composite.toFixed(3), e.passed])),
    h("h1", {}, "Evolutions")];
  if (!evolutions.length) parts.push(h("p", { class: "muted" }, "no evolution yet"));
  for (const summary of evolutions) {
    const evo = await api(`/api/evolutions/${encodeURIComponent(summary.id)}`);
    parts.push(
      h("h2", {}, `${evo.id}: ${evo.package} on ${evo.suite} `, h("span", { class: "muted" }, evo.status)),
      barChart(evo.archive.map((g) => ({ x: String(g.gen), y: g.score, colour: VERDICT_COLOURS[g.verdict] })),
        { label: "score per generation" }),
      h("p", { class: "muted" }, "family tree"),
      familyTree(evo.archive),
    );
  }
  show(...parts);
}

function field(p) {
  const name = p.name;
  const label = p.label || p.name;
  let input;
  if (p.type === "textarea") input = h("textarea", { name, rows: 4, required: p.required }, p.default ?? "");
  else if (p.type === "dropdown") {
    input = h("select", { name, required: p.required }, p.options.map((o) => h("option", { value: o, selected: o === p.default }, o)));
  } else if (p.type === "boolean") input = h("input", { type: "checkbox", name, checked: p.default === true });
  else input = h("input", { type: p.type === "number" ? "number" : "text", name, required: p.required, value: p.default ?? "", step: "any" });
  return h("label", {}, `${label}${p.required ? " *" : ""} `, input, p.description ? h("div", { class: "muted" }, p.description) : "");
}

async function workflowsPage() {
  const found = await api("/api/workflows");
  const result = h("div", { id: "launched" });
  const forms = found.map((w) => {
    const form = h("form", { class: "launch", "data-workflow": w.id },
      h("h2", {}, `${w.name} `, h("span", { class: "muted" }, `(${w.id}: ${w.phases.join(" → ")})`)),
      w.description ? h("p", {}, w.description) : "",
      w.parameters.length ? w.parameters.map(field) : field({ name: "task", label: "task", type: "textarea", required: true }),
      h("label", {}, "repository ", h("input", { type: "text", name: "__repo", placeholder: "the dashboard's repository" })),
      h("button", { type: "submit" }, "Launch"));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const params = {};
      let repo = "";
      for (const el of form.elements) {
        if (!el.name) continue;
        if (el.name === "__repo") repo = el.value;
        else params[el.name] = el.type === "checkbox" ? String(el.checked) : el.value;
      }
      try {
        const started = await post(`/api/workflows/${encodeURIComponent(w.id)}/launch`, { params, repo });
        watchExecution(started.execution, result);
      } catch (e) {
        result.replaceChildren(h("p", { class: "error" }, e.message));
      }
    });
    return form;
  });
  show(h("h1", {}, "Workflows"), result, ...forms);
}

function watchExecution(id, into) {
  const draw = async () => {
    const e = await api(`/api/executions/${encodeURIComponent(id)}`);
    into.replaceChildren(
      h("p", {}, `execution ${e.id} of ${e.workflow}: `, status(e.status)),
      table(["task", "phase", "status", "description"], e.tasks.map((t) => [t.id, t.phase, status(t.status), t.description])),
    );
  };
  draw().catch(failed);
  follow(() => ({}), debounce(() => draw().catch(failed), 150));
}

// --- routing -----------------------------------------------------------------------------

const PAGES = {
  runs: runsPage, receipts: receiptsPage, packages: packagesPage, guardian: guardianPage,
  knowledge: knowledgePage, evals: evalsPage, workflows: workflowsPage,
};

document.addEventListener("DOMContentLoaded", () => {
  const parts = location.pathname.split("/").filter(Boolean);
  const name = parts[0] || "runs";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("here", a.dataset.page === name);
  const page = name === "runs" && parts[1] ? () => runPage(decodeURIComponent(parts[1])) : PAGES[name];
  (page || runsPage)().catch(failed);
});
