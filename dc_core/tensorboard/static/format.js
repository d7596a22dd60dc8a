// Numbers for people, written as the CLI writes them (`format_value` in
// dc_core/cli/present.py): 1.23 ms, 4.5 MiB, 1.2k. Every number the tab shows
// goes through here, so the tab and `deepcontext report` print the same text
// for the same value. Pure functions of their arguments (no DOM): the tests
// run them in Node and in Chromium against the Python.

const TIME = [["s", 1e9], ["ms", 1e6], ["\u00b5s", 1e3]];
const BYTES = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
const COUNT = [["G", 1e9], ["M", 1e6], ["k", 1e3]];

/**
 * `x` with `digits` decimals as Python's f"{x:.{digits}f}" writes it: the
 * exact binary value rounded to nearest, a tie to the even digit. (toFixed
 * rounds a tie away from zero: 0.125 -> "0.13" where Python writes "0.12".)
 */
export function fixed(x, digits) {
  if (Object.is(x, -0)) return `-${(0).toFixed(digits)}`;
  const text = x.toFixed(digits);
  if (!Number.isFinite(x) || Math.abs(x) >= 1e21) return text;
  // 100 decimals hold every double that can be a tie at <= 2 decimals exactly.
  const exact = Math.abs(x).toFixed(100);
  const point = exact.indexOf(".");
  if (!/^50*$/.test(exact.slice(point + 1 + digits))) return text; // not halfway: toFixed is right
  const truncated = exact.slice(0, digits ? point + 1 + digits : point);
  if (Number(truncated[truncated.length - 1]) % 2 === 1) return text; // odd: away from zero is even
  return `${x < 0 ? "-" : ""}${truncated}`;
}

function scaled(v, steps, digits, space) {
  for (const [name, scale] of steps) {
    if (Math.abs(v) >= scale) return `${fixed(v / scale, digits)}${space}${name}`;
  }
  return null;
}

/**
 * `value` in `unit` (a metric's unit from the vocabulary, or a system
 * series' unit): "ns" as s/ms/µs/ns with 2 decimals, "bytes" as GiB/MiB/KiB/B
 * with 1, a rate ("bytes/s") as its unit's value per second, anything else
 * as a count with G/M/k and 1 ("%" keeps its sign).
 */
export function formatNumber(value, unit = "1") {
  const v = Number(value) || 0;
  if (unit.endsWith("/s")) return `${formatNumber(v, unit.slice(0, -2))}/s`;
  if (unit === "ns") return scaled(v, TIME, 2, " ") ?? `${fixed(v, 0)} ns`;
  if (unit === "bytes") return scaled(v, BYTES, 1, " ") ?? `${fixed(v, 0)} B`;
  const count = scaled(v, COUNT, 1, "") ?? fixed(v, 0);
  return unit === "%" ? `${count}%` : count;
}

/** `value` as a share of `total`, one decimal as the CLI's report column: "12.3%". */
export function formatPercent(value, total) {
  if (!total) return "\u2013";
  return `${fixed((100 * (Number(value) || 0)) / total, 1)}%`;
}

/** A change in `unit`, signed: "+1.20 ms", "-3". */
export function formatSigned(value, unit) {
  return `${value > 0 ? "+" : ""}${formatNumber(value, unit)}`;
}

/** A ratio against a reference: "1.15×"; "–" when there is none. */
export function formatRatio(ratio) {
  return ratio === null || ratio === undefined ? "\u2013" : `${fixed(ratio, 2)}\u00d7`;
}
