// The /runs listing: runs, their ranks and each rank's windows, and the
// choices the selectors offer from it. Window ids are the API's half-open
// "5-8"; people read the server's label beside each ("steps 5\u20137").

export class Listing {
  constructor(runs) {
    this.runs = runs; // [{ run, ranks: [{ rank, host, windows, labels }] }]
  }

  names() {
    return this.runs.map((r) => r.run);
  }

  ranks(run) {
    return (this.runs.find((r) => r.run === run) || { ranks: [] }).ranks;
  }

  /** [rank, label] pairs for a Rank selector: "0 (node-a)", the rank and its host. */
  rankOptions(run) {
    return this.ranks(run).map((r) => [r.rank, `${r.rank} (${r.host})`]);
  }

  windows(run, rank) {
    return (this.ranks(run).find((r) => r.rank === Number(rank)) || { windows: [] }).windows;
  }

  /** [window id, label] pairs for a selector. */
  windowOptions(run, rank) {
    const entry = this.ranks(run).find((r) => r.rank === Number(rank));
    return this.windows(run, rank).map((w) => [w, (entry && entry.labels && entry.labels[w]) || w]);
  }

  /** A ref to `run`, keeping `rank` and `window` where that run has them. */
  pick(run, rank, window) {
    const ranks = this.ranks(run);
    const r = ranks.some((x) => x.rank === Number(rank)) ? Number(rank) : (ranks[0] || { rank: 0 }).rank;
    const windows = this.windows(run, r);
    return { run, rank: r, window: windows.includes(window) ? window : windows[0] };
  }

  /** Something to compare `ref` with: another window of its rank, else the
   * same window of another rank, else another run, else itself. */
  other(ref) {
    const { run, rank, window } = ref;
    const others = this.windows(run, rank).filter((w) => w !== window);
    if (others.length) return { run, rank, window: others[0] };
    const rankB = this.ranks(run).find((r) => r.rank !== rank && r.windows.includes(window));
    if (rankB) return { run, rank: rankB.rank, window };
    const runB = this.runs.find((r) => r.run !== run);
    return runB ? this.pick(runB.run, rank, window) : { ...ref };
  }
}
