// Native operator capture: the state behind capture_api.h.
//
// Operators are reported by a framework callback on whatever thread runs
// them, usually without the GIL. Each thread keeps its own open operators and
// a cache from "context path" to tree node, so the steady state of an
// operator is: read the thread's own interpreter frames (pyframes.h), hash
// them, one probe of the thread's cache, a timestamp; and at exit one locked
// add to the tree. A cache miss (a new line, module or operator) takes the
// GIL once to resolve names, lines and module paths.
//
// Backward functions find the forward operator that made their autograd node
// through SeqTable, keyed by (forward thread, sequence number), and land
// under the mirror of its context below the backward phase.
#pragma once

#include <Python.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "flatmap.h"
#include "pyframes.h"
#include "scopes.h"

namespace dc {

constexpr int kMaxWalk = 1024;   // deeper stacks are recorded without their path
constexpr int kMaxOpDepth = 256;  // deeper nesting is counted, not recorded
constexpr uint64_t kAnchorTag = uint64_t{1} << 62;  // a backward key that is a context, not a forward op
constexpr int64_t kEngineOp = -2;  // a cached path: the op is autograd's engine's (see context_node)

// The last mix of a path hash (splitmix64's).
inline uint64_t finish_hash(uint64_t h) {
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

// (forward thread, sequence number) -> forward operator node, direct-mapped
// and lock-free: a forward op writes its slot, a backward function on another
// thread reads it. Bounded: an entry is overwritten by the op 64k numbers
// later, long after its backward ran (or its graph was dropped).
class SeqTable {
 public:
  SeqTable() : slots_(new Slot[kSize]) {}
  void clear() {
    for (size_t i = 0; i < kSize; ++i) slots_[i].key.store(0, std::memory_order_relaxed);
  }
  void put(uint64_t thread, int64_t seq, int64_t node) {
    uint64_t k = key(thread, seq);
    Slot& s = slots_[k & (kSize - 1)];
    s.key.store(0, std::memory_order_relaxed);
    s.node.store(node, std::memory_order_relaxed);
    s.key.store(k, std::memory_order_release);
  }
  int64_t get(uint64_t thread, int64_t seq) const {
    uint64_t k = key(thread, seq);
    const Slot& s = slots_[k & (kSize - 1)];
    if (s.key.load(std::memory_order_acquire) != k) return -1;
    int64_t node = s.node.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    return s.key.load(std::memory_order_relaxed) == k ? node : -1;
  }

 private:
  static constexpr size_t kSize = size_t{1} << 16;
  struct Slot {
    std::atomic<uint64_t> key{0};
    std::atomic<int64_t> node{-1};
  };
  // Sequence numbers count per thread, so the low bits spread slots; the
  // thread goes in the high bits. Never 0 (the empty key).
  static uint64_t key(uint64_t thread, int64_t seq) {
    return (thread << 44) ^ (static_cast<uint64_t>(seq) & ((uint64_t{1} << 44) - 1)) ^
           (uint64_t{1} << 63);
  }
  std::unique_ptr<Slot[]> slots_;
};

// One thread's capture state. Only its own thread touches it.
struct OpThread {
  struct Open {
    int64_t node;       // -1: not recorded (nested in lightweight mode, or dropped)
    int64_t start_ns;
    int64_t child_ns;   // inclusive time of recorded operators inside
    int64_t py_depth;   // the thread's Python scope depth at entry
    bool region;        // DC_OP_REGION: ops inside are not its inner ops
    bool inside;        // its node is in the subtree of the scope it was entered in
    int64_t own_ns;     // the profiler's own time just before it: resolving a new call path
  };
  uint64_t owner = 0;  // capture generation this state belongs to
  PyThreadState* ts = nullptr;
  ThreadScopes* scopes = nullptr;
  int depth = 0;       // open operators, recorded or not (may exceed kMaxOpDepth)
  bool busy = false;   // resolving a miss: operators run by that work are ignored
  int suspended = 0;   // inside a region another hook records (a compiled graph)
  int64_t backward_root = -1;  // the collector's, as of this thread's last backward lookup
  int64_t resolved_ns = 0;  // what the last context lookup spent resolving a new path (0: a hit)
  Open open[kMaxOpDepth];
  PairMap paths;  // (path hash ^ op frame, parent node) -> node
  PairMap backs;  // (forward node, autograd node frame) -> backward node
  std::vector<int64_t> ids;  // scratch for a miss
  RawFrame walk[kMaxWalk];
};

}  // namespace dc
