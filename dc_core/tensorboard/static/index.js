// Entry point TensorBoard loads in the tab's iframe: render() builds the page,
// holds the selection state, shows the selected tab through TABS and keeps
// the state in the address (urlstate.js) so a reload or a link reopens it.

import { DATA_VERSION, Latest, get, linkStylesheet, refParams } from "./api.js";
import { ranksTable, systemCharts, windowsChart } from "./charts.js";
import { showDetails } from "./details.js";
import { communicationView } from "./communication.js";
import { clear, el, select } from "./dom.js";
import { drawFlame } from "./flame.js";
import { findingsStrip, findingsView } from "./findings.js";
import { formatNumber } from "./format.js";
import { memoryView } from "./memory.js";
import { Listing } from "./runs.js";
import { showDistribution, spreadParams, spreadView } from "./spread.js";
import { addressWindow, readState, saveState } from "./urlstate.js";
import { bottomUpView, diffView, flatView, treeView } from "./views.js";
import { Vocabulary } from "./vocabulary.js";

const state = {
  runs: new Listing([]), vocab: new Vocabulary(), nodesPerRequest: null, ref: null, b: null, metric: null,
  sort: "incl", // the column tables are ordered by: incl, excl or name (a header click)
  mode: "incl", // the value bars show and bottom-up counts: incl, or excl (self) (the Value selector)
  percent: false, tab: "tree", query: "", threshold: 0.05, kinds: "all", table: null, overview: null,
  flameRoot: 0, // the node the flame graph is zoomed into
  flameHistory: [], // the roots zoomed from, latest last (Back, Esc and Backspace return to them)
  flameSelected: null, // the frame the keyboard moves from
  flameFocus: false, // the flame graph had the focus when it was last redrawn
  flameWhole: null, // { key, data }: the window's whole flame graph, for the minimap
  orientation: "icicle", // the flame graph's: "icicle" (root on top) or "flame" (root at the bottom)
  allRanks: false, // the Rank selector's "All ranks": the tree is the window's ranks merged
  spreadSort: "mean", // the column the All ranks tree is ordered by: mean, max, imbalance or name
  selection: null, // the node last picked: { from: "rank" | "all", node }, for the Windows tab
  memoryDevice: null, // the Memory tab's device (null: the window's main device)
  memorySort: "incl", // the column the Memory tree is ordered by: incl, excl, name or a category
};
const ui = {};
// One ticket counter per panel: an answer to a request since superseded is dropped.
const latest = { window: new Latest(), view: new Latest(), details: new Latest() };

/**
 * Tab id -> title and the function that builds its content. `show()`
 * resolves to { element, table?, shown? }: `table` becomes `state.table`,
 * `shown()` runs once the element is in the page. `oneRank` tabs show one
 * rank's window and are hidden while "All ranks" is chosen.
 */
const TABS = {
  tree: { title: "Tree", show: showTree },
  findings: { title: "Findings", show: showFindings, oneRank: true },
  bottomup: { title: "Bottom-up", show: async () => tableContent(await bottomUpView(state)), oneRank: true },
  flat: { title: "Flat", show: showFlat, oneRank: true },
  flame: { title: "Flame graph", show: showFlame, oneRank: true },
  memory: { title: "Memory", show: showMemory, oneRank: true },
  communication: { title: "Communication", show: () => communicationView(state, { onSelect: showNode }), oneRank: true },
  diff: { title: "Diff", show: showDiff, oneRank: true },
  ranks: { title: "Ranks", show: showRanks },
  windows: { title: "Windows", show: showWindows },
  steps: { title: "Steps & system", show: showSteps, oneRank: true },
};

function tableContent(table, ...above) {
  return { element: above.length ? el("div", {}, ...above, table.element) : table.element, table };
}

async function showTree() {
  const onSelect = (row) => showNode(row.id);
  if (state.allRanks) {
    const table = await spreadView(state, { onSelect, onSort: (key) => { state.spreadSort = key; showTab(); }, onError: fail });
    return { ...tableContent(table), shown: () => { if (table.selected) table.select(table.selected); } };
  }
  const table = await treeView(state, { onSelect, onSort });
  // The findings that save the most, above the tree (findings are one rank's).
  const strip = findingsStrip(state.overview.findings, reveal, () => { state.tab = "findings"; showTab(); });
  return { ...tableContent(table, strip), shown: () => { if (table.selected) table.select(table.selected); } };
}

