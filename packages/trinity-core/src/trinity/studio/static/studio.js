// trinity studio: a form generated from the config's JSON Schema, bound to one config tree.
// The tree holds only the keys the user set or loaded; every edit is checked by the server
// (the same pass as `trinity config check`) and its errors are shown next to their fields.
"use strict";

const state = { schema: null, beginner: {}, choices: {}, doc: {}, mode: "beginner", yaml: "", result: null };
let checkTimer = null;

// --- paths: "buffer.explorer_input.tasksets[0].path" <-> ["buffer", "explorer_input", "tasksets", 0, "path"]
function tokens(path) {
  const out = [];
  for (const part of path.split(".")) {
    const m = part.match(/^([^[]*)((\[\d+\])*)$/);
    if (m[1]) out.push(m[1]);
    for (const index of m[2].matchAll(/\[(\d+)\]/g)) out.push(Number(index[1]));
  }
  return out;
}
function join(path, key) {
  if (typeof key === "number") return `${path}[${key}]`;
  return path ? `${path}.${key}` : key;
}
function getAt(path) {
  let node = state.doc;
  for (const key of tokens(path)) {
    if (node === null || typeof node !== "object" || !(key in node)) return undefined;
    node = node[key];
  }
  return node;
}
function setAt(path, value) {
  const keys = tokens(path);
  let node = state.doc;
  keys.slice(0, -1).forEach((key, i) => {
    if (node[key] === null || typeof node[key] !== "object") node[key] = typeof keys[i + 1] === "number" ? [] : {};
    node = node[key];
  });
  node[keys[keys.length - 1]] = value;
}
function deleteAt(path) {
  const keys = tokens(path);
  const parents = [state.doc];
  for (const key of keys.slice(0, -1)) {
    const node = parents[parents.length - 1];
    if (node === null || typeof node !== "object" || !(key in node)) return;
    parents.push(node[key]);
  }
  const last = keys[keys.length - 1];
  const node = parents[parents.length - 1];
  if (Array.isArray(node)) node.splice(last, 1);
  else if (node && typeof node === "object") delete node[last];
  // Drop the mappings the deletion left empty (lists stay: an empty list can mean something).
  for (let i = parents.length - 1; i > 0; i--) {
    const child = parents[i];
    if (Array.isArray(child) || Object.keys(child).length) break;
    delete parents[i - 1][keys[i - 1]];
  }
}

// --- schema
function deref(s) {
  while (s && s.$ref) s = state.schema.$defs[s.$ref.split("/").pop()];
  return s || {};
}
function resolveNode(s) {
  // The schema of a field without its `null` option; `nullable` says whether it had one.
  let nullable = false;
  if (s.anyOf) {
    const options = s.anyOf.filter((o) => o.type !== "null");
    nullable = options.length < s.anyOf.length;
    if (options.length === 1) s = { ...s, ...options[0], anyOf: undefined };
  }
  return { node: deref(s), field: s, nullable };
}
function schemaAt(path) {
  let s = state.schema;
  for (const key of tokens(path)) {
    const node = resolveNode(s).node;
    if (typeof key === "number") s = node.items || {};
    else if (node.properties && key in node.properties) s = node.properties[key];
    else if (node.additionalProperties && typeof node.additionalProperties === "object") s = node.additionalProperties;
    else return null;
  }
  return s;
}
function isSection(node) {
  return node.type === "object" && !!node.properties;
}
function kindOf(node) {
  if (node.enum) return "enum";
  if (node.type === "boolean") return "boolean";
  if (node.type === "integer" || node.type === "number") return node.type;
  if (node.type === "string") return "string";
  return "yaml"; // lists, free mappings, unions the form cannot split: typed as YAML
}

// --- rendering
function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const kid of kids) if (kid) e.append(kid);
  return e;
}
function shown(value, kind) {
  if (value === undefined || value === null) return "";
  if (kind === "yaml" || typeof value === "object") return JSON.stringify(value);
  return String(value);
}
function typed(text, kind) {
  // The value an input's text stands for; text the type cannot take is sent as written,
  // so the server names the error (and `${oc.env:VAR,8}` reaches OmegaConf unchanged).
  if (text.trim() === "") return undefined;
  if (kind === "boolean") return text === "true";
  if (kind === "integer" && /^-?\d+$/.test(text.trim())) return Number(text);
  if (kind === "number" && !Number.isNaN(Number(text))) return Number(text);
  if (kind === "yaml") {
    try {
      return JSON.parse(text);
    } catch {
      return { __yaml__: text };
    }
  }
  return text;
}

