// The flame graph: the server sends the heaviest part of a subtree in
// preorder; each frame is a positioned block whose label is set as text,
// cut to its width. A minimap above shows the whole window and where the
// zoom is; a click zooms, the keyboard moves the selection (flamelayout.js
// says where to), a search dims the frames it does not match.

import { clear, el } from "./dom.js";
import { fitLabel, frameAt, layout, locate, matching, neighbour } from "./flamelayout.js";
import { formatPercent } from "./format.js";

const ROW_HEIGHT = 18;
const LABEL_PAD = 8; // px of a frame's box its text cannot use: padding and borders
const MINIMAP_HEIGHT = 40;
const MINIMAP_ROW = 4;

/**
 * Draw `data` (a /flame answer) into `container`, which is in the page.
 * options: { format(value), total, whole (the /flame answer rooted at the
 * window, for the minimap), orientation ("icicle": root on top, "flame": at
 * the bottom), query, selected (a node id), canGoBack, focus, onZoom(id),
 * onBack(), onSelect(id), onOrientation(o) }.
 * Returns { setQuery(query) -> number of frames matched }.
 */
export function drawFlame(container, data, options) {
  const { format, total, orientation = "icicle", onZoom, onBack, onSelect } = options;
  const graph = layout(data.nodes);
  const frames = new Map(); // node id -> its block
  let selected = graph.byId.has(options.selected) ? options.selected : data.root;
  let matches = new Set();

  const tip = el("div", { className: "flame-tip", hidden: true });
  const canvas = el("div", { className: `flame ${orientation}` });
  const wrap = el("div", {
    className: "flame-wrap", tabindex: "0", role: "tree", "aria-label": "flame graph",
    onkeydown: (e) => onKey(e),
  }, canvas);
  const info = el("span", { className: "muted flame-info" });
  const minimap = drawMinimap(options.whole, data, orientation, onZoom);
  const note = data.truncated ? el("div", { className: "note" }, "Only the heaviest frames are drawn; zoom in for more.") : "";
  clear(container).append(toolbar(data, options, info), minimap.element, wrap, note);

  const measure = measurer(canvas);
  const place = () => {
    const width = canvas.clientWidth || 1000;
    canvas.style.height = `${Math.max(graph.depth * ROW_HEIGHT + 2, wrap.clientHeight - 2)}px`;
    clear(canvas).appendChild(tip);
    frames.clear();
    for (const { node, x, w, depth } of graph.placed) {
      const px = w * width;
      if (px < 0.5) continue;
      const block = el("div", {
        className: `frame kind-${node.kind}${node.backward ? " backward" : ""}`,
        dataset: { id: String(node.id), depth: String(depth) }, role: "treeitem",
        style: { left: `${x * width}px`, width: `${px}px`, height: `${ROW_HEIGHT - 1}px`,
          [orientation === "icicle" ? "top" : "bottom"]: `${depth * ROW_HEIGHT}px` },
        onclick: () => (node.id === data.root ? choose(node.id) : onZoom(node.id)),
        onmousemove: (e) => showTip(tip, canvas, e, node, format, total),
        onmouseleave: () => { tip.hidden = true; },
      }, fitLabel(node.label, px - LABEL_PAD, measure));
      frames.set(node.id, block);
      canvas.appendChild(block);
    }
    paint();
  };

  // The classes that say selected, matched, dimmed: set again after each layout.
  const paint = () => {
    for (const [id, block] of frames) {
      block.classList.toggle("selected", id === selected);
      block.classList.toggle("match", matches.has(id));
      block.classList.toggle("dim", matches.size > 0 && !matches.has(id));
    }
  };

  const choose = (id) => {
    selected = id;
    paint();
    const block = frames.get(id);
    if (block && block.scrollIntoView) block.scrollIntoView({ block: "nearest", inline: "nearest" });
    onSelect(id);
  };

  function onKey(event) {
    if (event.key.startsWith("Arrow")) {
      event.preventDefault(); // the keys move the selection, not the scroll bars
      const next = neighbour(graph, selected, event.key, orientation);
      if (next !== selected) choose(next);
    } else if (event.key === "Enter") {
      event.preventDefault();
      if (selected !== data.root) onZoom(selected);
    } else if (event.key === "Escape" || event.key === "Backspace") {
      event.preventDefault();
      onBack();
    }
  }

  const setQuery = (query) => {
    matches = matching(data.nodes, query);
    paint();
    minimap.paint(matching(options.whole.nodes, query));
    const needle = (query || "").trim();
    info.textContent = needle ? `${matches.size} of ${data.nodes.length} frames match \u201c${needle}\u201d` : "";
    return matches.size;
  };

  place();
  if (orientation === "flame") wrap.scrollTop = wrap.scrollHeight; // the root is at the bottom
  setQuery(options.query);
  if (options.focus) wrap.focus({ preventScroll: true });
  // A new width cuts the labels anew; the observer also fires once at the start.
  let width = canvas.clientWidth;
  const observer = new ResizeObserver(() => {
    if (!canvas.isConnected) { observer.disconnect(); return; }
    if (canvas.clientWidth !== width) { width = canvas.clientWidth; place(); minimap.draw(); }
  });
  observer.observe(canvas);
  return { setQuery };
}

