// Small SVG charts (step times, system-monitor series) and the per-rank
// comparison table. Hand-written: the tab ships no chart library.

import { clear, el } from "./dom.js";
import { niceTicks } from "./axis.js";
import { formatNumber, formatPercent, formatRatio } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 520;
const H = 140;
const PAD = { left: 56, right: 8, top: 10, bottom: 22 };
const SMALL = { w: W, h: H };
const WIDE = { w: 860, h: 190 }; // the memory timeline: one chart across the pane

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** An empty chart with a y axis: `axis` is niceTicks()'s { top, ticks }, one grid line per tick;
 * `box` its size in the viewBox's units (the small charts' by default). */
function frame(title, axis, box = SMALL) {
  const root = svg("svg", { viewBox: `0 0 ${box.w} ${box.h}`, class: "chart", role: "img" });
  root.appendChild(svg("title", {}, title));
  const y0 = box.h - PAD.bottom;
  for (const { value, label } of axis.ticks) {
    const y = y0 - (value / axis.top) * (box.h - PAD.top - PAD.bottom);
    root.appendChild(svg("line", { x1: PAD.left, x2: box.w - PAD.right, y1: y, y2: y, class: value ? "grid" : "axis" }));
    root.appendChild(svg("text", { x: PAD.left - 4, y: y + 3, class: "tick y-tick", "text-anchor": "end" }, label));
  }
  return root;
}

/** Labels under a time axis from 0 to `tMax` seconds, in one unit. */
function timeAxis(root, tMax, box = SMALL, count = 5) {
  const axis = niceTicks(tMax, "s", count);
  for (const { value, label } of axis.ticks) {
    if (value > tMax * (1 + 1e-9)) break;
    const x = PAD.left + (value / tMax) * (box.w - PAD.left - PAD.right);
    // the first label starts at the axis and the one at its very end ends there: none is cut off
    const anchor = !value ? "start" : x > box.w - PAD.right - 12 ? "end" : "middle";
    root.appendChild(svg("text", { x, y: box.h - 6, class: "tick x-tick", "text-anchor": anchor }, label));
  }
}

/** Bars of step time per step of the window; a step over 1.5x the median is marked. */
export function stepChart(stepTimesNs, firstStep) {
  const box = el("div", { className: "chart-box" }, el("h4", {}, "Step time"));
  if (!stepTimesNs.length) {
    box.appendChild(el("div", { className: "muted" }, "No step times recorded."));
    return box;
  }
  const median = [...stepTimesNs].sort((a, b) => a - b)[Math.floor(stepTimesNs.length / 2)];
  const axis = niceTicks(Math.max(...stepTimesNs), "ns");
  const max = axis.top;
  const root = frame("step time per step", axis);
  const span = (W - PAD.left - PAD.right) / stepTimesNs.length;
  const height = H - PAD.top - PAD.bottom;
  stepTimesNs.forEach((t, i) => {
    const h = max ? (t / max) * height : 0;
    const rect = svg("rect", {
      x: PAD.left + i * span + 1, y: H - PAD.bottom - h, width: Math.max(1, span - 2), height: h,
      class: t > 1.5 * median ? "step outlier" : "step",
    });
    rect.appendChild(svg("title", {}, `step ${firstStep + i}: ${formatNumber(t, "ns")}`));
    root.appendChild(rect);
    if (stepTimesNs.length <= 20) {
      root.appendChild(svg("text", { x: PAD.left + (i + 0.5) * span, y: H - 6, class: "tick", "text-anchor": "middle" }, String(firstStep + i)));
    }
  });
  box.appendChild(root);
  return box;
}

// Lines of one chart take these classes in turn (colours in style.css).
const LINE_CLASSES = 8;

/**
 * The Steps & system charts in one grid: step times, then one line chart
 * per monitor series name, a line per device ("cpu 0", "gpu 1", "all" as
 * the server labels them); counters come as rates ("bytes/s").
 */
export function systemCharts(stepTimesNs, firstStep, series) {
  const box = el("div", { className: "charts" }, stepChart(stepTimesNs, firstStep));
  const byName = new Map();
  for (const s of series) {
    if (!byName.has(s.name)) byName.set(s.name, []);
    byName.get(s.name).push(s);
  }
  if (!byName.size) box.appendChild(el("div", { className: "chart-box muted" }, "No system-monitor samples in this window."));
  for (const [name, group] of byName) {
    const unit = group[0].unit;
    const axis = niceTicks(Math.max(unit === "%" ? 100 : 0, ...group.flatMap((s) => s.values)), unit);
    const tMax = Math.max(1e-9, ...group.flatMap((s) => s.t_s));
    const root = frame(name, axis);
    group.forEach((s, k) => {
      const points = s.t_s.map((t, i) => {
        const x = PAD.left + (t / tMax) * (W - PAD.left - PAD.right);
        const y = H - PAD.bottom - (s.values[i] / axis.top) * (H - PAD.top - PAD.bottom);
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      });
      const line = svg("polyline", { points: points.join(" "), class: `series s${k % LINE_CLASSES}` });
      line.appendChild(svg("title", {}, s.label));
      root.appendChild(line);
    });
    timeAxis(root, tMax);
    const legend = el("div", { className: "legend" }, ...group.map((s, k) =>
      el("span", { className: `key s${k % LINE_CLASSES}` }, s.label)));
    const title = group[0].rate ? `${name.replace(/_bytes$/, "")} rate (${unit})` : `${name} (${unit})`;
    box.appendChild(el("div", { className: "chart-box", dataset: { series: name } }, el("h4", {}, title), root, legend));
  }
  return box;
}