function leaf(name, schema, path, showPath) {
  const { node, field } = resolveNode(schema);
  const kind = kindOf(node);
  const value = getAt(path);
  const id = "f-" + path.replace(/[^\w]/g, "_");
  const fallback = field.default !== undefined ? field.default : node.default;
  let input;
  let choices = null; // the installed plugin names a field of this name takes
  if (kind === "enum" || kind === "boolean") {
    const options = kind === "enum" ? node.enum : [true, false];
    input = el("select", { id }, el("option", { value: "", text: `(default: ${shown(fallback, "yaml")})` }));
    for (const option of options) input.append(el("option", { value: String(option), text: String(option) }));
    input.value = value === undefined || value === null ? "" : String(value);
  } else if (kind === "yaml") {
    input = el("textarea", { id, rows: 1, placeholder: shown(fallback, "yaml") });
    input.value = shown(value, kind);
  } else {
    input = el("input", { id, type: "text", placeholder: shown(fallback, kind) });
    input.value = shown(value, kind);
    const names = state.choices[name];
    if (kind === "string" && names && names.length) {
      choices = el("datalist", { id: id + "-choices" });
      for (const n of names) choices.append(el("option", { value: n }));
      input.setAttribute("list", id + "-choices");
    }
  }
  input.dataset.path = path;
  input.addEventListener(kind === "enum" || kind === "boolean" ? "change" : "input", () => {
    const v = typed(input.value, kind);
    if (v === undefined) deleteAt(path);
    else setAt(path, v);
    scheduleCheck();
  });
  const label = el("label", { for: id }, name, showPath ? el("span", { class: "path", text: path }) : null);
  const box = el("div", { class: "field", "data-field": path }, label, input);
  if (choices) box.append(choices);
  const derived = field["x-trinity-effect"] === "derived" ? "Derived by trinity: a value set here is replaced. " : "";
  const help = derived + (field.description || node.description || "");
  if (help) box.append(el("div", { class: "help", text: help }));
  box.append(el("div", { class: "error" }));
  return box;
}

function section(name, schema, path, open) {
  const { node, field } = resolveNode(schema);
  const box = el("details", { "data-field": path });
  if (open) box.open = true;
  box.append(el("summary", { text: name, title: field.description || node.description || "" }));
  box.append(el("div", { class: "error" }));
  // Render the section's fields when first opened: the whole schema is several hundred fields.
  const fill = () => {
    if (box.dataset.filled) return;
    box.dataset.filled = "1";
    for (const [key, sub] of Object.entries(node.properties)) box.append(render(key, sub, join(path, key)));
  };
  if (open) fill();
  box.addEventListener("toggle", () => box.open && (fill(), showErrors()));
  return box;
}

function listOf(name, schema, path) {
  const { node } = resolveNode(schema);
  const itemSchema = node.items;
  const box = el("fieldset", { "data-field": path }, el("legend", { text: `${name} (list)` }));
  const items = getAt(path);
  (Array.isArray(items) ? items : []).forEach((_, i) => {
    const item = el("div", { class: "item" }, section(`${name}[${i}]`, itemSchema, join(path, i), false));
    item.append(el("button", { type: "button", text: "remove", onclick: () => (deleteAt(join(path, i)), rerender()) }));
    box.append(item);
  });
  box.append(el("button", { type: "button", text: `add to ${name}`, onclick: () => (setAt(join(path, (getAt(path) || []).length), {}), rerender()) }));
  box.append(el("div", { class: "error" }));
  return box;
}

function mapOf(name, schema, path) {
  const { node } = resolveNode(schema);
  const box = el("fieldset", { "data-field": path }, el("legend", { text: `${name} (by name)` }));
  const entries = getAt(path);
  for (const key of Object.keys(entries && typeof entries === "object" ? entries : {})) {
    const item = el("div", { class: "item" }, section(key, node.additionalProperties, join(path, key), false));
    item.append(el("button", { type: "button", text: "remove", onclick: () => (deleteAt(join(path, key)), rerender()) }));
    box.append(item);
  }
  const key = el("input", { type: "text", placeholder: "name" });
  box.append(key, el("button", { type: "button", text: "add", onclick: () => key.value && (setAt(join(path, key.value), {}), rerender()) }));
  box.append(el("div", { class: "error" }));
  return box;
}

