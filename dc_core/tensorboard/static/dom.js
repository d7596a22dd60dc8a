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

/** A labelled <select> of [value, text] options; `onchange(value)` on a pick. */
export function select(options, value, onchange, label) {
  const node = el("select", { "aria-label": label, onchange: (e) => onchange(e.target.value) });
  for (const [v, text] of options) node.appendChild(el("option", { value: v, selected: String(v) === String(value) }, text));
  return el("label", { className: "field" }, `${label} `, node);
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