async function showFindings() {
  return { element: findingsView(state.overview.findings, state.vocab, reveal) };
}

async function showFlat() {
  const kinds = [["all", "all kinds"], ...state.overview.kinds.map((k) => [k, k])]; // those this window has
  const bar = el("div", { className: "subbar" },
    select(kinds, state.kinds, (v) => { state.kinds = v; showTab(); }, "Kinds"));
  return tableContent(await flatView(state, { onSort }), bar);
}

async function showFlame() {
  const { metric, vocab, ref } = state;
  const base = { ...refParams(ref), metric };
  const key = JSON.stringify(base);
  const whole = state.flameWhole && state.flameWhole.key === key ? state.flameWhole.data : null;
  const [data, wholeData] = await Promise.all([get("flame", { ...base, node: state.flameRoot }),
    whole || (state.flameRoot ? get("flame", { ...base, node: 0 }) : null)]);
  state.flameWhole = { key, data: wholeData || data };
  const element = el("div", { className: "flame-view" });
  const shown = () => { // drawn in the page, where it has a width
    ui.flame = drawFlame(element, data, {
      format: (v) => vocab.format(v, metric), total: data.total, whole: state.flameWhole.data,
      orientation: state.orientation, query: state.query, selected: state.flameSelected,
      canGoBack: state.flameHistory.length > 0 || data.root !== 0, focus: state.flameFocus,
      onZoom: (id) => zoomFlame(id), onBack: () => backFlame(data), onSelect: (id) => { state.flameSelected = id; showNode(id); },
      onOrientation: (o) => { state.orientation = o; showTab(); },
    });
  };
  return { element, shown, fill: true };
}

async function showMemory() {
  const { element, table = null } = await memoryView(state, {
    onSelect: (row) => showNode(row.id),
    onDevice: (device) => { state.memoryDevice = device; showTab(); },
    onSort: (key) => { state.memorySort = key; showTab(); },
  });
  return { element, table, shown: () => { if (table && table.selected) table.select(table.selected); } };
}

/** Zoom the flame graph into `id`, remembering where it was. */
function zoomFlame(id) {
  state.flameHistory.push(state.flameRoot);
  state.flameRoot = id;
  state.flameSelected = id;
  redrawFlame();
  showNode(id);
}

/** Back to the root zoomed from, else out to the root's parent; the frame
 * zoomed out of stays selected. `data` is the graph shown now. */
function backFlame(data) {
  const from = state.flameRoot;
  if (state.flameHistory.length) state.flameRoot = state.flameHistory.pop();
  else if (data.root !== 0) state.flameRoot = data.ancestors.length ? data.ancestors[data.ancestors.length - 1].id : 0;
  else return;
  state.flameSelected = from;
  redrawFlame();
}

function redrawFlame() {
  const active = document.activeElement;
  state.flameFocus = Boolean(active && active.closest && active.closest(".flame-view"));
  showTab();
}

async function showDiff() {
  if (!state.b) state.b = state.runs.other(state.ref);
  const { b, runs } = state;
  const choose = (ref) => { state.b = ref; showTab(); };
  const bar = el("div", { className: "subbar" }, el("b", {}, "A = the selection above; compare with B: "),
    select(runs.names().map((r) => [r, r]), b.run, (v) => choose(runs.pick(v, b.rank, b.window)), "Run"),
    select(runs.rankOptions(b.run), b.rank, (v) => choose(runs.pick(b.run, v, b.window)), "Rank"),
    select(runs.windowOptions(b.run, b.rank), b.window, (v) => choose({ ...b, window: v }), "Window"));
  return tableContent(await diffView(state), bar);
}

async function showRanks() {
  const data = await get("ranks", { run: state.ref.run, window: state.ref.window, metric: state.metric });
  return { element: ranksTable(data, state.metric, state.vocab) };
}

