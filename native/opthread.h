// One thread's operator-capture state (see opcapture.h): the operators open
// on it and its caches from call path to tree node. Only its own thread
// touches it, so none of it is locked.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

#include "flatmap.h"
#include "pyframes.h"
#include "scopes.h"

namespace dc {

constexpr int kMaxWalk = 1024;    // deeper stacks are recorded without their path
constexpr int kMaxOpDepth = 256;  // deeper nesting is counted, not recorded
// A backward key that is a context, not a forward op.
constexpr uint64_t kAnchorTag = uint64_t{1} << 62;
// A cached path: the op is autograd's engine's (see context_node).
constexpr int64_t kEngineOp = -2;

// The last mix of a path hash (splitmix64's).
inline uint64_t finish_hash(uint64_t h) {
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

struct OpThread {
  struct Open {
    int64_t node;  // -1: not recorded (nested in lightweight mode, or dropped)
    int64_t start_ns;
    int64_t child_ns;  // inclusive time of recorded operators inside
    int64_t py_depth;  // the thread's Python scope depth at entry
    bool region;       // DC_OP_REGION: ops inside are not its inner ops
    bool inside;       // its node is in the subtree of the scope it was entered in
    int64_t own_ns;    // the profiler's own time just before it: resolving a new call path
  };
  uint64_t owner = 0;  // capture generation this state belongs to
  PyThreadState* ts = nullptr;
  ThreadScopes* scopes = nullptr;
  int depth = 0;               // open operators, recorded or not (may exceed kMaxOpDepth)
  bool busy = false;           // resolving a miss: operators run by that work are ignored
  int suspended = 0;           // inside a region another hook records (a compiled graph)
  int64_t backward_root = -1;  // the capture's, as of this thread's last backward lookup
  int64_t resolved_ns = 0;     // what the last context lookup spent resolving a new path (0: a hit)
  int64_t serving = -1;        // the node a backend's work on this thread is for (-1: none)
  int64_t serving_parent = -1;  // its context's mirror below the unscoped phase, once made
  Open open[kMaxOpDepth];
  PairMap paths;             // (path hash ^ op frame, parent node) -> node
  PairMap backs;             // (forward node, autograd node frame) -> backward node
  std::vector<int64_t> ids;  // scratch for a miss
  RawFrame walk[kMaxWalk];

  // Innermost recorded operator or region below open slot `d`, or -1: what
  // takes its inclusive time as child time.
  int innermost_recorded(int d) const {
    for (int i = (d < kMaxOpDepth ? d : kMaxOpDepth) - 1; i >= 0; --i)
      if (open[i].node >= 0) return i;
    return -1;
  }

  // Innermost recorded operator (not region) below slot `d`, or -1: what an
  // op entered now is an inner op of.
  int innermost_op(int d) const {
    for (int i = (d < kMaxOpDepth ? d : kMaxOpDepth) - 1; i >= 0; --i)
      if (open[i].node >= 0 && !open[i].region) return i;
    return -1;
  }

  // What the thread is in now, for the sampler and for Python scopes opened
  // inside an op: its innermost open operator below slot `d`, unless a
  // Python scope was opened inside that operator (then that scope).
  void publish(int d) {
    if (scopes == nullptr) return;
    const int i = innermost_op(d);
    if (i >= 0 && static_cast<int64_t>(scopes->stack.size()) <= open[i].py_depth)
      scopes->innermost.store(open[i].node, std::memory_order_relaxed);
    else
      scopes->publish();
  }

  // Every enter takes a slot, recorded or not, so that exits pair with
  // enters. Null when the slot is past kMaxOpDepth (counted in depth, not
  // recorded).
  Open* open_slot(bool region) {
    const int d = depth++;
    if (d >= kMaxOpDepth) return nullptr;
    Open& o = open[d];
    o.node = -1;
    o.region = region;
    return &o;
  }
};

}  // namespace dc
