// Axis ticks for the charts, chosen from the data's range: round steps (1,
// 2, 2.5, 5 times a power of ten) in one unit picked for the largest value,
// so an axis reads "0 s, 0.5 s, 1 s", never "0 ns" under "1.15 s". Pure
// functions (no DOM): the tests run them in Node.

const TIME = [["s", 1e9], ["ms", 1e6], ["\u00b5s", 1e3], ["ns", 1]];
const BYTES = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10], ["B", 1]];
const COUNT = [["G", 1e9], ["M", 1e6], ["k", 1e3], ["", 1]];
const STEPS = [1, 2, 2.5, 5, 10];

/** [suffix, scale] of the largest of `scales` at most `max` (the smallest for 0). */
function pick(scales, max) {
  return scales.find(([, scale]) => max >= scale) || scales[scales.length - 1];
}

/** The scales for `unit` and how a scaled number is written with its suffix. */
function scalesOf(unit) {
  const rate = unit.endsWith("/s") ? "/s" : "";
  const base = rate ? unit.slice(0, -2) : unit;
  if (base === "ns") return { scales: TIME, write: (n, s) => `${n} ${s}${rate}` };
  if (base === "s") return { scales: TIME.map(([s, k]) => [s, k / 1e9]), write: (n, s) => `${n} ${s}${rate}` };
  if (base === "bytes") return { scales: BYTES, write: (n, s) => `${n} ${s}${rate}` };
  if (base === "%") return { scales: [["", 1]], write: (n) => `${n}%${rate}` };
  return { scales: COUNT, write: (n, s) => `${n}${s}${rate}` };
}

/** The round step at least `raw`. */
function roundStep(raw) {
  const power = 10 ** Math.floor(Math.log10(raw));
  return STEPS.find((s) => s * power >= raw * (1 - 1e-9)) * power;
}

/**
 * Ticks from 0 to at least `max` in `unit` ("ns", "s", "bytes", "bytes/s",
 * "%", "1"), about `count` intervals: { top, ticks: [{ value, label }] }
 * with `top` the axis end (the last tick) and every label in one unit.
 */
export function niceTicks(max, unit = "1", count = 4) {
  const { scales, write } = scalesOf(unit);
  const top = Number(max) > 0 ? Number(max) : 1;
  const [suffix, scale] = pick(scales, top);
  const step = roundStep(top / scale / count);
  const decimals = (String(Number(step.toPrecision(12))).split(".")[1] || "").length; // those of the step
  const ticks = [];
  for (let i = 0; i * step < top / scale + step * 1e-9; i += 1) ticks.push(i * step);
  if (ticks[ticks.length - 1] * scale < top * (1 - 1e-9)) ticks.push(ticks.length * step);
  const text = (n) => String(Number(n.toFixed(decimals)));
  return {
    top: ticks[ticks.length - 1] * scale,
    ticks: ticks.map((n) => ({ value: n * scale, label: write(text(n), suffix) })),
  };
}
