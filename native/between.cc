// The time between two things recorded inside a scope; see between.h.
#include "between.h"

#include <algorithm>

#include "tree.h"

namespace dc {

void Between::bill(Scope& s, int64_t node, int64_t ns) {
  if (node < 0 || ns <= 0) return;
  store_.tree.add(node, METRIC_CPU_TIME, ns);
  s.child_ns += ns;
}

void Between::bill_span(ThreadScopes* ts, Scope& s, int64_t node, int64_t from, int64_t to) {
  if (to <= from) return;
  const int64_t lent = take_lent(ts, from, to);  // waited for another thread's recorded work
  s.child_ns += lent;
  bill(s, node, to - from - lent);
}

void Between::modules_below(int64_t node, int64_t top, std::vector<int64_t>* out) const {
  out->clear();
  for (; node > 0 && node != top; node = store_.tree.parent(node))
    if (store_.frames.at(store_.tree.frames()[static_cast<size_t>(node)]).kind == KIND_MODULE)
      out->push_back(node);
}

void Between::bill_between(ThreadScopes* ts, Scope& s, int64_t context, bool inside,
                           int64_t start) {
  const int64_t from = s.last_ns;
  if (ts->calls.empty() && !ts->calls_lost) {  // the usual case: no module call timed in between
    if (start > from) bill_span(ts, s, stretch_node(s, context, inside), from, start);
    return;
  }
  // Module calls left and entered meanwhile (where module hooks time them)
  // split the stretch: a module's own code before its first call and after
  // its last is the module's, as its range around the call says. A module
  // entered and left in between is part of where it ran.
  exits_.clear();
  entries_.clear();
  if (!ts->calls_lost) {
    for (const ThreadScopes::Call& c : ts->calls) {
      if (c.ns <= from || c.ns > start) continue;
      if (c.enter)
        entries_.push_back(c.ns);
      else if (!entries_.empty())
        entries_.pop_back();
      else
        exits_.push_back(c.ns);
    }
  }
  ts->calls.clear();
  ts->calls_lost = false;
  if (start <= from) return;
  const int64_t at = stretch_node(s, context, inside);
  if (exits_.empty() && entries_.empty()) {
    bill_span(ts, s, at, from, start);
    return;
  }
  const bool after = s.last_inside && store_.tree.valid_node(s.last_context);
  const bool before = inside && store_.tree.valid_node(context);
  int64_t top = after && before ? store_.tree.common(s.last_context, context) : s.node;
  if (store_.tree.depth(top) < store_.tree.depth(s.node)) top = s.node;
  if (after)
    modules_below(s.last_context, top, &left_);
  else
    left_.clear();
  if (before)
    modules_below(context, top, &entered_);
  else
    entered_.clear();
  if (exits_.size() > left_.size() || entries_.size() > entered_.size()) {
    bill_span(ts, s, at, from, start);  // calls the path does not show: no split
    return;
  }
  int64_t t = from;
  for (size_t i = 0; i < exits_.size(); ++i) {  // innermost module first
    bill_span(ts, s, left_[i], t, exits_[i]);
    t = exits_[i];
  }
  const size_t k = entries_.size();  // the innermost k of the call's modules, outermost first
  bill_span(ts, s, at, t, k > 0 ? entries_[0] : start);
  for (size_t j = 0; j < k; ++j)
    bill_span(ts, s, entered_[k - 1 - j], entries_[j], j + 1 < k ? entries_[j + 1] : start);
}

int64_t Between::stretch_node(const Scope& s, int64_t context, bool inside) const {
  // Neither end knows where the thread was in between: the time goes to the
  // deepest node both calls hang from (the line or module whose code ran
  // from one to the other). Where they share nothing below the scope (calls
  // from two lines of the outermost function, the scope's first or last
  // stretch), to the outermost frame of the call before (returning from it),
  // else of the call after (on the way to it): never to the scope alone.
  if (inside && s.last_inside && context == s.last_context && context != s.node &&
      store_.tree.valid_node(context))
    return context;  // two calls from the same place: the usual case
  const int64_t depth = store_.tree.depth(s.node);
  const bool after = s.last_inside && s.last_context != s.node &&
                     store_.tree.valid_node(s.last_context) &&
                     store_.tree.depth(s.last_context) > depth;
  const bool before =
      inside && store_.tree.valid_node(context) && store_.tree.depth(context) > depth;
  if (after && before) {
    const int64_t at = store_.tree.common(s.last_context, context);
    if (store_.tree.depth(at) > depth) return at;
  }
  if (after) return store_.tree.ancestor(s.last_context, depth + 1);
  if (before) return store_.tree.ancestor(context, depth + 1);
  return -1;
}

int64_t Between::take_lent(ThreadScopes* ts, int64_t from, int64_t to) {
  if (ts->lent.empty()) return 0;
  int64_t taken = 0;
  size_t kept = 0;
  for (const auto& span : ts->lent) {
    const int64_t a = std::max(span.first, from), b = std::min(span.second, to);
    if (b > a) taken += b - a;
    if (span.second > to) ts->lent[kept++] = span;
  }
  ts->lent.resize(kept);
  return taken;
}

}  // namespace dc