/** The picked node's cost in each window of the rank (`state.ref.rank`). */
async function showWindows() {
  const picked = state.selection || { from: "rank", node: 0 };
  const { ref, metric, vocab } = state;
  const data = await get("windows", { ...refParams(ref), metric, node: picked.node, from: picked.from });
  const title = data.path.length ? data.path[data.path.length - 1] : "the whole window";
  return {
    element: el("div", {},
      el("h4", {}, `${title}: ${vocab.label(metric)} per window, rank ${data.rank}`),
      el("div", { className: "muted" }, data.found ? data.path.join(" \u203a ") : "No window of this rank has this call path."),
      windowsChart(data, (v) => vocab.format(v, metric), vocab.unit(metric))),
  };
}

async function showSteps() {
  const o = state.overview;
  return { element: systemCharts(o.step_times_ns, o.steps[0], o.system) };
}

function drawToolbar() {
  const { ref, runs, vocab } = state;
  const metrics = state.overview ? state.overview.metrics : vocab.metrics;
  const search = el("input", { type: "search", placeholder: "Search frames\u2026", value: state.query, "aria-label": "search" });
  search.addEventListener("keydown", (e) => { if (e.key === "Enter") runSearch(search.value.trim()); });
  // The flame graph matches the frames it holds as the query is typed.
  search.addEventListener("input", () => { if (state.tab === "flame" && ui.flame) runSearch(search.value.trim()); });
  ui.searchInfo = el("span", { className: "muted search-info" });
  clear(ui.toolbar).append(
    select(runs.names().map((r) => [r, r]), ref.run, (v) => changeRef(runs.pick(v, ref.rank, ref.window)), "Run"),
    select(rankOptions(), state.allRanks ? "all" : ref.rank, chooseRank, "Rank"),
    select(runs.windowOptions(ref.run, ref.rank), ref.window, (v) => changeRef({ ...ref, window: v }), "Window"),
    select(metrics.map((m) => [m, vocab.label(m)]), state.metric, (v) => { state.metric = v; resetFlame(); showTab(); }, "Metric"),
    select([["incl", "Inclusive"], ["excl", "Exclusive"]], state.mode, (v) => { state.mode = v; showTab(); }, "Value"),
    el("label", { className: "field" }, el("input", { type: "checkbox", checked: state.percent, onchange: (e) => { state.percent = e.target.checked; if (state.table) state.table.draw(); } }), " % of window"),
    search, ui.searchInfo,
  );
}

/** The Rank selector's choices: every rank, and "All ranks" when two or more wrote this window. */
function rankOptions() {
  const { ref, runs } = state;
  const options = runs.rankOptions(ref.run);
  const writers = runs.ranks(ref.run).filter((r) => r.windows.includes(ref.window)).length;
  return writers >= 2 ? [["all", `All ranks (${writers})`], ...options] : options;
}

function chooseRank(value) {
  if (value === "all") {
    state.allRanks = true;
    if (TABS[state.tab].oneRank) state.tab = "tree";
    drawToolbar();
    showTab();
    return;
  }
  state.allRanks = false;
  changeRef(state.runs.pick(state.ref.run, value, state.ref.window));
}

/** From "All ranks", open rank `rank`'s tree at the node with the call path of merged node `node`. */
async function jumpToRank(rank, node) {
  try {
    const found = await get("allranks/locate", { ...spreadParams(state), node, rank });
    state.allRanks = false;
    state.tab = "tree";
    await changeRef({ ...state.ref, rank: found.rank });
    await reveal(found.node);
  } catch (error) { fail(error); }
}

function drawTabs() {
  const shown = Object.entries(TABS).filter(([, tab]) => !(state.allRanks && tab.oneRank));
  clear(ui.tabs).append(...shown.map(([id, { title }]) => el("button", {
    className: `tab ${state.tab === id ? "active" : ""}`, dataset: { tab: id },
    onclick: () => { state.tab = id; showTab(); },
  }, title)));
}

