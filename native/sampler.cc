#include "sampler.h"

#include <time.h>

#include <algorithm>
#include <chrono>

#include "tree.h"

namespace dc {

namespace {
// Bounded wait for a target thread's signal handler; a thread that cannot
// run it in time (stopped, or inside a long uninterruptible call) loses its
// native frames for that sample rather than stalling every other thread.
constexpr int64_t kUnwindTimeoutNs = 2000000;
}  // namespace

Sampler::Sampler(Store* store, ScopeRegistry* scopes)
    : store_(*store),
      scopes_(*scopes),
      symbolizer_(&store->frames),
      pcs_(kMaxNativeFrames),
      thread_(PeriodicThread::Schedule::kFixedRate, [this] { tick(); }) {}

void Sampler::start(double hz, bool native) {
  if (thread_.running()) return;
  // Installing the handler and warming backtrace() happen here, on a Python
  // thread, never inside the sampler's tick.
  native_ = native && unwind_install();
  period_ns_ = std::max<int64_t>(1, static_cast<int64_t>(1e9 / (hz > 0 ? hz : 100.0)));
  ++epoch_;  // CPU time run while no sampler ran is billed to nobody
  thread_.start(std::chrono::nanoseconds(period_ns_));
}

void Sampler::tick() {
  // CPU-time sampling: each thread earns one sample per period of CPU time it
  // ran (its kernel CPU clock, read from here at ~150 ns), placed where it is
  // at the tick; a thread whose clock did not move is idle and gets nothing.
  // No GIL and no Python state: the registry hands out what was recorded at
  // bind time, and the node each thread published.
  pending_.clear();
  const uint64_t epoch = epoch_;
  const int64_t period = period_ns_;
  scopes_.for_each_bound([&](ThreadScopes& t) {
    timespec ts;
    if (clock_gettime(t.cpu_clock, &ts) != 0) {
      t.tid = 0;  // the thread ended; its clock id will not be read again
      return;
    }
    const int64_t cpu = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    SampledCpu& s = t.sampled;
    if (s.epoch != epoch || s.binding != t.binding) {
      s = SampledCpu{epoch, t.binding, cpu, 0};  // first sight: a baseline
      return;
    }
    const int64_t ran = cpu - s.cpu_ns;
    s.cpu_ns = cpu;
    // Idle (blocked, waiting): no sample this tick. A remainder under one
    // period waits for a tick it runs in, so short bursts add up.
    if (ran <= 0) return;
    const int64_t node = t.innermost.load(std::memory_order_relaxed);
    if (node < 0) {
      s.credit_ns = 0;  // nothing open: CPU time outside every scope is billed to nobody
      return;
    }
    s.credit_ns += ran;
    const int64_t n = s.credit_ns / period;
    if (n == 0) return;
    s.credit_ns -= n * period;
    pending_.push_back(Pending{node, n, t.tid});
  });
  if (pending_.empty()) return;
  Tree& tree = store_.tree;
  if (!native_) {
    auto lock = store_.lock();
    for (const Pending& p : pending_)
      if (tree.valid_node(p.node)) tree.add(p.node, METRIC_SAMPLES, p.samples);
    return;
  }
  for (const Pending& p : pending_) {
    // Unwound and looked up without the store's mutex: the target's handler
    // may take up to the timeout and dladdr a millisecond, and operator
    // capture on every thread waits on that lock.
    const int n = unwind_thread(p.tid, pcs_.data(), kMaxNativeFrames, kUnwindTimeoutNs);
    if (n >= 0) symbolizer_.below_interpreter(pcs_.data(), n, &native_syms_);
    auto lock = store_.lock();
    if (!tree.valid_node(p.node)) continue;
    int64_t node = p.node;
    if (n < 0) {
      ++dropped_;  // the sample is still kept, at the thread's node
    } else {
      native_path_.clear();
      symbolizer_.intern(native_syms_, &native_path_);
      for (int64_t f : native_path_) node = tree.child(node, f);
    }
    tree.add(node, METRIC_SAMPLES, p.samples);
  }
}

}  // namespace dc
