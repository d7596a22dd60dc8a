// The table views: top-down tree, bottom-up, flat and diff. Each builds a
// LazyTable whose rows come from one route. From `state` they read `metric`,
// `sort` (the column rows are ordered by: incl, excl or name), `mode` (the
// value the bars show and bottom-up counts: incl, or excl for self cost),
// `percent` and `vocab` (metric labels and units, from /runs).

import { get, refParams } from "./api.js";
import { el } from "./dom.js";
import { formatNumber, formatPercent, formatSigned } from "./format.js";
import { LazyTable } from "./table.js";

// The tree shows how often each node ran beside the chosen metric.
const CALLS = "count";

function valueCell(state, total, pick) {
  return (row) => {
    const v = pick(row);
    return state.percent ? formatPercent(v, total()) : state.vocab.format(v, state.metric);
  };
}

function metricColumns(state, total) {
  return [
    { title: "Name", width: "minmax(320px, 1fr)", sortKey: "name" },
    { title: "Inclusive", sortKey: "incl", cell: valueCell(state, total, (r) => r.incl[state.metric] || 0) },
    { title: "Exclusive", sortKey: "excl", cell: valueCell(state, total, (r) => r.excl[state.metric] || 0) },
  ];
}

function barOf(state, total) {
  return (row) => (total() ? (row[state.mode][state.metric] || 0) / total() : 0);
}

/** Top-down tree; opens along the hot path. Rows are keyed by node id. */
export async function treeView(state, { onSelect, onSort }) {
  let total = 0;
  const base = { ...refParams(state.ref), metric: state.metric, sort: state.sort };
  const { vocab } = state;
  const table = new LazyTable({
    columns: [...metricColumns(state, () => total),
      { title: vocab.label(CALLS), cell: (r) => vocab.format(r.incl[CALLS] || 0, CALLS) }],
    sort: state.sort,
    onSort,
    onSelect,
    barOf: barOf(state, () => total),
    fetchChildren: (keys) => get("children", { ...base, node: keys.join(",") }),
    batch: state.nodesPerRequest,
  });
  const hot = await get("hotpath", { ...base, node: 0, threshold: state.threshold });
  total = hot.total;
  table.showHotPath(hot);
  return table;
}

/** Bottom-up: top level = frames; children = their callers. Keys are frame-id paths. */
export async function bottomUpView(state) {
  let total = 0;
  const base = {
    ...refParams(state.ref), metric: state.metric, mode: state.mode, sort: "incl",
    kinds: "operator,kernel", // who calls this operator or kernel
  };
  const table = new LazyTable({
    columns: [
      { title: "Frame \u2190 callers", width: "minmax(320px, 1fr)" },
      { title: state.mode === "incl" ? "Inclusive" : "Self", cell: valueCell(state, () => total, (r) => r.incl[state.metric] || 0) },
      { title: "Nodes", cell: (r) => formatNumber(r.nodes || 0) },
    ],
    keyOf: (row, parentKey) => (parentKey === null ? String(row.id) : `${parentKey},${row.id}`),
    barOf: (row) => (total ? (row.incl[state.metric] || 0) / total : 0),
    fetchChildren: async (keys) => {
      const answers = await Promise.all(keys.map((key) => get("bottomup", { ...base, path: key })));
      return Object.fromEntries(keys.map((key, i) => [key, answers[i].rows]));
    },
    emptyText: "No frames carry this metric.",
  });
  const top = await get("bottomup", base);
  total = top.total;
  table.setRoots(top.rows);
  return table;
}

/** Flat: every frame once (of the kinds in `state.kinds`), with its totals over the window. */
export async function flatView(state, { onSort }) {
  let total = 0;
  const table = new LazyTable({
    columns: [...metricColumns(state, () => total), { title: "Nodes", cell: (r) => formatNumber(r.nodes || 0) }],
    sort: state.sort,
    onSort,
    barOf: barOf(state, () => total),
    fetchChildren: async () => ({}),
    emptyText: "No frames of this kind.",
  });
  const answer = await get("flat", { ...refParams(state.ref), metric: state.metric, sort: state.sort, kinds: state.kinds, limit: 500 });
  total = answer.total;
  table.setRoots(answer.rows.map((row) => ({ ...row, kids: 0 })));
  return table;
}

/** Delta tree of window A (the selection) against B (`state.b`), biggest change first. */
export async function diffView(state) {
  let scale = 0;
  const base = { ...refParams(state.ref), ...refParams(state.b, "b_"), metric: state.metric };
  const m = state.metric;
  const unit = state.vocab.unit(m);
  const change = (r) => (r.b || 0) - (r.a || 0);
  // Red where B costs more than A, green where it costs less: cells and bars alike.
  const trend = (r) => (change(r) > 0 ? "worse" : change(r) < 0 ? "better" : "same");
  const table = new LazyTable({
    columns: [
      { title: "Name (A \u2192 B)", width: "minmax(320px, 1fr)" },
      { title: "A", cell: (r) => formatNumber(r.a, unit) },
      { title: "B", cell: (r) => formatNumber(r.b, unit) },
      { title: "\u0394", cell: (r) => el("span", { className: `delta ${trend(r)}` }, formatSigned(change(r), unit)) },
      { title: "\u0394 %", cell: (r) => el("span", { className: `delta ${trend(r)}` },
        r.a ? `${change(r) > 0 ? "+" : ""}${formatPercent(change(r), r.a)}` : (r.b ? "new" : "\u2013")) },
    ],
    barOf: (r) => (scale ? Math.abs(change(r)) / scale : 0),
    barClassOf: trend,
    fetchChildren: (keys) => get("diff/children", { ...base, node: keys.join(",") }),
    batch: state.nodesPerRequest,
  });
  const answer = await get("diff", { ...base, threshold: state.threshold / 2 });
  scale = Math.max(answer.total_a, answer.total_b);
  table.setRoots([answer.root]);
  table.addChildren(answer.children, answer.more);
  table.draw();
  return table;
}
