// Entry point TensorBoard loads in the tab's iframe: render() builds the page,
// holds the selection state and switches between the views.

import { DATA_VERSION, get, linkStylesheet, refParams } from "./api.js";
import { ranksTable, seriesCharts, stepChart } from "./charts.js";
import { showDetails, showFindings } from "./details.js";
import { clear, el } from "./dom.js";
import { drawFlame } from "./flame.js";
import { bottomUpView, diffView, flatView, treeView } from "./views.js";

const TABS = [
  ["tree", "Tree"], ["bottomup", "Bottom-up"], ["flat", "Flat"], ["flame", "Flame graph"],
  ["diff", "Diff"], ["ranks", "Ranks"], ["steps", "Steps & system"],
];
const METRIC_NAMES = {
  cpu_time_ns: "CPU time", device_time_ns: "Device time", count: "Count", samples: "Samples",
  alloc_bytes: "Alloc bytes", flops: "FLOPs",
};

const state = {
  runs: [], ref: null, b: null, metric: "cpu_time_ns", mode: "incl", percent: false,
  tab: "tree", query: "", threshold: 0.05, kinds: "all", flameRoot: 0, table: null, overview: null,
};
const ui = {};

function select(options, value, onchange, label) {
  const node = el("select", { "aria-label": label, onchange: (e) => onchange(e.target.value) });
  for (const [v, text] of options) node.appendChild(el("option", { value: v, selected: String(v) === String(value) }, text));
  return el("label", { className: "field" }, `${label} `, node);
}

function ranksOf(run) { return (state.runs.find((r) => r.run === run) || { ranks: [] }).ranks; }
function windowsOf(run, rank) { return (ranksOf(run).find((r) => r.rank === Number(rank)) || { windows: [] }).windows; }

/** What the selector shows for window id `w` ("5-8", half-open): the server's label ("steps 5\u20137"). */
function windowLabel(run, rank, w) {
  const entry = ranksOf(run).find((r) => r.rank === Number(rank));
  return (entry && entry.labels && entry.labels[w]) || w;
}

function pickRef(run, rank, window) {
  const ranks = ranksOf(run);
  const r = ranks.some((x) => x.rank === Number(rank)) ? Number(rank) : (ranks[0] || { rank: 0 }).rank;
  const windows = windowsOf(run, r);
  return { run, rank: r, window: windows.includes(window) ? window : windows[0] };
}

function drawToolbar() {
  const { ref } = state;
  const metrics = (state.overview ? state.overview.metrics : Object.keys(METRIC_NAMES));
  const search = el("input", { type: "search", placeholder: "Search frames\u2026", value: state.query, "aria-label": "search" });
  search.addEventListener("keydown", (e) => { if (e.key === "Enter") runSearch(search.value.trim()); });
  ui.searchInfo = el("span", { className: "muted search-info" });
  clear(ui.toolbar).append(
    select(state.runs.map((r) => [r.run, r.run]), ref.run, (v) => changeRef(pickRef(v, ref.rank, ref.window)), "Run"),
    select(ranksOf(ref.run).map((r) => [r.rank, `${r.rank} (${r.host})`]), ref.rank, (v) => changeRef(pickRef(ref.run, v, ref.window)), "Rank"),
    select(windowsOf(ref.run, ref.rank).map((w) => [w, windowLabel(ref.run, ref.rank, w)]), ref.window, (v) => changeRef({ ...ref, window: v }), "Window"),
    select(metrics.map((m) => [m, METRIC_NAMES[m] || m]), state.metric, (v) => { state.metric = v; showTab(); }, "Metric"),
    select([["incl", "Inclusive"], ["excl", "Exclusive"]], state.mode, (v) => { state.mode = v; showTab(); }, "Value"),
    el("label", { className: "field" }, el("input", { type: "checkbox", checked: state.percent, onchange: (e) => { state.percent = e.target.checked; if (state.table) state.table.draw(); } }), " % of window"),
    search, ui.searchInfo,
  );
}

function drawTabs() {
  clear(ui.tabs).append(...TABS.map(([id, text]) => el("button", {
    className: `tab ${state.tab === id ? "active" : ""}`, dataset: { tab: id },
    onclick: () => { state.tab = id; showTab(); },
  }, text)));
}

function fail(error) {
  ui.status.appendChild(el("div", { className: "error" }, String(error.message || error)));
}

async function changeRef(ref) {
  state.ref = ref;
  state.flameRoot = 0;
  state.b = null;
  await loadWindow();
}

async function loadWindow() {
  drawToolbar();
  clear(ui.status);
  try {
    state.overview = await get("window", refParams(state.ref));
  } catch (error) { fail(error); return; }
  const totals = state.overview.totals;
  if (!(totals[state.metric] > 0)) state.metric = state.overview.metrics.find((m) => totals[m] > 0) || state.metric;
  drawToolbar();
  showFindings(ui.findings, state.overview.findings, reveal);
  await showTab();
}

function onSort(key) {
  if (key === "name") return;
  state.mode = key;
  drawToolbar();
  showTab();
}

