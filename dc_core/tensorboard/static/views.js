// The table views: top-down tree, bottom-up, flat and diff. Each builds a
// LazyTable whose rows come from one route; `state` holds the selectors.

import { get, refParams } from "./api.js";
import { el, formatPercent, formatValue } from "./dom.js";
import { LazyTable } from "./table.js";

function valueCell(state, total, pick) {
  return (row) => {
    const v = pick(row);
    return state.percent ? formatPercent(v, total()) : formatValue(v, state.metric);
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
  const base = { ...refParams(state.ref), metric: state.metric, sort: state.mode };
  const table = new LazyTable({
    columns: [...metricColumns(state, () => total), { title: "Count", cell: (r) => formatValue(r.incl.count || 0, "count") }],
    sort: state.mode,
    onSort,
    onSelect,
    barOf: barOf(state, () => total),
    fetchChildren: (keys) => get("children", { ...base, node: keys.join(",") }),
  });
  const hot = await get("hotpath", { ...base, node: 0, threshold: state.threshold });
  total = hot.total;
  table.setRoots([hot.root]);
  table.addChildren(hot.children, hot.more);
  table.hotChain = hot.chain;
  table.selected = String(hot.chain[hot.chain.length - 1]);
  table.draw();
  return table;
}

/** Bottom-up: top level = frames; children = their callers. Keys are frame-id paths. */
export async function bottomUpView(state, { onSort }) {
  let total = 0;
  const base = {
    ...refParams(state.ref), metric: state.metric, mode: state.mode, sort: "incl",
    kinds: "operator,kernel", // who calls this operator or kernel
  };
  const table = new LazyTable({
    columns: [
      { title: "Frame \u2190 callers", width: "minmax(320px, 1fr)" },
      { title: state.mode === "incl" ? "Inclusive" : "Self", cell: valueCell(state, () => total, (r) => r.incl[state.metric] || 0) },
      { title: "Nodes", cell: (r) => String(r.nodes || 0) },
    ],
    onSort,
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

/** Flat: every frame once, with its totals over the window. */
export async function flatView(state, { onSort }) {
  let total = 0;
  const table = new LazyTable({
    columns: [...metricColumns(state, () => total), { title: "Nodes", cell: (r) => String(r.nodes || 0) }],
    sort: state.mode,
    onSort,
    barOf: barOf(state, () => total),
    fetchChildren: async () => ({}),
  });
  const answer = await get("flat", { ...refParams(state.ref), metric: state.metric, sort: state.mode, kinds: state.kinds, limit: 500 });
  total = answer.total;
  table.setRoots(answer.rows.map((row) => ({ ...row, kids: 0 })));
  return table;
}

function signed(value, metric) {
  return `${value > 0 ? "+" : ""}${formatValue(value, metric)}`;
}

/** Delta tree of window A (the selection) against B, biggest change first. */
export async function diffView(state, { onSort }) {
  let scale = 0;
  const base = { ...refParams(state.ref), ...refParams(state.b, "b_"), metric: state.metric };
  const m = state.metric;
  const change = (r) => (r.b || 0) - (r.a || 0);
  const table = new LazyTable({
    columns: [
      { title: "Name (A \u2192 B)", width: "minmax(320px, 1fr)" },
      { title: "A", cell: (r) => formatValue(r.a, m) },
      { title: "B", cell: (r) => formatValue(r.b, m) },
      { title: "\u0394", cell: (r) => el("span", { className: change(r) > 0 ? "worse" : change(r) < 0 ? "better" : "" }, signed(change(r), m)) },
      { title: "\u0394 %", cell: (r) => (r.a ? `${change(r) > 0 ? "+" : ""}${((100 * change(r)) / r.a).toFixed(1)}%` : (r.b ? "new" : "\u2013")) },
    ],
    onSort,
    barOf: (r) => (scale ? Math.abs(change(r)) / scale : 0),
    fetchChildren: (keys) => get("diff/children", { ...base, node: keys.join(",") }),
  });
  const answer = await get("diff", { ...base, threshold: state.threshold / 2 });
  scale = Math.max(answer.total_a, answer.total_b);
  table.setRoots([answer.root]);
  table.addChildren(answer.children, answer.more);
  table.draw();
  table.totals = { a: answer.total_a, b: answer.total_b };
  return table;
}
