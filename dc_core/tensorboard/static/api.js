// Requests to the plugin's routes. Every answer is JSON; a non-2xx answer
// carries {error} and becomes a thrown Error with that message.

// The module is served from <plugin>/static/api.js; the routes live one level up.
const BASE = new URL("../", import.meta.url);

export const DATA_VERSION = 2;

/** GET `route` with `params` (undefined/null values left out); resolves to JSON. */
export async function get(route, params = {}) {
  const url = new URL(route, BASE);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  const response = await fetch(url, { credentials: "same-origin" });
  let body;
  try {
    body = await response.json();
  } catch {
    body = { error: `${response.status} ${response.statusText}` };
  }
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

/**
 * Tickets for one kind of request (the view, the details panel, ...): each
 * request takes the next ticket, and an answer whose ticket is no longer the
 * latest is dropped, so a slow answer to an earlier selection never
 * overwrites the current one.
 */
export class Latest {
  constructor() { this.ticket = 0; }

  next() { this.ticket += 1; return this.ticket; }

  current() { return this.ticket; }

  stale(ticket) { return ticket !== this.ticket; }
}

/** The query identifying the selected window: run, rank, window. */
export function refParams(ref, prefix = "") {
  return {
    [`${prefix}run`]: ref.run,
    [`${prefix}rank`]: ref.rank,
    [`${prefix}window`]: ref.window,
  };
}

/** Stylesheet shipped next to the modules, linked once. */
export function linkStylesheet(doc) {
  const href = new URL("./style.css", import.meta.url).href;
  if ([...doc.querySelectorAll("link[rel=stylesheet]")].some((l) => l.href === href)) return;
  const link = doc.createElement("link");
  link.rel = "stylesheet";
  link.href = href;
  doc.head.appendChild(link);
}
