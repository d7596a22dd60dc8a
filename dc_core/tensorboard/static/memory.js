// The Memory view: one device's bytes live at the window's memory peak. A
// header says what `deepcontext report` says of the peak (the server's line)
// with the bytes by category, a chart draws the window's allocated bytes with
// the peak marked, and a tree table holds the contexts by their live bytes,
// each row split by category. Categories and their order come from /memory
// (dc_core.model.kinds.MEMORY_CATEGORIES); colours follow that order.

import { get, refParams } from "./api.js";
import { memoryChart } from "./charts.js";
import { el, select } from "./dom.js";
import { formatNumber, formatPercent } from "./format.js";
import { LazyTable } from "./table.js";

const BYTES = "bytes";

/** "saved_for_backward" as a column title: "saved for backward". */
function title(category) {
  return category.replace(/_/g, " ");
}

/** A bar of `row`'s live bytes against `total`, in one segment per category. */
function stackedBar(row, categories, total) {
  const whole = total ? row.bytes / total : 0;
  const inner = el("div", { className: "stack", style: { width: `${Math.max(0, Math.min(1, whole)) * 100}%` } });
  categories.forEach((c, i) => {
    const bytes = row.split[c] || 0;
    if (!bytes || !row.bytes) return;
    inner.appendChild(el("div", {
      className: `seg-cat cat${i}`, style: { width: `${(100 * bytes) / row.bytes}%` },
      title: `${c} ${formatNumber(bytes, BYTES)}`, dataset: { category: c },
    }));
  });
  return el("div", { className: "bar-cell" }, inner);
}

/** The header: the report's line, the bytes by category, what the allocator said, a link to the peak. */
function header(data, { onDevice, onPeak }) {
  const { categories, by_category: byCategory, peak } = data;
  const total = Object.values(byCategory).reduce((a, b) => a + b, 0);
  const legend = el("div", { className: "legend memory-legend" });
  const strip = el("div", { className: "stack-strip" });
  categories.forEach((c, i) => {
    const bytes = byCategory[c] || 0;
    if (!bytes) return;
    strip.appendChild(el("div", { className: `seg-cat cat${i}`, style: { width: `${(100 * bytes) / total}%` }, title: `${c} ${formatNumber(bytes, BYTES)}` }));
    legend.appendChild(el("span", { className: `key cat${i}`, dataset: { category: c } },
      `${c} ${formatNumber(bytes, BYTES)} (${formatPercent(bytes, total)})`));
  });
  const facts = [
    `held from before the window ${formatNumber(data.held_at_peak_bytes, BYTES)}`,
    `the allocator's own peak ${formatNumber(data.allocator_peak_bytes, BYTES)}`,
    data.max_reserved_bytes ? `reserved at most ${formatNumber(data.max_reserved_bytes, BYTES)}` : "",
  ].filter(Boolean);
  const lost = [
    data.live_dropped ? `${formatNumber(data.live_dropped)} allocations not tracked (the live map was full)` : "",
    data.unknown_frees ? `${formatNumber(data.unknown_frees)} frees of allocations not tracked` : "",
  ].filter(Boolean);
  const devices = data.devices.length > 1
    ? select(data.devices.map((d) => [d, d]), data.device, onDevice, "Device") : null;
  const where = peak.node > 0
    ? el("a", { href: "#", className: "peak-link", onclick: (e) => { e.preventDefault(); onPeak(); } },
      `show where the peak was reached: ${peak.path.map((p) => p.label).join(" \u203a ")}`)
    : null;
  return el("div", { className: "memory-head" },
    el("div", { className: "memory-title" }, el("b", {}, `memory (${data.device}): `),
      el("span", { className: "memory-line" }, data.line), devices),
    strip, legend,
    el("div", { className: "muted memory-facts" }, facts.join(" \u00b7 ")),
    lost.length ? el("div", { className: "note memory-lost" }, lost.join("; ")) : null,
    data.missing ? el("div", { className: "note memory-missing" }, `memory: ${data.missing}`) : null,
    where);
}

/**
 * The Memory view of the selected window: resolves to { element, table }
 * (no table when the window has no memory). From `state` it reads `ref`,
 * `memoryDevice` (null: the main device), `memorySort`, `percent`,
 * `threshold` and `nodesPerRequest`. onSelect(row) on a row's click,
 * onDevice(name) on the device selector, onSort(key) on a header click.
 */
export async function memoryView(state, { onSelect, onDevice, onSort }) {
  const base = { ...refParams(state.ref), device: state.memoryDevice, sort: state.memorySort };
  const data = await get("memory", { ...base, threshold: state.threshold });
  if (!data.collected) {
    return { element: el("div", { className: "memory-view" }, el("div", { className: "empty memory-none" }, data.message)) };
  }
  const { categories, total } = data;
  const query = { ...base, device: data.device };
  // Only the categories the device holds at its peak get a column.
  const shown = categories.filter((c) => data.by_category[c] > 0);
  const value = (v) => (state.percent ? formatPercent(v, total) : formatNumber(v, BYTES));
  const table = new LazyTable({
    columns: [
      { title: "Name", width: "minmax(240px, 1fr)", sortKey: "name" },
      { title: "Live at peak", sortKey: "incl", cell: (r) => value(r.bytes) },
      { title: "Self", sortKey: "excl", width: "84px", cell: (r) => value(r.self) },
      ...shown.map((c) => ({
        title: title(c), sortKey: c, width: "78px", className: `cat-col cat-col-${categories.indexOf(c)}`,
        cell: (r) => (r.split[c] ? value(r.split[c]) : "\u2013"),
      })),
    ],
    sort: state.memorySort,
    onSort,
    onSelect,
    barCell: (r) => stackedBar(r, categories, total),
    rowClassOf: (r) => (r.id === data.peak.node ? "peak-row" : ""),
    fetchChildren: (keys) => get("memory/children", { ...query, node: keys.join(",") }),
    batch: state.nodesPerRequest,
    emptyText: "No context holds bytes at this device's peak.",
  });
  table.showHotPath(data);
  const onPeak = async () => {
    await table.expand(["0", ...data.peak.path.slice(0, -1).map((p) => String(p.id))]);
    table.select(String(data.peak.node), true);
  };
  const element = el("div", { className: "memory-view" }, header(data, { onDevice, onPeak }), memoryChart(data), table.element);
  return { element, table };
}
