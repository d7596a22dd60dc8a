// The profile's vocabulary as /runs sends it (dc_core.model.kinds.vocabulary()):
// frame kinds, context kinds, metrics with unit and label, severities. The tab
// lists none of these itself; a name the server does not know is shown as is.

import { formatNumber } from "./format.js";

export class Vocabulary {
  constructor({ kinds = [], context_kinds: contextKinds = [], metrics = [], severities = [] } = {}) {
    this.kinds = kinds;
    this.contextKinds = contextKinds;
    this.severities = severities; // most severe first
    this.metrics = metrics.map((m) => m.name); // in the order views offer them
    this._metrics = new Map(metrics.map((m) => [m.name, m]));
  }

  /** Display name of `metric`, as /runs gives it. */
  label(metric) {
    const m = this._metrics.get(metric);
    return m ? m.label : metric;
  }

  /** Unit of `metric` (ns, bytes, 1 for a count). */
  unit(metric) {
    const m = this._metrics.get(metric);
    return m ? m.unit : "1";
  }

  /** `value` of `metric` for people, as the CLI writes it. */
  format(value, metric) {
    return formatNumber(value, this.unit(metric));
  }

  /** Sort position of a finding's severity (unknown ones last). */
  severityRank(severity) {
    const i = this.severities.indexOf(severity);
    return i < 0 ? this.severities.length : i;
  }
}