function fail(error) {
  const text = String(error.message || error);
  if ([...ui.status.children].some((node) => node.textContent === text)) return; // shown already (a view redrawn)
  ui.status.appendChild(el("div", { className: "error" }, text));
}

function resetFlame() {
  state.flameRoot = 0;
  state.flameHistory = [];
  state.flameSelected = null;
  state.flameWhole = null;
}

async function changeRef(ref) {
  state.ref = ref;
  resetFlame();
  state.b = null;
  state.selection = null;
  state.memoryDevice = null; // another window may have other devices
  if (state.allRanks && rankOptions()[0][0] !== "all") state.allRanks = false; // one rank wrote this window
  await loadWindow();
}

async function loadWindow() {
  const ticket = latest.window.next();
  latest.view.next(); // the previous window's view and details are moot now
  latest.details.next();
  drawToolbar();
  clear(ui.status);
  clear(ui.details).append(el("h3", {}, "Details"), el("div", { className: "muted" }, "Pick a row or a frame to see its details here."));
  let overview;
  try {
    overview = await get("window", refParams(state.ref));
  } catch (error) {
    if (!latest.window.stale(ticket)) fail(error);
    return;
  }
  if (latest.window.stale(ticket)) return;
  state.overview = overview;
  if (overview.stored_rank !== undefined) { // the file was moved or copied from another rank's directory
    ui.status.appendChild(el("div", { className: "note" },
      `Rank ${overview.rank} (its directory); the file itself says rank ${overview.stored_rank}.`));
  }
  const { totals, metrics } = overview;
  if (!(totals[state.metric] > 0)) state.metric = metrics.find((m) => totals[m] > 0) || state.metric || metrics[0];
  if (!overview.kinds.includes(state.kinds)) state.kinds = "all";
  drawToolbar();
  await showTab();
}

function onSort(key) {
  state.sort = key;
  showTab();
}

/** Show the selected tab; resolves to whether it is still the current view. */
async function showTab() {
  const ticket = latest.view.next();
  drawTabs();
  saveUrl();
  ui.flame = null;
  const view = clear(ui.view);
  view.appendChild(el("div", { className: "muted" }, "Loading\u2026"));
  state.table = null;
  try {
    const { element, table = null, shown, fill = false } = await TABS[state.tab].show();
    if (latest.view.stale(ticket)) return false;
    state.table = table;
    view.classList.toggle("fill", fill); // a view that takes the pane's whole height (the flame graph)
    clear(view).appendChild(element);
    if (shown) shown();
    return true;
  } catch (error) {
    if (latest.view.stale(ticket)) return false;
    clear(view);
    fail(error);
    return false;
  }
}

/** The tree tab's table, showing it first if another tab or nothing is up:
 * the selected rank's (leaving All ranks: findings are per rank), or with
 * `merged` the All ranks tree while it is chosen. */
async function treeTable(merged = false) {
  if (state.allRanks && !merged) {
    state.allRanks = false;
    drawToolbar();
    state.table = null;
  }
  if (state.tab !== "tree" || !state.table) {
    state.tab = "tree";
    if (!(await showTab())) return null;
  }
  return state.table;
}

function showNode(id) {
  const ticket = latest.details.next();
  const stale = () => latest.details.stale(ticket);
  state.selection = { from: state.allRanks ? "all" : "rank", node: id };
  saveUrl();
  const shown = state.allRanks
    ? showDistribution(ui.details, state, id, jumpToRank, stale)
    : showDetails(ui.details, state, id, reveal, stale);
  shown.catch((error) => { if (!stale()) fail(error); });
}

