// The flame graph's geometry and navigation, without the DOM: where each
// frame sits, what label fits in its width, which frame an arrow key moves
// to, which frames a search matches. Pure functions, so the tests run them
// in Node as well as in the page.

export const ELLIPSIS = "\u2026";
// A cut label keeps at least this many characters (half from each end):
// "ate\u2026:mm" still names the frame; "a\u2026m" or "aten\u2026" would not.
const MIN_KEPT = 6;

/**
 * Lay out preorder nodes {id, parent, incl}: x and width as fractions of the
 * first node (the zoom root), depth from it. Children sit left to right in
 * the order they come (the server sends them heaviest first: left-heavy).
 * Returns { placed: [{ node, x, w, depth }], byId: Map, kids: Map id -> ids, depth }.
 */
export function layout(nodes) {
  const byId = new Map();
  const kids = new Map();
  const cursor = new Map(); // parent id -> next free x
  let maxDepth = 0;
  const total = nodes.length ? nodes[0].incl || 1 : 1;
  for (const node of nodes) {
    kids.set(node.id, []);
    const parent = byId.get(node.parent);
    if (node.parent < 0 || !parent) {
      byId.set(node.id, { node, x: 0, w: 1, depth: 0 });
      cursor.set(node.id, 0);
      continue;
    }
    const x = cursor.get(node.parent);
    cursor.set(node.parent, x + node.incl / total);
    cursor.set(node.id, x);
    const depth = parent.depth + 1;
    maxDepth = Math.max(maxDepth, depth);
    byId.set(node.id, { node, x, w: node.incl / total, depth });
    kids.get(node.parent).push(node.id);
  }
  return { placed: [...byId.values()], byId, kids, depth: nodes.length ? maxDepth + 1 : 0 };
}

function cut(text, kept) {
  const head = Math.ceil(kept / 2);
  return `${text.slice(0, head)}${ELLIPSIS}${text.slice(text.length - (kept - head))}`;
}

/**
 * `text` as it fits in `width` px by `measure(text) -> px`: whole, or cut in
 * the middle ("aten::con\u2026backward": an operator's namespace and the end of
 * its name both stay), or "" when not even MIN_KEPT characters fit.
 */
export function fitLabel(text, width, measure) {
  if (measure(text) <= width) return text;
  if (text.length <= MIN_KEPT || measure(cut(text, MIN_KEPT)) > width) return "";
  let lo = MIN_KEPT; // fits
  let hi = text.length - 1; // the longest cut there is
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (measure(cut(text, mid)) <= width) lo = mid;
    else hi = mid - 1;
  }
  return cut(text, lo);
}

/** Frames at `depth`, left to right. */
function row(graph, depth) {
  return graph.placed.filter((p) => p.depth === depth).sort((a, b) => a.x - b.x);
}

/**
 * The frame an arrow key moves the selection to from frame `id`, or `id`
 * itself at an edge. Towards the leaves is down in an icicle (root on top)
 * and up in a flame graph (root at the bottom); left and right go to the
 * neighbour at the same depth (a sibling, or past the last one a cousin).
 */
export function neighbour(graph, id, key, orientation = "icicle") {
  const here = graph.byId.get(id);
  if (!here) return id;
  const deeper = orientation === "icicle" ? "ArrowDown" : "ArrowUp";
  const shallower = orientation === "icicle" ? "ArrowUp" : "ArrowDown";
  if (key === deeper) {
    const kids = graph.kids.get(id) || [];
    return kids.length ? kids[0] : id; // the heaviest child
  }
  if (key === shallower) return graph.byId.has(here.node.parent) ? here.node.parent : id;
  if (key === "ArrowLeft" || key === "ArrowRight") {
    const frames = row(graph, here.depth);
    const at = frames.indexOf(here) + (key === "ArrowLeft" ? -1 : 1);
    return at >= 0 && at < frames.length ? frames[at].node.id : id;
  }
  return id;
}

/** Ids of the frames whose label holds `query` (case-insensitive); empty for no query. */
export function matching(nodes, query) {
  const needle = (query || "").trim().toLowerCase();
  if (!needle) return new Set();
  return new Set(nodes.filter((n) => String(n.label).toLowerCase().includes(needle)).map((n) => n.id));
}

/**
 * Where zoom root `root` sits in the whole window's layout `whole`: its own
 * frame, or, when it was too small to be sent with the whole, its deepest
 * ancestor that was (`ancestors` from the root of the window down).
 */
export function locate(whole, root, ancestors) {
  if (whole.byId.has(root)) return whole.byId.get(root);
  for (let i = ancestors.length - 1; i >= 0; i -= 1) {
    if (whole.byId.has(ancestors[i].id)) return whole.byId.get(ancestors[i].id);
  }
  return whole.placed[0] || null;
}

/** The frame of `graph` under fraction `x` (0..1) at `depth`, or null. */
export function frameAt(graph, x, depth) {
  return graph.placed.find((p) => p.depth === depth && x >= p.x && x < p.x + p.w) || null;
}