async function showTab() {
  drawTabs();
  const view = clear(ui.view);
  view.appendChild(el("div", { className: "muted" }, "Loading\u2026"));
  state.table = null;
  const onSelect = (row) => showDetails(ui.details, state, row.id, reveal).catch(fail);
  try {
    let content;
    if (state.tab === "tree") {
      state.table = await treeView(state, { onSelect, onSort });
      content = state.table.element;
    } else if (state.tab === "bottomup") {
      state.table = await bottomUpView(state, { onSort });
      content = state.table.element;
    } else if (state.tab === "flat") {
      state.table = await flatView(state, { onSort });
      content = state.table.element;
    } else if (state.tab === "flame") {
      content = el("div", { className: "flame-view" });
      await zoomFlame(content, state.flameRoot);
    } else if (state.tab === "diff") {
      content = await diffContent();
    } else if (state.tab === "ranks") {
      const data = await get("ranks", { run: state.ref.run, window: state.ref.window, metric: state.metric });
      content = ranksTable(data, state.metric);
    } else {
      const o = state.overview;
      content = el("div", {}, stepChart(o.step_times_ns, o.steps[0]), seriesCharts(o.system));
    }
    clear(view).appendChild(content);
    if (state.tab === "tree" && state.table.selected) state.table.select(state.table.selected);
  } catch (error) {
    clear(view);
    fail(error);
  }
}

async function zoomFlame(container, root) {
  state.flameRoot = root;
  const data = await get("flame", { ...refParams(state.ref), node: root, metric: state.metric });
  drawFlame(container, data, {
    metric: state.metric, total: data.total,
    onZoom: (id) => zoomFlame(container, id).catch(fail),
    onSelect: (id) => showDetails(ui.details, state, id, reveal).catch(fail),
  });
}

function defaultB() {
  const { run, rank, window } = state.ref;
  const others = windowsOf(run, rank).filter((w) => w !== window);
  if (others.length) return { run, rank, window: others[0] };
  const rankB = ranksOf(run).find((r) => r.rank !== rank && r.windows.includes(window));
  if (rankB) return { run, rank: rankB.rank, window };
  const runB = state.runs.find((r) => r.run !== run);
  return runB ? pickRef(runB.run, rank, window) : { ...state.ref };
}

async function diffContent() {
  if (!state.b) state.b = defaultB();
  const b = state.b;
  const choose = (ref) => { state.b = ref; showTab(); };
  const bar = el("div", { className: "subbar" }, el("b", {}, "A = the selection above; compare with B: "),
    select(state.runs.map((r) => [r.run, r.run]), b.run, (v) => choose(pickRef(v, b.rank, b.window)), "Run"),
    select(ranksOf(b.run).map((r) => [r.rank, String(r.rank)]), b.rank, (v) => choose(pickRef(b.run, v, b.window)), "Rank"),
    select(windowsOf(b.run, b.rank).map((w) => [w, windowLabel(b.run, b.rank, w)]), b.window, (v) => choose({ ...b, window: v }), "Window"));
  state.table = await diffView(state, { onSort });
  return el("div", {}, bar, state.table.element);
}

async function runSearch(query) {
  state.query = query;
  if (state.tab !== "tree") { state.tab = "tree"; await showTab(); }
  const table = state.table;
  if (!query) { table.setQuery(""); ui.searchInfo.textContent = ""; return; }
  try {
    const found = await get("search", { ...refParams(state.ref), q: query, metric: state.metric, limit: 50 });
    const ancestors = new Set(["0"]);
    for (const m of found.matches.slice(0, 20)) m.path.slice(0, -1).forEach((id) => ancestors.add(String(id)));
    await table.expand([...ancestors]);
    table.setQuery(query, found.matches.map((m) => String(m.id)));
    ui.searchInfo.textContent = `${found.count} matching node${found.count === 1 ? "" : "s"}`;
    if (found.matches.length) table.select(String(found.matches[0].id), true);
  } catch (error) { fail(error); }
}

async function reveal(nodeId) {
  if (state.tab !== "tree") { state.tab = "tree"; await showTab(); }
  try {
    const info = await get("node", { ...refParams(state.ref), node: nodeId, metric: state.metric });
    await state.table.expand(["0", ...info.path.slice(0, -1).map((p) => String(p.id))]);
    state.table.select(String(nodeId), true);
  } catch (error) { fail(error); }
}

/** Called by TensorBoard's plugin iframe once the module is loaded. */
export async function render() {
  linkStylesheet(document);
  document.body.appendChild(el("div", { className: "dc" },
    ui.toolbar = el("div", { className: "toolbar" }),
    ui.tabs = el("div", { className: "tabs" }),
    ui.status = el("div", { className: "status" }),
    el("div", { className: "main" },
      ui.view = el("div", { className: "view" }),
      el("div", { className: "side" }, ui.details = el("div", { className: "details" }), ui.findings = el("div", { className: "findings" })))));
  try {
    const listing = await get("runs");
    if (listing.data_version !== DATA_VERSION) fail(new Error(`server data version ${listing.data_version}, page expects ${DATA_VERSION}; reload the page`));
    state.runs = listing.runs;
    for (const [file, why] of Object.entries(listing.errors || {})) fail(new Error(`${file}: ${why}`));
  } catch (error) { fail(error); return; }
  if (!state.runs.length) {
    ui.view.appendChild(el("div", { className: "empty" }, "No DeepContext profiles under this logdir yet."));
    return;
  }
  const first = state.runs[0];
  state.ref = pickRef(first.run, first.ranks[0].rank, null);
  await loadWindow();
}