function toolbar(data, options, info) {
  const { onZoom, onBack, onOrientation, orientation = "icicle" } = options;
  const crumbs = el("div", { className: "crumbs" });
  // The path from the window's root: the server's ancestors start below it.
  const top = options.whole && options.whole.nodes[0];
  const path = data.root !== 0 && !data.ancestors.some((a) => a.id === 0)
    ? [{ id: 0, label: top ? top.label : "window" }, ...data.ancestors] : data.ancestors;
  for (const a of path) {
    crumbs.append(el("a", { href: "#", onclick: (e) => { e.preventDefault(); onZoom(a.id); } }, a.label || "window"), " \u203a ");
  }
  const rootNode = data.nodes[0];
  crumbs.append(el("span", { className: "crumb-here" }, rootNode ? rootNode.label : "(nothing above the threshold)"));
  const toggle = el("div", { className: "segmented", role: "group", "aria-label": "Orientation" },
    ...[["icicle", "Icicle \u2193", "root on top, callees below"], ["flame", "Flame \u2191", "root at the bottom, callees above"]]
      .map(([value, text, title]) => el("button", {
        className: `seg${orientation === value ? " on" : ""}`, dataset: { orientation: value }, title,
        "aria-pressed": String(orientation === value), onclick: () => { if (value !== orientation) onOrientation(value); },
      }, text)));
  const back = el("button", { className: "small back", disabled: !options.canGoBack, title: "Zoom back (Esc, Backspace)", onclick: onBack }, "\u2190 Back");
  return el("div", { className: "flame-bar" }, back, crumbs, el("span", { className: "grow" }), info, toggle);
}

/** A text-width function in the frames' own font (one canvas, reused). */
function measurer(canvas) {
  const probe = el("div", { className: "frame" });
  canvas.appendChild(probe);
  const font = getComputedStyle(probe).font;
  probe.remove();
  const context = document.createElement("canvas").getContext("2d");
  context.font = font;
  const widths = new Map();
  return (text) => {
    if (!widths.has(text)) widths.set(text, context.measureText(text).width);
    return widths.get(text);
  };
}

/**
 * The whole window in a strip: a row of pixels per depth, colours by kind,
 * and a window over the part the main graph shows. A click zooms to the
 * frame under it. `paint(matches)` fades the frames a search does not match.
 */
function drawMinimap(whole, data, orientation, onZoom) {
  const graph = layout(whole.nodes);
  const canvas = el("canvas", { className: "minimap-canvas", height: String(MINIMAP_HEIGHT) });
  const spot = locate(graph, data.root, data.ancestors);
  const view = el("div", { className: "minimap-window", style: spot ? { left: `${spot.x * 100}%`, width: `${spot.w * 100}%` } : {} });
  const rowHeight = Math.max(1, Math.min(MINIMAP_ROW, MINIMAP_HEIGHT / Math.max(graph.depth, 1)));
  const element = el("div", {
    className: "minimap", title: "The whole window; the box is what the graph shows. Click to zoom there.",
    onclick: (e) => {
      const box = canvas.getBoundingClientRect();
      const y = orientation === "icicle" ? e.clientY - box.top : box.bottom - e.clientY;
      const hit = frameAt(graph, (e.clientX - box.left) / box.width, Math.floor(y / rowHeight));
      if (hit) onZoom(hit.node.id);
    },
  }, canvas, view);
  let faded = new Set();
  const draw = () => {
    const width = canvas.clientWidth || 600;
    canvas.width = width;
    const ctx = canvas.getContext("2d");
    const styles = getComputedStyle(element);
    ctx.clearRect(0, 0, width, MINIMAP_HEIGHT);
    for (const { node, x, w, depth } of graph.placed) {
      ctx.globalAlpha = faded.size && !faded.has(node.id) ? 0.25 : 1;
      ctx.fillStyle = styles.getPropertyValue(`--kind-${node.kind}`).trim() || "#ffcc80";
      const y = orientation === "icicle" ? depth * rowHeight : MINIMAP_HEIGHT - (depth + 1) * rowHeight;
      ctx.fillRect(x * width, y, Math.max(w * width - 0.5, 0.5), rowHeight - (rowHeight > 2 ? 0.5 : 0));
    }
  };
  const paint = (matches) => { faded = matches; draw(); };
  return { element, draw, paint };
}

function showTip(tip, canvas, event, node, format, total) {
  clear(tip).append(
    el("div", { className: "tip-label" }, node.label),
    el("div", {}, `${node.kind}${node.backward ? " (backward)" : ""}`),
    el("div", {}, `inclusive ${format(node.incl)} \u00b7 ${formatPercent(node.incl, total)} of window`),
    el("div", {}, `self ${format(node.excl)}`),
  );
  const box = canvas.getBoundingClientRect();
  tip.style.left = `${Math.max(0, Math.min(event.clientX - box.left + 12, box.width - 260))}px`;
  tip.style.top = `${event.clientY - box.top + 14}px`;
  tip.hidden = false;
}
