// DOM helpers. Every string from a profile goes into the page as a text node
// (textContent / createTextNode), never as markup: a module named
// "<img src=x onerror=...>" is shown literally and runs nothing.

/**
 * Create an element. `attrs`: className, title, dataset (object), style
 * (object), on<Event> handlers, and plain attributes (set with setAttribute,
 * never "style" or "on..." strings). Children: nodes or strings (as text).
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") Object.assign(node.style, value);
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key === "title") node.title = String(value);
    else if (!key.startsWith("on")) node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, ...children);
  return node;
}

export function append(parent, ...children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

/** `text` with each case-insensitive occurrence of `query` wrapped in <mark>. */
export function highlighted(text, query) {
  const fragment = document.createDocumentFragment();
  if (!query) {
    fragment.appendChild(document.createTextNode(text));
    return fragment;
  }
  const lower = text.toLowerCase();
  const needle = query.toLowerCase();
  let at = 0;
  for (let hit = lower.indexOf(needle); hit >= 0; hit = lower.indexOf(needle, at)) {
    if (hit > at) fragment.appendChild(document.createTextNode(text.slice(at, hit)));
    fragment.appendChild(el("mark", {}, text.slice(hit, hit + needle.length)));
    at = hit + needle.length;
  }
  if (at < text.length) fragment.appendChild(document.createTextNode(text.slice(at)));
  return fragment;
}

const UNITS = {
  cpu_time_ns: "ns", device_time_ns: "ns", alloc_bytes: "bytes",
  count: "1", samples: "1", flops: "1",
};

/** A metric value for people: 1.23 ms, 4.5 MiB, 12.3k. */
export function formatValue(value, metric) {
  const unit = UNITS[metric] || "1";
  const v = Number(value) || 0;
  const a = Math.abs(v);
  if (unit === "ns") {
    if (a >= 1e9) return `${(v / 1e9).toFixed(2)} s`;
    if (a >= 1e6) return `${(v / 1e6).toFixed(2)} ms`;
    if (a >= 1e3) return `${(v / 1e3).toFixed(1)} \u00b5s`;
    return `${v} ns`;
  }
  if (unit === "bytes") {
    const steps = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    let x = a;
    while (x >= 1024 && i < steps.length - 1) { x /= 1024; i += 1; }
    return `${v < 0 ? "-" : ""}${i ? x.toFixed(1) : x} ${steps[i]}`;
  }
  if (a >= 1e9) return `${(v / 1e9).toFixed(2)}G`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(2)}M`;
  if (a >= 1e4) return `${(v / 1e3).toFixed(1)}k`;
  return String(v);
}

export function formatPercent(value, total) {
  if (!total) return "\u2013";
  const p = (100 * value) / total;
  return `${p >= 10 || p <= -10 ? p.toFixed(1) : p.toFixed(2)}%`;
}

/** A small bar showing `fraction` (0..1) of its cell. */
export function bar(fraction, className = "") {
  const width = `${Math.max(0, Math.min(1, fraction || 0)) * 100}%`;
  return el("div", { className: "bar-cell" }, el("div", { className: `bar ${className}`, style: { width } }));
}

/** A kind badge (python, module, operator, ...). */
export function kindBadge(kind, backward = false) {
  return el("span", { className: `kind kind-${kind}` }, backward ? `${kind} \u2190` : kind);
}
