// "All ranks": the ranks of one window merged into one tree, each node with
// the spread of the metric over the ranks (/allranks), and a node's
// distribution over the ranks in the side panel (/allranks/node).

import { get } from "./api.js";
import { histogram, rankStrip } from "./charts.js";
import { clear, el, kindBadge } from "./dom.js";
import { fixed, formatPercent } from "./format.js";
import { LazyTable } from "./table.js";

// Past this many ranks a histogram alone hides which ranks are slow: the
// panel adds a strip with one cell per rank.
const STRIP_FROM = 16;

/** The window's query for the /allranks routes. */
export function spreadParams(state) {
  return { run: state.ref.run, window: state.ref.window, metric: state.metric };
}

function imbalanceText(value) {
  return `${fixed(100 * value, 1)}%`;
}

/** The cross-rank tree; opens along the largest mean. Rows are keyed by merged
 * node id. Rank files left out of it are passed to `onError`, one Error each. */
export async function spreadView(state, { onSelect, onSort, onError }) {
  let total = 0;
  const base = { ...spreadParams(state), sort: state.spreadSort };
  const { vocab, metric } = state;
  const value = (v) => (state.percent ? formatPercent(v, total) : vocab.format(v, metric));
  const table = new LazyTable({
    columns: [
      { title: "Name (all ranks)", width: "minmax(320px, 1fr)", sortKey: "name" },
      { title: "Mean", sortKey: "mean", cell: (r) => value(r.mean) },
      { title: "Max", sortKey: "max", cell: (r) => value(r.max) },
      // Only where the ranks differ: with every rank equal, the "max rank" is just the first.
      { title: "Max rank", className: "max-rank", cell: (r) => (r.max > r.min ? String(r.max_rank) : "\u2013") },
      { title: "Imbalance", sortKey: "imbalance", cell: (r) => imbalanceText(r.imbalance) },
    ],
    sort: state.spreadSort,
    onSort,
    onSelect,
    barOf: (r) => (total ? r.mean / total : 0),
    fetchChildren: (keys) => get("allranks/children", { ...base, node: keys.join(",") }),
    batch: state.nodesPerRequest,
  });
  const hot = await get("allranks", { ...base, threshold: state.threshold });
  for (const [file, why] of Object.entries(hot.errors || {})) onError(new Error(`${file}: ${why}`));
  total = hot.total;
  table.showHotPath(hot);
  return table;
}

/**
 * Fill `panel` with `node`'s distribution over the ranks: a histogram, a
 * strip of every rank past STRIP_FROM ranks, and a link that opens the rank
 * holding the max with the same call path selected (`onJump(rank, node)`).
 */
export async function showDistribution(panel, state, node, onJump, isStale = () => false) {
  clear(panel).append(el("h3", {}, "All ranks"), el("div", { className: "muted" }, "Loading\u2026"));
  const d = await get("allranks/node", { ...spreadParams(state), node });
  if (isStale()) return;
  const { vocab, metric } = state;
  const row = d.node;
  const fmt = (v) => vocab.format(v, metric);
  const stats = el("table", { className: "metrics" },
    ...[["mean", fmt(row.mean)], ["max", row.max > row.min ? `${fmt(row.max)} (rank ${row.max_rank})` : fmt(row.max)], ["min", fmt(row.min)],
      ["imbalance", imbalanceText(row.imbalance)], ["ranks with it", `${row.present} of ${d.ranks.length}`]]
      .map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v))));
  const jump = row.max > row.min
    ? el("a", { href: "#", className: "jump-max", onclick: (e) => { e.preventDefault(); onJump(row.max_rank, node); } },
      `Jump to the max rank (${row.max_rank})`)
    : "";
  clear(panel).append(
    el("h3", {}, "All ranks"),
    el("div", { className: "detail-title" }, kindBadge(row.kind, row.backward), " ", el("span", { className: "label" }, row.label)),
    el("div", { className: "muted" }, `${vocab.label(metric)}, inclusive, over ${d.ranks.length} ranks`),
    stats, jump,
    el("h4", {}, "Distribution over ranks"),
    histogram(d.bins, fmt),
    d.ranks.length > STRIP_FROM ? rankStrip(d.values, d.ranks, fmt) : "",
    el("h4", {}, "Call path"),
    el("ol", { className: "path" }, ...d.path.map((p) => el("li", {}, kindBadge(p.kind), " ", p.label))),
  );
}