/** Ranks of one window side by side; outliers against the median highlighted. */
export function ranksTable(data, metric, vocab) {
  const box = el("div", { className: "ranks" });
  clear(box);
  const head = ["rank", "host", "steps", "mean step", "vs median", `${vocab.label(metric)} total`, "vs median",
    ...data.phases.map((p) => `${p}`)];
  const table = el("table", { className: "metrics wide" }, el("tr", {}, ...head.map((h) => el("th", {}, h))));
  for (const r of data.ranks) {
    const flag = (v) => (v && (v > 1.15 || v < 0.85) ? "off" : "");
    table.appendChild(el("tr", {},
      el("td", { title: r.stored_rank === undefined ? "" : `the file says rank ${r.stored_rank}` },
        r.stored_rank === undefined ? String(r.rank) : `${r.rank} (file: ${r.stored_rank})`), el("td", {}, r.host), el("td", {}, formatNumber(r.steps)),
      el("td", {}, formatNumber(r.step_mean_ns, "ns")),
      el("td", { className: flag(r.step_vs_median) }, formatRatio(r.step_vs_median)),
      el("td", {}, vocab.format(r.totals[metric] || 0, metric)),
      el("td", { className: flag(r.vs_median) }, formatRatio(r.vs_median)),
      ...data.phases.map((p) => el("td", {}, r.phases[p] ? `${vocab.format(r.phases[p][metric] || 0, metric)} (${formatPercent(r.phases[p][metric] || 0, r.totals[metric])})` : "\u2013"))));
  }
  box.appendChild(table);
  if (data.ranks.length < 2) box.appendChild(el("div", { className: "muted" }, "Only one rank wrote this window."));
  for (const [which, why] of Object.entries(data.errors || {})) box.appendChild(el("div", { className: "error" }, `${which}: ${why}`));
  return box;
}

/** Bars of a histogram: `bins` [{ lo, hi, count }] from /allranks/node; `format` writes a value. */
export function histogram(bins, format) {
  const box = el("div", { className: "chart-box histogram" });
  if (!bins.length) return box;
  const axis = niceTicks(Math.max(...bins.map((b) => b.count)), "1", 3);
  const most = axis.top;
  const root = frame("ranks per value range", axis);
  const span = (W - PAD.left - PAD.right) / bins.length;
  const height = H - PAD.top - PAD.bottom;
  bins.forEach((b, i) => {
    const h = most ? (b.count / most) * height : 0;
    const rect = svg("rect", { x: PAD.left + i * span + 1, y: H - PAD.bottom - h, width: Math.max(1, span - 2), height: h, class: "bin" });
    rect.appendChild(svg("title", {}, `${format(b.lo)} \u2013 ${format(b.hi)}: ${b.count} rank${b.count === 1 ? "" : "s"}`));
    root.appendChild(rect);
  });
  root.appendChild(svg("text", { x: PAD.left, y: H - 6, class: "tick" }, format(bins[0].lo)));
  root.appendChild(svg("text", { x: W - PAD.right, y: H - 6, class: "tick", "text-anchor": "end" }, format(bins[bins.length - 1].hi)));
  box.appendChild(root);
  return box;
}

/** One cell per rank, darker the larger its value (the largest is darkest). */
export function rankStrip(values, ranks, format) {
  const most = Math.max(1e-12, ...values);
  const cell = W / values.length;
  const root = svg("svg", { viewBox: `0 0 ${W} 24`, class: "chart strip", role: "img", preserveAspectRatio: "none" });
  root.appendChild(svg("title", {}, "value per rank"));
  values.forEach((v, i) => {
    const rect = svg("rect", { x: i * cell, y: 0, width: cell + 0.2, height: 24, class: "rank-cell", "fill-opacity": (0.08 + 0.92 * (v / most)).toFixed(3) });
    rect.appendChild(svg("title", {}, `rank ${ranks[i]}: ${format(v)}`));
    root.appendChild(rect);
  });
  return el("div", { className: "chart-box" }, el("div", { className: "muted" }, `ranks ${ranks[0]} \u2013 ${ranks[ranks.length - 1]}`), root);
}

