// The side panel: the selected node in depth (path, metrics, forward vs
// backward, source), each node on it linking to the tree.

import { get, refParams } from "./api.js";
import { clear, el, kindBadge } from "./dom.js";
import { formatPercent } from "./format.js";

/**
 * Fill `panel` with the details of `node`; `onReveal(nodeId)` opens it in the
 * tree. `isStale()` says a later selection superseded this one: its answer is
 * then dropped, so a slow earlier answer never replaces the current node.
 */
export async function showDetails(panel, state, node, onReveal, isStale = () => false) {
  clear(panel).append(el("h3", {}, "Details"), el("div", { className: "muted" }, "Loading\u2026"));
  const params = { ...refParams(state.ref), node, metric: state.metric };
  const [info, src] = await Promise.all([get("node", params), get("source", params)]);
  if (isStale()) return;
  const { vocab } = state;
  const row = info.node;
  const where = row.file ? `${row.file}${row.line ? `:${row.line}` : ""}` : "";
  const path = el("ol", { className: "path" });
  for (const step of info.path) {
    path.appendChild(el("li", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); onReveal(step.id); } },
      kindBadge(step.kind), " ", step.label)));
  }
  const metrics = el("table", { className: "metrics" },
    el("tr", {}, el("th", {}, "metric"), el("th", {}, "inclusive"), el("th", {}, "exclusive")));
  for (const m of vocab.metrics.filter((name) => name in row.incl)) {
    metrics.appendChild(el("tr", { dataset: { metric: m } }, el("td", {}, vocab.label(m)),
      el("td", {}, vocab.format(row.incl[m], m)), el("td", {}, vocab.format(row.excl[m], m))));
  }
  clear(panel).append(
    el("h3", {}, "Details"),
    el("div", { className: "detail-title" }, kindBadge(row.kind, row.backward), " ", el("span", { className: "label" }, row.label)),
    // a module's class; an operator's instruction or autograd node; a JAX transformation on a line
    row.detail ? el("div", { className: "muted" }, row.kind === "module" ? `class ${row.detail}` : row.detail) : "",
    where ? el("div", { className: "mono" }, where) : "",
    el("div", {}, `${formatPercent(row.incl[state.metric] || 0, info.total)} of the window's ${vocab.label(state.metric)}`),
    metrics,
    splitSection(info.split, state.metric, vocab, onReveal),
    el("h4", {}, "Call path"), path,
    sourceSection(src),
  );
}

function splitSection(split, metric, vocab, onReveal) {
  if (!split) return el("div", { className: "muted" }, "No model context above this node (forward/backward split n/a).");
  const rows = split.phases.map((p) => el("tr", {},
    el("td", {}, p.phase),
    el("td", {}, vocab.format(p.incl[metric] || 0, metric)),
    el("td", {}, ...p.nodes.slice(0, 4).map((id) => el("a", { href: "#", className: "node-link", onclick: (e) => { e.preventDefault(); onReveal(id); } }, `#${id}`)))));
  return el("div", { className: "split" },
    el("h4", {}, "Forward vs backward for this context"),
    el("div", { className: "muted" }, split.context),
    el("table", { className: "metrics" }, el("tr", {}, el("th", {}, "phase"), el("th", {}, vocab.label(metric)), el("th", {}, "nodes")), ...rows));
}

function sourceSection(src) {
  if (!src.available) return el("div", { className: "muted source-none" }, `Source not shown: ${src.reason}.`);
  const pre = el("pre", { className: "source" });
  src.lines.forEach((text, i) => {
    const number = src.first + i;
    pre.appendChild(el("div", { className: number === src.line ? "src-line hit" : "src-line" },
      el("span", { className: "ln" }, String(number).padStart(5, " ")), " ", text));
  });
  return el("div", {}, el("h4", {}, "Source"), pre);
}
