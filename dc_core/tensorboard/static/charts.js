// Small SVG charts (step times, system-monitor series) and the per-rank
// comparison table. Hand-written: the tab ships no chart library.

import { clear, el } from "./dom.js";
import { formatNumber, formatPercent, formatRatio } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 520;
const H = 140;
const PAD = { left: 56, right: 8, top: 10, bottom: 22 };

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function frame(title, yMax, format) {
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img" });
  root.appendChild(svg("title", {}, title));
  const y0 = H - PAD.bottom;
  root.appendChild(svg("line", { x1: PAD.left, x2: W - PAD.right, y1: y0, y2: y0, class: "axis" }));
  root.appendChild(svg("text", { x: PAD.left - 4, y: PAD.top + 8, class: "tick", "text-anchor": "end" }, format(yMax)));
  root.appendChild(svg("text", { x: PAD.left - 4, y: y0, class: "tick", "text-anchor": "end" }, format(0)));
  return root;
}

/** Bars of step time per step of the window; a step over 1.5x the median is marked. */
export function stepChart(stepTimesNs, firstStep) {
  const box = el("div", { className: "chart-box" }, el("h4", {}, "Step time"));
  if (!stepTimesNs.length) {
    box.appendChild(el("div", { className: "muted" }, "No step times recorded."));
    return box;
  }
  const max = Math.max(...stepTimesNs);
  const median = [...stepTimesNs].sort((a, b) => a - b)[Math.floor(stepTimesNs.length / 2)];
  const root = frame("step time per step", max, (v) => formatNumber(v, "ns"));
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

/** One line chart per series name (devices as separate lines). */
export function seriesCharts(series) {
  const box = el("div", { className: "charts" });
  const byName = new Map();
  for (const s of series) {
    if (!byName.has(s.name)) byName.set(s.name, []);
    byName.get(s.name).push(s);
  }
  if (!byName.size) box.appendChild(el("div", { className: "muted" }, "No system-monitor samples in this window."));
  for (const [name, group] of byName) {
    const unit = group[0].unit;
    const fmt = (v) => formatNumber(v, unit);
    const yMax = Math.max(unit === "%" ? 100 : 1, ...group.flatMap((s) => s.values));
    const tMax = Math.max(1e-9, ...group.flatMap((s) => s.t_s));
    const root = frame(name, yMax, fmt);
    group.forEach((s, k) => {
      const points = s.t_s.map((t, i) => {
        const x = PAD.left + (t / tMax) * (W - PAD.left - PAD.right);
        const y = H - PAD.bottom - (s.values[i] / yMax) * (H - PAD.top - PAD.bottom);
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      });
      root.appendChild(svg("polyline", { points: points.join(" "), class: `series s${k % 4}` }));
    });
    root.appendChild(svg("text", { x: W - PAD.right, y: H - 6, class: "tick", "text-anchor": "end" }, formatNumber(tMax * 1e9, "ns")));
    const devices = group.map((s) => (s.device < 0 ? "all" : `device ${s.device}`)).join(", ");
    box.appendChild(el("div", { className: "chart-box" }, el("h4", {}, `${name} (${devices})`), root));
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
      el("td", {}, String(r.rank)), el("td", {}, r.host), el("td", {}, formatNumber(r.steps)),
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
  const most = Math.max(...bins.map((b) => b.count));
  const root = frame("ranks per value range", most, (v) => formatNumber(v));
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

/** Bars per window: `pick(row)` of each, titled `text(row)`; labels under them when few. */
function windowBars(rows, title, pick, format, text) {
  const most = Math.max(0, ...rows.map(pick));
  const root = frame(title, most, format);
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

/** A node's value per window and its share of each window: two bar charts and a table. */
export function windowsChart(data, format) {
  const rows = data.windows;
  const text = (r) => `${r.label}: ${format(r.value)} (${formatPercent(r.value, r.total)} of the window)`;
  const table = el("table", { className: "metrics wide" },
    el("tr", {}, ...["window", "value", "window total", "share"].map((h) => el("th", {}, h))),
    ...rows.map((r) => el("tr", { dataset: { window: r.window } }, el("td", {}, r.label), el("td", {}, format(r.value)),
      el("td", {}, format(r.total)), el("td", {}, formatPercent(r.value, r.total)))));
  return el("div", { className: "windows" },
    el("div", { className: "charts" },
      windowBars(rows, "value per window", (r) => r.value, format, text),
      windowBars(rows, "share of the window", (r) => r.share || 0, (v) => formatPercent(v, 1), text)),
    table);
}
