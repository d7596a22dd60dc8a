// The tab's place in the page's address, so a reload or a copied link opens
// the same run, rank, window, view and node. Inside TensorBoard the address
// is the outer page's hash, "#deepcontext&dc.run=a&dc.node=12": TensorBoard
// keeps its own parts there ("deepcontext", other keys), and ours sit beside
// them under one prefix. Pure functions of strings, tested in Node.

const PREFIX = "dc.";

/** What the tab keeps: run, rank ("all" for All ranks), window, view (a tab
 * id), node (the selected node), zoom (the flame graph's root), metric,
 * orient (icicle or flame). */
export const KEYS = ["run", "rank", "window", "view", "node", "zoom", "metric", "orient"];

function parts(hash) {
  return String(hash || "").replace(/^#/, "").split("&").filter(Boolean);
}

/** Our keys in `hash`, as strings; keys that are absent are left out. */
export function readState(hash) {
  const found = {};
  for (const part of parts(hash)) {
    const at = part.indexOf("=");
    if (at < 0) continue;
    const key = decodeURIComponent(part.slice(0, at));
    if (key.startsWith(PREFIX) && KEYS.includes(key.slice(PREFIX.length))) {
      found[key.slice(PREFIX.length)] = decodeURIComponent(part.slice(at + 1));
    }
  }
  return found;
}

/** `hash` with our keys set to `values` (null or undefined ones dropped),
 * every other part kept where it was. */
export function writeState(hash, values) {
  const kept = parts(hash).filter((p) => !decodeURIComponent(p.split("=")[0]).startsWith(PREFIX));
  const ours = KEYS.filter((k) => values[k] !== undefined && values[k] !== null && values[k] !== "")
    .map((k) => `${PREFIX}${k}=${encodeURIComponent(String(values[k]))}`);
  return `#${[...kept, ...ours].join("&")}`;
}

/** The window whose address holds the tab's state: TensorBoard's page
 * around the tab's frame when it can be reached, else the tab's own. */
export function addressWindow(win) {
  try {
    if (win.parent && win.parent !== win && win.parent.location.hash !== undefined) return win.parent;
  } catch { /* another origin: keep the state in the frame's own address */ }
  return win;
}

/** Replace the address's hash (no history entry, no hashchange event). */
export function saveState(win, values) {
  const hash = writeState(win.location.hash, values);
  if (hash !== win.location.hash) win.history.replaceState(win.history.state, "", hash);
}
