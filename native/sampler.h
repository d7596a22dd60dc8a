// The CPU sampler: a thread of its own that, every period, gives each bound
// thread one sample per period of CPU time it ran since the last tick, at
// the node it published (scopes.h); in comprehensive mode below that node
// the thread's native frames (unwind.h).
//
// The tick takes no GIL and reads no Python state: the scope registry hands
// out what each thread recorded at bind time. Its own buffers are its
// thread's; the tree and frames it adds to are the store's, under its mutex.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "periodic.h"
#include "scopes.h"
#include "store.h"
#include "unwind.h"

namespace dc {

class Sampler {
 public:
  Sampler(Store* store, ScopeRegistry* scopes);
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // `native`: unwind native frames too (comprehensive mode). Idempotent.
  void start(double hz, bool native);
  void stop() { thread_.stop(); }
  bool running() const { return thread_.running(); }
  // Samples kept without their native frames, and ticks missed.
  int64_t dropped() const { return dropped_ + thread_.missed(); }
  // Forgets the drops (store's mutex held, the thread stopped).
  void clear() {
    dropped_ = 0;
    thread_.clear_missed();
  }
  void after_fork_child() { thread_.after_fork_child(); }

 private:
  // One tick (sampler thread, no GIL).
  void tick();

  Store& store_;
  ScopeRegistry& scopes_;
  Symbolizer symbolizer_;
  // The sampler thread's own; start() sets the settings while it is stopped.
  bool native_ = false;
  int64_t period_ns_ = 10000000;
  uint64_t epoch_ = 0;   // bumped per start: CPU readings of a previous run are stale
  int64_t dropped_ = 0;  // store's mutex
  std::vector<void*> pcs_;
  struct Pending {
    int64_t node;
    int64_t samples;
    pid_t tid;
  };
  std::vector<Pending> pending_;               // this tick's, read under the registry's mutex
  std::vector<Symbolizer::Sym*> native_syms_;  // reused lookup buffer
  std::vector<int64_t> native_path_;           // reused path buffer (store's mutex)

  // Ticks tick(). Last: its thread uses everything above.
  PeriodicThread thread_;
};

}  // namespace dc
