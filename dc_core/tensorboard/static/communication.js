// The Communication view: per module that collectives serve (FSDP's
// parameter groups), most exposed first, a bar of what a step spends on it:
// compute, exposed communication and the sharding runtime, which add up to
// the module's time, and the columns `deepcontext report` prints (the same
// rows, from /communication). A module's name opens its node's details.

import { get, refParams } from "./api.js";
import { el } from "./dom.js";
import { formatNumber } from "./format.js";

/** "exposed comm" -> the legend's words for the bars' parts. */
const PART_TITLES = { compute_ns: "compute", exposed_ns: "exposed communication", runtime_ns: "sharding runtime" };

function unitOf(key) {
  return key.endsWith("_ns") ? "ns" : "bytes";
}

/** `row`'s parts as one bar, its length its time against `longest`. */
function partsBar(row, parts, longest) {
  const whole = parts.reduce((sum, p) => sum + row[p], 0);
  const bar = el("div", { className: "stack", style: { width: `${longest ? (100 * whole) / longest : 0}%` } });
  parts.forEach((p, i) => {
    if (!row[p]) return;
    bar.appendChild(el("div", {
      className: `seg-cat cat${i}`, style: { width: `${(100 * row[p]) / whole}%` },
      title: `${PART_TITLES[p]} ${formatNumber(row[p], "ns")} per step`, dataset: { part: p },
    }));
  });
  return el("div", { className: "comm-bar" }, bar);
}

/**
 * The Communication view of the selected window (its `state.ref`): resolves
 * to { element }. onSelect(node) on a module's click.
 */
export async function communicationView(state, { onSelect }) {
  const data = await get("communication", refParams(state.ref));
  if (!data.rows.length) {
    return { element: el("div", { className: "comm-view" }, el("div", { className: "empty comm-none" }, data.message)) };
  }
  const { parts, columns, rows } = data;
  const longest = Math.max(...rows.map((r) => parts.reduce((sum, p) => sum + r[p], 0)));
  const legend = el("div", { className: "legend comm-legend" },
    el("span", { className: "muted" }, "per step: "),
    ...parts.map((p, i) => el("span", { className: `key cat${i}`, dataset: { part: p } }, PART_TITLES[p])));
  const head = el("tr", {}, el("th", {}, "module"), el("th", {}, ""),
    ...columns.map(([, title]) => el("th", { className: "num" }, title)));
  const body = rows.map((row) => el("tr", { className: "comm-row", dataset: { node: row.node } },
    el("td", { className: "comm-module" },
      el("a", { href: "#", title: row.label, onclick: (e) => { e.preventDefault(); onSelect(row.node); } }, row.label)),
    el("td", { className: "comm-bar-cell" }, partsBar(row, parts, longest)),
    ...columns.map(([key]) => el("td", { className: "num", dataset: { column: key } }, formatNumber(row[key], unitOf(key))))));
  const table = el("table", { className: "comm-table" }, el("thead", {}, head), el("tbody", {}, ...body));
  const note = el("div", { className: "muted comm-note" },
    "compute, exposed communication and the sharding runtime add up to the module's time; "
    + "comm time is its collectives' launch to completion, which may overlap them");
  return { element: el("div", { className: "comm-view" }, legend, table, note) };
}
