// Icicle flame graph: the server sends the heaviest part of a subtree in
// preorder; each frame is a positioned block whose text is set as text.
// Click zooms into a frame (a new request rooted there); hover shows details.

import { clear, el } from "./dom.js";
import { formatPercent } from "./format.js";

const ROW_HEIGHT = 18;
const MIN_LABEL_PX = 36;

/** Lay out preorder nodes {id, parent, incl}: x and width as fractions, depth. */
export function layout(nodes) {
  const placed = new Map();
  const cursor = new Map(); // parent id -> next free x
  let maxDepth = 0;
  const total = nodes.length ? nodes[0].incl || 1 : 1;
  for (const node of nodes) {
    if (node.parent < 0 || !placed.has(node.parent)) {
      placed.set(node.id, { node, x: 0, w: 1, depth: 0 });
      cursor.set(node.id, 0);
      continue;
    }
    const parent = placed.get(node.parent);
    const x = cursor.get(node.parent);
    const w = node.incl / total;
    cursor.set(node.parent, x + w);
    cursor.set(node.id, x);
    const depth = parent.depth + 1;
    maxDepth = Math.max(maxDepth, depth);
    placed.set(node.id, { node, x, w, depth });
  }
  return { placed: [...placed.values()], depth: maxDepth + 1 };
}

/**
 * Draw `data` (the /flame answer) into `container`.
 * options: { format(value) -> text, total, onZoom(nodeId), onSelect(nodeId) }
 */
export function drawFlame(container, data, { format, total, onZoom, onSelect }) {
  clear(container);
  const crumbs = el("div", { className: "crumbs" });
  for (const a of data.ancestors) {
    crumbs.append(el("a", { href: "#", onclick: (e) => { e.preventDefault(); onZoom(a.id); } }, a.label || "window"), " \u203a ");
  }
  const rootNode = data.nodes[0];
  crumbs.append(el("span", { className: "crumb-here" }, rootNode ? rootNode.label : "(nothing above the threshold)"));
  if (data.root !== 0) {
    crumbs.append(" ", el("button", { className: "small", onclick: () => onZoom(0) }, "Reset zoom"));
  }
  const tip = el("div", { className: "flame-tip", hidden: true });
  const { placed, depth } = layout(data.nodes);
  const canvas = el("div", { className: "flame", style: { height: `${depth * ROW_HEIGHT + 2}px` } });
  const width = () => canvas.clientWidth || 1000;
  for (const { node, x, w, depth: d } of placed) {
    const px = w * width();
    if (px < 0.5) continue;
    const block = el("div", {
      className: `frame kind-${node.kind}${node.backward ? " backward" : ""}`,
      dataset: { id: String(node.id) },
      style: { left: `${x * 100}%`, width: `${w * 100}%`, top: `${d * ROW_HEIGHT}px`, height: `${ROW_HEIGHT - 1}px` },
      onclick: () => { onSelect(node.id); onZoom(node.id); },
      onmousemove: (e) => showTip(tip, canvas, e, node, format, total),
      onmouseleave: () => { tip.hidden = true; },
    }, px >= MIN_LABEL_PX ? node.label : "");
    canvas.appendChild(block);
  }
  const note = data.truncated ? el("div", { className: "note" }, "Only the heaviest frames are drawn; zoom in for more.") : null;
  container.append(crumbs, el("div", { className: "flame-wrap" }, canvas, tip), note || "");
}

function showTip(tip, canvas, event, node, format, total) {
  clear(tip).append(
    el("div", { className: "tip-label" }, node.label),
    el("div", {}, `${node.kind}${node.backward ? " (backward)" : ""}`),
    el("div", {}, `inclusive ${format(node.incl)} \u00b7 ${formatPercent(node.incl, total)} of window`),
    el("div", {}, `self ${format(node.excl)}`),
  );
  const box = canvas.getBoundingClientRect();
  tip.style.left = `${Math.min(event.clientX - box.left + 12, box.width - 260)}px`;
  tip.style.top = `${event.clientY - box.top + 14}px`;
  tip.hidden = false;
}