function render(name, schema, path) {
  const { node } = resolveNode(schema);
  if (isSection(node)) return section(name, schema, path, false);
  if (node.type === "array" && node.items && isSection(deref(node.items))) return listOf(name, schema, path);
  const extra = node.additionalProperties;
  if (node.type === "object" && extra && typeof extra === "object" && isSection(deref(extra))) return mapOf(name, schema, path);
  return leaf(name, schema, path, false);
}

function rerender() {
  const form = document.getElementById("form");
  const open = [...form.querySelectorAll("details[open]")].map((d) => d.dataset.field);
  form.replaceChildren();
  if (state.mode === "beginner") {
    for (const [group, paths] of Object.entries(state.beginner)) {
      const box = el("fieldset", {}, el("legend", { text: group }));
      for (const path of paths) {
        const s = schemaAt(path);
        if (s) box.append(leaf(path.split(".").pop(), s, path, true));
      }
      form.append(box);
    }
  } else {
    const root = state.schema;
    for (const [key, sub] of Object.entries(root.properties)) form.append(render(key, sub, key));
    // Reopen what was open, outermost first (an inner section exists once its parent is filled).
    for (const path of open) {
      const d = [...form.querySelectorAll("details")].find((x) => x.dataset.field === path);
      if (d) d.open = true;
    }
  }
  scheduleCheck(0);
}

// --- checking
function scheduleCheck(delay = 250) {
  clearTimeout(checkTimer);
  checkTimer = setTimeout(runCheck, delay);
}
async function post(url, body) {
  // The launch's cookie goes with every request (same origin); the server wants JSON bodies only.
  const response = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const data = await response.json();
  if (!response.ok) {
    const error = new Error(data.detail || (data.error && data.error.message) || response.statusText);
    error.status = response.status;
    error.data = data;
    throw error;
  }
  return data;
}
async function runCheck() {
  const result = await post("/api/check", { config: state.doc });
  state.result = result;
  state.yaml = result.yaml;
  document.getElementById("yaml").textContent = result.yaml;
  showErrors();
  showGpus(result.gpu);
  document.body.dataset.checked = String(Date.now());
}
function holderOf(path) {
  // The visible field (or section) nearest to `path`: the field itself, else its closest parent.
  let keys = tokens(path);
  while (keys.length) {
    const p = keys.reduce((acc, k) => join(acc, k), "");
    const box = document.querySelector(`[data-field="${CSS.escape(p)}"]`);
    if (box && box.offsetParent !== null) return box;
    keys = keys.slice(0, -1);
  }
  return null;
}
function showErrors() {
  const result = state.result;
  if (!result) return;
  for (const box of document.querySelectorAll(".invalid")) box.classList.remove("invalid");
  for (const e of document.querySelectorAll(".error")) e.textContent = "";
  const problems = document.getElementById("problems");
  problems.replaceChildren();
  for (const issue of result.errors) {
    const box = holderOf(issue.path);
    if (box) {
      box.classList.add("invalid");
      const slot = box.querySelector(":scope > .error");
      const own = box.dataset.field === issue.path ? issue.message : `${issue.path}: ${issue.message}`;
      slot.textContent = slot.textContent ? `${slot.textContent}; ${own}` : own;
    }
    problems.append(el("li", { text: issue.path ? `${issue.path}: ${issue.message}` : issue.message }));
  }
  const warnings = document.getElementById("warnings");
  warnings.replaceChildren(...result.warnings.map((w) => el("li", { text: `${w.path}: ${w.message}` })));
  const summary = document.getElementById("summary");
  const n = result.errors.length;
  summary.textContent = n ? `${n} error${n > 1 ? "s" : ""}` : "valid: passes trinity config check";
  summary.className = n ? "bad" : "ok";
}
function showGpus(g) {
  const p = document.getElementById("gpu-arithmetic");
  if (!g.total) {
    p.textContent = `node_num ${g.node_num} × gpu_per_node ${g.gpu_per_node} = 0 GPUs: engines and trainer share the CPU (or GPUs are detected when the run starts).`;
    p.className = "";
    return;
  }
  const explorer = g.rollout + g.auxiliary;
  p.textContent =
    `rollout ${g.engine_num} engine${g.engine_num === 1 ? "" : "s"} × ${g.gpu_per_engine} GPU = ${g.rollout}` +
    (g.auxiliary ? ` + auxiliary models ${g.auxiliary}` : "") +
    ` → explorer ${explorer}; trainer ${g.trainer}; of node_num ${g.node_num} × gpu_per_node ${g.gpu_per_node} = ${g.total}`;
  p.className = explorer + g.trainer > g.total || !g.trainer ? "gpu-bad" : "";
}

