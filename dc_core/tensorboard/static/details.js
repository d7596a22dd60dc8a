// Side panels: the selected node in depth (path, metrics, forward vs
// backward, source) and the analyzer's findings, each linking to its node.

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

/** "saves ≈ 4.1 ms per step" for a finding's `gain_ns` (ns per step), or "saves none estimated". */
export function gainText(gain) {
  if (gain === null || gain === undefined) return "saves none estimated";
  const amount = gain >= 1e6 ? `${(gain / 1e6).toFixed(1)} ms` : `${Math.round(gain / 1e3)} µs`;
  return `saves \u2248 ${amount} per step`;
}

/** Fill `panel` with the window's findings, most severe first (the order of
 * `vocab.severities`), the biggest saving first within a severity; each
 * says what its fix saves and why; those with a node link to it. */
export function showFindings(panel, findings, vocab, onReveal) {
  clear(panel).append(el("h3", {}, `Findings (${findings.length})`));
  if (!findings.length) {
    panel.appendChild(el("div", { className: "muted" }, "The analyzer left no findings in this window."));
    return;
  }
  const gain = (f) => (f.gain_ns === null || f.gain_ns === undefined ? -1 : f.gain_ns);
  const sorted = [...findings].sort((a, b) =>
    vocab.severityRank(a.severity) - vocab.severityRank(b.severity) || gain(b) - gain(a));
  for (const f of sorted) {
    const link = f.node > 0
      ? el("a", { href: "#", className: "node-link", onclick: (e) => { e.preventDefault(); onReveal(f.node); } }, `show ${f.label || `#${f.node}`}`)
      : "";
    panel.appendChild(el("div", { className: `finding sev-${String(f.severity).replace(/[^a-z]/gi, "")}` },
      el("div", {}, el("span", { className: "sev" }, f.severity), " ", el("b", {}, f.rule)),
      el("div", {}, f.message),
      "gain_basis" in f
        ? el("div", { className: "gain" }, el("b", {}, gainText(f.gain_ns)), f.gain_basis ? `: ${f.gain_basis}` : "")
        : "",
      f.suggestion ? el("div", { className: "suggestion" }, f.suggestion) : "",
      link));
  }
}
