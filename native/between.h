// The time between two things recorded inside a scope: the Python code that
// ran from the end of one to the start of the next, billed to the line or
// module that ran it (the rule: _native.pyi, Collector.exit). Module calls
// timed meanwhile (ThreadScopes::calls) split it at module boundaries; spans
// a thread lent to another (ThreadScopes::lent: it waited for that thread's
// recorded work) are billed nowhere.
//
// Called by Python scopes (python_scopes.h) and operator capture
// (opcapture.h) with the store's mutex held; its scratch buffers are guarded
// by that mutex too.
#pragma once

#include <cstdint>
#include <vector>

#include "scopes.h"
#include "store.h"

namespace dc {

class Between {
 public:
  explicit Between(Store* store) : store_(*store) {}

  // Python time between two things recorded directly inside scope `s` of
  // `ts`'s thread: from the end of the last one (s.last_ns) to `start`, when
  // the next one, called from `context` (in `s`'s subtree when `inside`),
  // starts. Consumes the module calls and lent spans it covers.
  void bill_between(ThreadScopes* ts, Scope& s, int64_t context, bool inside, int64_t start);

 private:
  // Where the time from `s`'s last call to the next one (called from
  // `context`, in `s`'s subtree when `inside`) goes; -1: nowhere below `s`.
  int64_t stretch_node(const Scope& s, int64_t context, bool inside) const;
  // Bills `ns` to `node` as time below scope `s`.
  void bill(Scope& s, int64_t node, int64_t ns);
  // Bills the part of [from, to] not lent away to `node`.
  void bill_span(ThreadScopes* ts, Scope& s, int64_t node, int64_t from, int64_t to);
  // The module nodes on `node`'s path below `top`, innermost first.
  void modules_below(int64_t node, int64_t top, std::vector<int64_t>* out) const;
  // The part of [from, to] lent away by `ts`'s thread; spans that end by
  // `to` are used up.
  int64_t take_lent(ThreadScopes* ts, int64_t from, int64_t to);

  Store& store_;
  std::vector<int64_t> exits_, entries_, left_, entered_;  // reused by bill_between
};

}  // namespace dc