// --- files
async function loadText(text) {
  try {
    const data = await post("/api/load", { text });
    state.doc = data.config;
    rerender();
  } catch (err) {
    document.getElementById("summary").textContent = `cannot load: ${err.message}`;
    document.getElementById("summary").className = "bad";
  }
}
async function saveTo(path) {
  // An existing file is replaced only once the user says so (the server answers 409 until then),
  // and a config with errors is saved only once the user says "save anyway" (422 until then).
  const body = { config: state.doc, path };
  for (;;) {
    try {
      return await post("/api/save", body);
    } catch (err) {
      if (err.status === 409 && !body.overwrite && err.message.includes("exists") && window.confirm(`${path} exists. Replace it?`)) {
        body.overwrite = true;
      } else if (err.status === 422 && err.data.errors && !body.save_anyway &&
                 window.confirm(`The config has ${err.data.errors.length} error(s): trinity run refuses it until they are fixed. Save anyway?`)) {
        body.save_anyway = true;
      } else {
        throw err;
      }
    }
  }
}
async function save(showCommand) {
  const path = document.getElementById("save-path").value;
  try {
    const data = await saveTo(path);
    document.getElementById("saved").textContent =
      `saved ${data.path}` + (data.saved_with_errors ? ` with ${data.errors.length} error(s) still to fix` : "");
    document.getElementById("command").textContent = showCommand
      ? `trinity config check ${data.quoted}\n${data.command}`
      : data.command;
    document.getElementById("command-box").hidden = false;
  } catch (err) {
    document.getElementById("saved").textContent = `not saved: ${err.message}`;
    document.getElementById("command-box").hidden = false;
  }
}
function download() {
  const name = (document.getElementById("save-path").value.split("/").pop() || "config.yaml").replace(/^$/, "config.yaml");
  const link = el("a", { href: URL.createObjectURL(new Blob([state.yaml], { type: "text/yaml" })), download: name });
  document.body.append(link);
  link.click();
  link.remove();
}
// --- runs: `trinity run` of the saved config, followed live from its files
const runs = { selected: null, timer: null };
const COLORS = ["#1d5fb0", "#c2410c", "#176b2c", "#7c3aed", "#b00020", "#0e7490"];
const SVG = "http://www.w3.org/2000/svg";

