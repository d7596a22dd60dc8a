// A lazily expanded tree table: rows arrive a level at a time from the
// server, are kept by key, and are drawn as one list of visible rows.

import { bar, clear, el, highlighted, kindBadge } from "./dom.js";

/**
 * columns: [{ title, sortKey?, cell(row) -> string|Node, className? }]
 * fetchChildren(keys) -> Promise<{ [key]: rows }>, each row with `kids`; at
 * most `batch` keys a call (the server's limit per request).
 * keyOf(row, parentKey) -> string; barOf(row) -> 0..1; barClassOf(row) -> the
 * bar's class (default "backward" for a backward row); barCell(row) -> the
 * last cell instead of that bar (a stacked one, say); rowClassOf(row) -> more
 * classes for a row's element; onSelect(row, key).
 * sort: the sortKey of the column the rows arrive ordered by (marked in the
 * header); onSort(sortKey) on a header click (what a bar shows is barOf's).
 */
export class LazyTable {
  constructor({ columns, fetchChildren, batch, keyOf, barOf, barClassOf, barCell, rowClassOf, onSelect, onSort, sort, emptyText }) {
    this.columns = columns;
    this.fetchChildren = fetchChildren;
    this.batch = batch || Infinity;
    this.keyOf = keyOf || ((row) => String(row.id));
    this.barOf = barOf || (() => 0);
    this.barClassOf = barClassOf || ((row) => (row.backward ? "backward" : ""));
    this.barCell = barCell || ((row) => bar(this.barOf(row), this.barClassOf(row)));
    this.rowClassOf = rowClassOf || (() => "");
    this.onSelect = onSelect || (() => {});
    this.onSort = onSort;
    this.sort = sort;
    this.emptyText = emptyText || "Nothing to show.";
    this.entries = new Map(); // key -> { row, depth, kids: keys[] | null, open, more }
    this.roots = [];
    this.query = "";
    this.matches = new Set();
    this.selected = null;
    this.element = el("div", { className: "table", role: "treegrid" });
    const widths = columns.map((c) => c.width || "96px").join(" ");
    this.element.style.setProperty("--cols", `${widths} 140px`);
  }

  /** Replace everything with these top-level rows. */
  setRoots(rows) {
    this.entries.clear();
    this.roots = rows.map((row) => this._add(row, null, 0));
    this.draw();
  }

  /** Show a hot-path answer (`root`, `children`, `more`, `chain`): the path opened, its end selected. */
  showHotPath(hot) {
    this.setRoots([hot.root]);
    this.addChildren(hot.children, hot.more);
    this.selected = String(hot.chain[hot.chain.length - 1]);
    this.draw();
  }

  _add(row, parentKey, depth) {
    const key = this.keyOf(row, parentKey);
    const old = this.entries.get(key);
    this.entries.set(key, { row, depth, kids: old ? old.kids : null, open: old ? old.open : false, more: 0 });
    return key;
  }

  /** Store fetched children (a { key: rows } map) and mark parents open,
   * parents in `order` (a parent must come before its children). */
  addChildren(map, more = {}, order = Object.keys(map)) {
    for (const parentKey of order) {
      const rows = map[parentKey];
      const parent = this.entries.get(parentKey);
      if (!rows || !parent) continue;
      parent.kids = rows.map((row) => this._add(row, parentKey, parent.depth + 1));
      parent.more = more[parentKey] || 0;
      parent.open = true;
    }
  }

  /**
   * Open the rows with these keys, parents before children (a node's path
   * from the root, say). Children not loaded yet are fetched in one round,
   * `batch` keys a request, also for keys not shown yet whose row arrives
   * with its parent's children: a search match ten levels below the loaded
   * rows opens at once, not a level per request.
   */
  async expand(keys) {
    const missing = keys.filter((k) => !this.entries.has(k) || this.entries.get(k).kids === null);
    const children = {};
    const more = {};
    for (let i = 0; i < missing.length; i += this.batch) {
      const result = await this.fetchChildren(missing.slice(i, i + this.batch));
      Object.assign(children, result.children || result);
      Object.assign(more, result.more || {});
    }
    this.addChildren(children, more, keys);
    for (const key of keys) {
      const entry = this.entries.get(key);
      if (entry) entry.open = true;
    }
    this.draw();
  }

  async toggle(key) {
    const entry = this.entries.get(key);
    if (!entry || !entry.row.kids) return;
    if (entry.open) {
      entry.open = false;
      this.draw();
    } else {
      await this.expand([key]);
    }
  }

  setQuery(query, matchKeys = []) {
    this.query = query;
    this.matches = new Set(matchKeys);
    this.draw();
  }

  select(key, scroll = false) {
    this.selected = key;
    this.draw();
    const entry = this.entries.get(key);
    if (entry) this.onSelect(entry.row, key);
    if (scroll) {
      const node = this.element.querySelector(".row.selected");
      if (node && node.scrollIntoView) node.scrollIntoView({ block: "center" });
    }
  }

  _header() {
    const cells = this.columns.map((column) => {
      const active = column.sortKey && column.sortKey === this.sort;
      const attrs = { className: `cell head ${column.className || ""} ${active ? "sorted" : ""}` };
      if (column.sortKey && this.onSort) attrs.onclick = () => this.onSort(column.sortKey);
      return el("div", attrs, column.title, active ? " \u25be" : "");
    });
    return el("div", { className: "row header" }, ...cells, el("div", { className: "cell head bar-head" }));
  }

  _rowElement(key, entry) {
    const { row, depth } = entry;
    const toggle = row.kids
      ? el("span", { className: "toggle", onclick: (e) => { e.stopPropagation(); this.toggle(key); } },
        entry.open ? "\u25be" : "\u25b8")
      : el("span", { className: "toggle leaf" }, "\u00b7");
    const name = el("div", { className: "cell name", style: { paddingLeft: `${4 + depth * 14}px` }, title: row.label },
      toggle, kindBadge(row.kind, row.backward), el("span", { className: "label" }, highlighted(row.label, this.query)));
    const cells = this.columns.slice(1).map((column) => el("div", { className: `cell num ${column.className || ""}` },
      column.cell(row)));
    const classes = ["row", `kind-row-${row.kind}`];
    if (key === this.selected) classes.push("selected");
    if (this.matches.has(key)) classes.push("match");
    const extra = this.rowClassOf(row);
    if (extra) classes.push(extra);
    return el("div", {
      className: classes.join(" "), dataset: { key }, role: "row",
      onclick: () => this.select(key), ondblclick: () => this.toggle(key),
    }, name, ...cells, this.barCell(row));
  }

  draw() {
    const body = el("div", { className: "rows" });
    const walk = (keys) => {
      for (const key of keys) {
        const entry = this.entries.get(key);
        if (!entry) continue;
        body.appendChild(this._rowElement(key, entry));
        if (entry.open && entry.kids) {
          walk(entry.kids);
          if (entry.more) {
            body.appendChild(el("div", { className: "row more", style: { paddingLeft: `${18 + (entry.depth + 1) * 14}px` } },
              `\u2026 ${entry.more} more rows not shown (smallest first left out)`));
          }
        }
      }
    };
    walk(this.roots);
    if (!this.roots.length) body.appendChild(el("div", { className: "empty" }, this.emptyText));
    const scroll = this.element.scrollTop;
    clear(this.element).append(this._header(), body);
    this.element.scrollTop = scroll;
  }
}