async function runSearch(query) {
  state.query = query;
  if (state.tab === "flame" && ui.flame) { // the flame graph highlights the frames it holds
    const count = ui.flame.setQuery(query);
    ui.searchInfo.textContent = query ? `${formatNumber(count)} matching frame${count === 1 ? "" : "s"}` : "";
    return;
  }
  // All ranks searches its merged tree; otherwise the selected rank's tree.
  const merged = state.allRanks;
  const table = await treeTable(merged);
  if (!table) return;
  const ticket = latest.view.current();
  if (!query) { table.setQuery(""); ui.searchInfo.textContent = ""; return; }
  try {
    const where = merged ? ["allranks/search", spreadParams(state)] : ["search", refParams(state.ref)];
    const found = await get(where[0], { ...where[1], q: query, metric: state.metric, limit: 50 });
    if (latest.view.stale(ticket)) return;
    const ancestors = new Set(["0"]);
    for (const m of found.matches.slice(0, 20)) m.path.slice(0, -1).forEach((id) => ancestors.add(String(id)));
    await table.expand([...ancestors]);
    if (latest.view.stale(ticket)) return;
    table.setQuery(query, found.matches.map((m) => String(m.id)));
    ui.searchInfo.textContent = `${formatNumber(found.count)} matching node${found.count === 1 ? "" : "s"}`;
    if (found.matches.length) table.select(String(found.matches[0].id), true);
  } catch (error) { if (!latest.view.stale(ticket)) fail(error); }
}

async function reveal(nodeId) {
  const table = await treeTable();
  if (!table) return;
  const ticket = latest.view.current();
  try {
    const info = await get("node", { ...refParams(state.ref), node: nodeId, metric: state.metric });
    if (latest.view.stale(ticket)) return;
    await table.expand(["0", ...info.path.slice(0, -1).map((p) => String(p.id))]);
    if (latest.view.stale(ticket)) return;
    table.select(String(nodeId), true);
  } catch (error) { if (!latest.view.stale(ticket)) fail(error); }
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
      el("div", { className: "side" }, ui.details = el("div", { className: "details" })))));
  ui.address = addressWindow(window);
  try {
    const listing = await get("runs");
    if (listing.data_version !== DATA_VERSION) fail(new Error(`server data version ${listing.data_version}, page expects ${DATA_VERSION}; reload the page`));
    state.vocab = new Vocabulary(listing.vocabulary);
    state.runs = new Listing(listing.runs);
    state.nodesPerRequest = listing.max_nodes_per_request;
    state.metric = state.vocab.metrics[0] || null;
    for (const [file, why] of Object.entries(listing.errors || {})) fail(new Error(`${file}: ${why}`));
  } catch (error) { fail(error); return; }
  if (!state.runs.runs.length) {
    ui.view.appendChild(el("div", { className: "empty" }, "No DeepContext profiles under this logdir yet."));
    return;
  }
  const node = restore(readState(ui.address.location.hash));
  await loadWindow();
  if (node !== null) await restoreNode(node);
}

/** The run, rank, window, view, metric and zoom the address names, where this
 * logdir has them (the first run's first window otherwise); resolves to the
 * node it names, or null. */
function restore(saved) {
  const { runs } = state;
  const run = runs.names().includes(saved.run) ? saved.run : runs.runs[0].run;
  state.ref = runs.pick(run, saved.rank ?? runs.ranks(run)[0].rank, saved.window ?? null);
  if (saved.rank === "all" && rankOptions()[0][0] === "all") state.allRanks = true;
  if (saved.view in TABS && !(state.allRanks && TABS[saved.view].oneRank)) state.tab = saved.view;
  if (state.vocab.metrics.includes(saved.metric)) state.metric = saved.metric;
  if (saved.orient === "flame") state.orientation = "flame";
  const number = (text) => (/^\d+$/.test(text || "") ? Number(text) : null);
  state.flameRoot = number(saved.zoom) ?? 0;
  const node = number(saved.node);
  if (node !== null && state.tab === "flame") state.flameSelected = node;
  return node;
}

/** Select `node` as the address names it: opened in the tree, else shown in the details. */
async function restoreNode(node) {
  if (state.tab === "tree" && !state.allRanks) await reveal(node);
  else showNode(node);
}

/** Write the state a link should reopen into the address. */
function saveUrl() {
  if (!state.ref || !ui.address) return;
  saveState(ui.address, {
    run: state.ref.run, rank: state.allRanks ? "all" : state.ref.rank, window: state.ref.window, view: state.tab,
    node: state.selection ? state.selection.node : null, zoom: state.flameRoot || null, metric: state.metric,
    orient: state.orientation === "flame" ? "flame" : null,
  });
}