async function getJson(url) {
  const response = await fetch(url);
  const data = await response.json();
  if (!response.ok) throw new Error(data.detail || response.statusText);
  return data;
}
async function startRun() {
  // Saves the page's config where the path box says (confirmed as Save is), then starts it.
  const note = document.getElementById("run-note");
  try {
    const saved = await saveTo(document.getElementById("save-path").value);
    const run = await post("/api/runs", { path: saved.path });
    note.textContent = `started ${run.id}`;
    runs.selected = run.id;
  } catch (err) {
    note.textContent = `not started: ${err.message}`;
  }
  await refreshRuns();
}
async function refreshRuns() {
  clearTimeout(runs.timer);
  let running = false;
  try {
    const list = (await getJson("/api/runs")).runs;
    running = list.some((r) => r.status === "running");
    const none = el("li", { class: "none", text: "none started from this folder yet" });
    document.getElementById("runs").replaceChildren(
      ...(list.length ? [] : [none]),
      ...list.map((r) => {
        const item = el("li", { "data-run": r.id, "data-status": r.status, onclick: () => ((runs.selected = r.id), refreshRuns()) },
          `${r.id} `, el("span", { class: `status status-${r.status}`, text: r.status }));
        item.classList.toggle("selected", r.id === runs.selected);
        return item;
      }));
    if (runs.selected) showRun(await getJson(`/api/runs/${encodeURIComponent(runs.selected)}`));
  } catch (err) {
    document.getElementById("run-note").textContent = `runs: ${err.message}`;
  }
  runs.timer = setTimeout(refreshRuns, running ? 1500 : 5000);
}
function showRun(run) {
  document.getElementById("run-detail").hidden = false;
  const status = document.getElementById("run-status");
  status.dataset.status = run.status;
  status.replaceChildren(`${run.id} `, el("span", { class: `status status-${run.status}`, text: run.status }));
  const stop = document.getElementById("stop-run");
  stop.hidden = run.status !== "running";
  stop.textContent = run.stop_requested ? "Stop now" : "Stop";
  document.getElementById("run-progress").replaceChildren(
    ...run.progress.map((p) => el("li", { text: run.status === "running" ? p.line : `[${p.role}] step ${p.step}` + (p.total ? `/${p.total}` : "") })));
  for (const [stem, panel] of Object.entries(run.plots)) drawPlot(document.getElementById(`plot-${stem}`), panel);
  const summary = document.getElementById("run-summary");
  summary.replaceChildren(...(run.status === "running" ? [] : run.summaries.map((s) => {
    const table = el("table", {}, ...Object.entries(s.rows).map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: String(v) }))));
    return el("div", { class: "summary" }, el("h3", { text: `summary: ${s.stage}` }), table);
  })));
  const log = document.getElementById("run-log");
  const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = run.log;
  if (atEnd) log.scrollTop = log.scrollHeight;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function drawPlot(box, panel) {
  // One line per series against step, 360 wide, a legend line per series under it: the report's
  // panel, drawn as the run goes.
  const [left, right, top, bottom] = [44, 350, 18, 122];
  box.setAttribute("viewBox", `0 0 360 ${136 + 12 * Math.max(1, panel.series.length)}`);
  const steps = panel.series.flatMap((s) => s.steps);
  const values = panel.series.flatMap((s) => s.values);
  const parts = [svg("text", { x: left, y: 12, class: "title" }, panel.title)];
  if (!steps.length) {
    parts.push(svg("text", { x: left, y: 70 }, "nothing logged yet"));
    box.replaceChildren(...parts);
    return;
  }
  const [x0, x1] = [Math.min(...steps), Math.max(...steps)];
  let [y0, y1] = [Math.min(...values), Math.max(...values)];
  if (y0 === y1) [y0, y1] = [y0 - 0.5, y1 + 0.5];
  const x = (v) => left + ((v - x0) / (x1 - x0 || 1)) * (right - left);
  const y = (v) => bottom - ((v - y0) / (y1 - y0)) * (bottom - top);
  parts.push(svg("rect", { x: left, y: top, width: right - left, height: bottom - top, fill: "none", stroke: "#dde1e8" }));
  parts.push(svg("text", { x: left - 4, y: top + 8, "text-anchor": "end" }, y1.toPrecision(3)));
  parts.push(svg("text", { x: left - 4, y: bottom, "text-anchor": "end" }, y0.toPrecision(3)));
  parts.push(svg("text", { x: left, y: bottom + 12 }, `step ${x0}`));
  parts.push(svg("text", { x: right, y: bottom + 12, "text-anchor": "end" }, `${x1}`));
  panel.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const points = s.steps.map((step, j) => `${x(step).toFixed(1)},${y(s.values[j]).toFixed(1)}`).join(" ");
    parts.push(svg("polyline", { points, fill: "none", stroke: color, "stroke-width": 1.5, "data-label": s.label }));
    parts.push(svg("text", { x: left, y: 144 + 12 * i, fill: color }, s.label));
  });
  box.replaceChildren(...parts);
}
async function stopRun() {
  // Ctrl-C to the run: the trainer saves at its step's end; pressed again, the run stops at once.
  try {
    await post(`/api/runs/${encodeURIComponent(runs.selected)}/stop`, {});
  } catch (err) {
    document.getElementById("run-note").textContent = `not stopped: ${err.message}`;
  }
  await refreshRuns();
}

function setMode(mode) {
  state.mode = mode;
  document.getElementById("mode-beginner").classList.toggle("active", mode === "beginner");
  document.getElementById("mode-expert").classList.toggle("active", mode === "expert");
  rerender();
}

async function start() {
  history.replaceState(null, "", "/"); // the token stays out of the address bar and history (the cookie holds it)
  const meta = await (await fetch("/api/schema")).json();
  Object.assign(state, { schema: meta.schema, beginner: meta.beginner, choices: meta.choices });
  const initial = await (await fetch("/api/initial")).json();
  state.doc = initial.config;
  document.getElementById("save-path").value = initial.path;
  document.getElementById("mode-beginner").onclick = () => setMode("beginner");
  document.getElementById("mode-expert").onclick = () => setMode("expert");
  document.getElementById("save").onclick = () => save(false);
  document.getElementById("download").onclick = download;
  document.getElementById("run").onclick = () => save(true); // saves, then shows how to run the file
  document.getElementById("start-run").onclick = startRun;
  document.getElementById("stop-run").onclick = stopRun;
  document.getElementById("load-file").onchange = async (event) => {
    const file = event.target.files[0];
    if (file) await loadText(await file.text());
  };
  rerender();
  refreshRuns();
}
start();