/** Bars per window: `pick(row)` of each in `unit`, titled `text(row)`; labels under them when few. */
function windowBars(rows, title, pick, unit, text) {
  const axis = niceTicks(Math.max(0, ...rows.map(pick)), unit);
  const most = axis.top;
  const root = frame(title, axis);
  const span = (W - PAD.left - PAD.right) / Math.max(rows.length, 1);
  const height = H - PAD.top - PAD.bottom;
  rows.forEach((r, i) => {
    const h = most ? (pick(r) / most) * height : 0;
    const rect = svg("rect", { x: PAD.left + i * span + 1, y: H - PAD.bottom - h, width: Math.max(1, span - 2), height: h, class: "window-bar" });
    rect.appendChild(svg("title", {}, text(r)));
    root.appendChild(rect);
    if (rows.length <= 12) {
      root.appendChild(svg("text", { x: PAD.left + (i + 0.5) * span, y: H - 6, class: "tick", "text-anchor": "middle" }, r.label));
    }
  });
  return el("div", { className: "chart-box" }, el("h4", {}, title), root);
}

/** A node's value (in `unit`) per window and its share of each window: two bar charts and a table. */
export function windowsChart(data, format, unit) {
  const rows = data.windows;
  const text = (r) => `${r.label}: ${format(r.value)} (${formatPercent(r.value, r.total)} of the window)`;
  const table = el("table", { className: "metrics wide" },
    el("tr", {}, ...["window", "value", "window total", "share"].map((h) => el("th", {}, h))),
    ...rows.map((r) => el("tr", { dataset: { window: r.window } }, el("td", {}, r.label), el("td", {}, format(r.value)),
      el("td", {}, format(r.total)), el("td", {}, formatPercent(r.value, r.total)))));
  return el("div", { className: "windows" },
    el("div", { className: "charts" },
      windowBars(rows, "value per window", (r) => r.value, unit, text),
      windowBars(rows, "share of the window", (r) => 100 * (r.share || 0), "%", text)),
    table);
}

/**
 * A device's allocated bytes over the window (`data` is /memory's answer):
 * the timeline as steps (each point's bytes hold until the next point), the
 * bytes held from before the window as a dashed line, and the peak marked
 * with its bytes, step and phase. Times are from the window's start.
 */
export function memoryChart(data) {
  const { timeline, peak, held_at_peak_bytes: held, duration_ns: duration } = data;
  const box = el("div", { className: "chart-box memory-chart" }, el("h4", {}, `Allocated bytes on ${data.device} over the window`));
  const t = timeline.t_ns;
  if (!t.length) {
    box.appendChild(el("div", { className: "muted" }, "No timeline in this window."));
    return box;
  }
  const bucket = t.length > 1 ? t[t.length - 1] - t[t.length - 2] : 0;
  const tMax = Math.max(1, duration, t[t.length - 1] + bucket, peak.t_ns);
  const axis = niceTicks(Math.max(peak.bytes, ...timeline.bytes), "bytes");
  const root = frame(`allocated bytes on ${data.device}`, axis, WIDE);
  const x = (ns) => PAD.left + (ns / tMax) * (WIDE.w - PAD.left - PAD.right);
  const y = (bytes) => WIDE.h - PAD.bottom - (bytes / axis.top) * (WIDE.h - PAD.top - PAD.bottom);
  const points = [];
  t.forEach((ns, i) => {
    const end = i + 1 < t.length ? t[i + 1] : ns + bucket;
    points.push(`${x(ns).toFixed(1)},${y(timeline.bytes[i]).toFixed(1)}`, `${x(end).toFixed(1)},${y(timeline.bytes[i]).toFixed(1)}`);
  });
  const floor = y(0).toFixed(1);
  const first = points[0].split(",")[0];
  const last = points[points.length - 1].split(",")[0];
  root.appendChild(svg("polygon", { points: `${first},${floor} ${points.join(" ")} ${last},${floor}`, class: "timeline-area" }));
  root.appendChild(svg("polyline", { points: points.join(" "), class: "timeline-line" }));
  if (held > 0) {
    root.appendChild(svg("line", { x1: PAD.left, x2: WIDE.w - PAD.right, y1: y(held), y2: y(held), class: "timeline-held" }));
    root.appendChild(svg("text", { x: WIDE.w - PAD.right - 2, y: y(held) + 12, class: "tick timeline-held-label", "text-anchor": "end" },
      `held from before the window: ${formatNumber(held, "bytes")}`));
  }
  const px = x(peak.t_ns);
  const said = [`peak ${formatNumber(peak.bytes, "bytes")}`, peak.step >= 0 ? `step ${peak.step}` : "", peak.phase].filter(Boolean);
  const mark = svg("g", { class: "memory-peak" });
  mark.appendChild(svg("line", { x1: px, x2: px, y1: PAD.top, y2: WIDE.h - PAD.bottom, class: "peak-line" }));
  mark.appendChild(svg("circle", { cx: px, cy: y(peak.bytes), r: 3.5, class: "peak-dot" }));
  const right = px > (PAD.left + WIDE.w) / 2; // the label on the side with room
  mark.appendChild(svg("text", { x: px + (right ? -6 : 6), y: PAD.top + 10, class: "peak-label", "text-anchor": right ? "end" : "start" },
    `${said.join(" \u00b7 ")} at ${formatNumber(peak.t_ns, "ns")}`));
  root.appendChild(mark);
  timeAxis(root, tMax / 1e9, WIDE, 8);
  box.appendChild(root);
  return box;
}
