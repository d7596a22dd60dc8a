// The analyzer's findings: a view of their own (every finding, most severe
// first) and a strip above the tree with the three that save the most.
// Each finding with a node links to it: a click selects that node.

import { clear, el } from "./dom.js";
import { formatNumber } from "./format.js";

// How many findings the strip above the tree shows.
const STRIP_SIZE = 3;

/**
 * "saves ≈ 4.1 ms per step" for a finding's `gain_ns` (ns per step); for a
 * memory finding, whose saving is bytes (`gainBytes`), "saves ≈ 96.0 MiB at
 * the peak"; else "saves none estimated".
 */
export function gainText(gain, gainBytes) {
  if (gain === null || gain === undefined) {
    if (gainBytes === null || gainBytes === undefined) return "saves none estimated";
    return `saves \u2248 ${formatNumber(gainBytes, "bytes")} at the peak`;
  }
  const amount = gain >= 1e6 ? `${(gain / 1e6).toFixed(1)} ms` : `${Math.round(gain / 1e3)} µs`;
  return `saves \u2248 ${amount} per step`;
}

const bytesOf = (f) => (Number.isInteger(f.evidence?.gain_bytes) ? f.evidence.gain_bytes : undefined);
const gainOf = (f) => (f.gain_ns === null || f.gain_ns === undefined ? -1 : f.gain_ns);
// Time saved first, then bytes saved, then no estimate (as the analyzer ranks them).
const byGain = (a, b) => gainOf(b) - gainOf(a) || (bytesOf(b) ?? -1) - (bytesOf(a) ?? -1);

/** The findings that save the most, biggest first (those without an estimate last). */
export function topByGain(findings, count = STRIP_SIZE) {
  return [...findings].sort(byGain).slice(0, count);
}

const severityClass = (f) => `sev-${String(f.severity).replace(/[^a-z]/gi, "")}`;

function nodeLink(f, onReveal) {
  return f.node > 0
    ? el("a", { href: "#", className: "node-link", onclick: (e) => { e.preventDefault(); onReveal(f.node); } }, `show ${f.label || `#${f.node}`}`)
    : "";
}

/** One finding in full: severity, rule, message, saving and why, advice, where. */
function findingCard(f, onReveal) {
  return el("div", { className: `finding ${severityClass(f)}`, dataset: { node: String(f.node) } },
    el("div", {}, el("span", { className: "sev" }, f.severity), " ", el("b", {}, f.rule)),
    el("div", {}, f.message),
    "gain_basis" in f
      ? el("div", { className: "gain" }, el("b", {}, gainText(f.gain_ns, bytesOf(f))), f.gain_basis ? `: ${f.gain_basis}` : "")
      : "",
    f.suggestion ? el("div", { className: "suggestion" }, f.suggestion) : "",
    f.path && f.path.length ? el("div", { className: "finding-path mono" }, f.path.join(" \u203a ")) : "",
    nodeLink(f, onReveal));
}

/** The Findings view: every finding of the window, most severe first (the
 * order of `vocab.severities`), the biggest saving first within a severity. */
export function findingsView(findings, vocab, onReveal) {
  const box = el("div", { className: "findings-view" }, el("h3", {}, `Findings (${findings.length})`));
  if (!findings.length) {
    box.appendChild(el("div", { className: "muted" }, "The analyzer left no findings in this window."));
    return box;
  }
  const sorted = [...findings].sort((a, b) =>
    vocab.severityRank(a.severity) - vocab.severityRank(b.severity) || byGain(a, b));
  box.append(...sorted.map((f) => findingCard(f, onReveal)));
  return box;
}

/** The strip above the tree: the top findings by gain, one line each; a
 * click on one selects its node. `onAll()` opens the Findings view. */
export function findingsStrip(findings, onReveal, onAll) {
  const strip = el("div", { className: "findings-strip", role: "list" });
  if (!findings.length) return strip;
  clear(strip).append(el("span", { className: "strip-title" }, "Top findings"));
  for (const f of topByGain(findings)) {
    const attrs = {
      className: `strip-item ${severityClass(f)}${f.node > 0 ? " linked" : ""}`, role: "listitem",
      dataset: { node: String(f.node) }, title: f.message,
    };
    if (f.node > 0) attrs.onclick = () => onReveal(f.node);
    strip.appendChild(el("div", attrs,
      el("span", { className: "strip-gain" }, gainText(f.gain_ns, bytesOf(f)).replace("saves ", "")),
      el("b", {}, f.rule), " ", el("span", { className: "strip-where" }, f.label || f.message)));
  }
  if (findings.length > STRIP_SIZE) {
    strip.appendChild(el("a", { href: "#", className: "strip-all", onclick: (e) => { e.preventDefault(); onAll(); } },
      `all ${findings.length} \u203a`));
  }
  return strip;
}
