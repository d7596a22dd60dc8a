// The collector: frames + tree + Python stacks + per-thread scopes, and the
// sampler and monitor threads that feed it.
//
// Thread safety: every public method is called with the GIL held (they are
// only reachable through the pybind11 bindings), and the sampler takes the
// GIL before touching the tree, so the GIL is the lock and the hot path takes
// none of its own. Free-threaded builds have no GIL: there a mutex stands in.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frames.h"
#include "monitor.h"
#include "pystack.h"
#include "sampler.h"
#include "scopes.h"
#include "tree.h"
#include "unwind.h"

#ifdef Py_GIL_DISABLED
#define DC_HOT_LOCK std::lock_guard<std::recursive_mutex> dc_hot_lock_(hot_mu_)
#else
#define DC_HOT_LOCK (void)0
#endif

namespace dc {

constexpr int64_t kInheritUserDepth = -2;

class Collector {
 public:
  Collector(int64_t max_nodes, int64_t max_samples);
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  // identity
  int64_t intern(int64_t kind, const std::string& name, const std::string& file, int64_t line,
                 const std::string& detail, int64_t flags);
  void skip_prefix(const std::string& prefix);
  int64_t metric(const std::string& name, const std::string& unit);  // -1: unit clash

  // tree (callers validate ids)
  int64_t child(int64_t parent, int64_t frame) {
    DC_HOT_LOCK;
    return tree_.child(parent, frame);
  }
  int64_t path(int64_t parent, const int64_t* frames, size_t n);
  int64_t mirror(int64_t node, int64_t top) {
    DC_HOT_LOCK;
    return tree_.mirror(node, top);
  }
  int64_t parent(int64_t node) {
    DC_HOT_LOCK;
    return tree_.parent(node);
  }
  void add(int64_t node, int64_t metric, int64_t value) {
    DC_HOT_LOCK;
    tree_.add(node, metric, value);
  }

  // Python call paths and scopes
  void python_frames(std::vector<int64_t>* out);
  // user_depth -1: measure it from the current stack; kInheritUserDepth: the
  // innermost open scope's (0 if none), without walking the stack.
  int64_t enter(const int64_t* frames, size_t n, int64_t parent, bool capture,
                int64_t user_depth);
  int64_t exit();
  int64_t top();
  int64_t depth();
  void unwind(int64_t depth);

  // background threads
  void start_sampler(double hz, bool native);
  void stop_sampler() { sampler_.stop(); }
  bool sampler_running() const { return sampler_.running(); }
  void start_monitor(int64_t interval_ms) { monitor_.start(interval_ms); }
  void stop_monitor() { monitor_.stop(); }
  Monitor& monitor() { return monitor_; }

  void reset();
  void after_fork_child();
  void stop_threads();

  // read access for snapshots
  const Tree& tree() const { return tree_; }
  const FrameTable& frames() const { return frames_; }
  const StringTable& strings() const { return strings_; }
  int64_t dropped_samples() const { return dropped_samples_ + sampler_.missed(); }
  bool valid_frame(int64_t f) const { return f >= 0 && static_cast<size_t>(f) < frames_.size(); }

 private:
  // One sampler tick over every Python thread (GIL held, sampler thread).
  void sample_threads();
  int64_t close_innermost(ThreadScopes* ts);

  StringTable strings_;
  FrameTable frames_;
  Tree tree_;
  PyStack pystack_;
  ScopeRegistry scopes_;
  Symbolizer symbolizer_;
  bool native_ = false;
  int64_t dropped_samples_ = 0;
  std::vector<int64_t> scratch_;  // reused path buffer (GIL-protected)
  std::vector<void*> pcs_;
  Monitor monitor_;
  Sampler sampler_;  // last: its thread uses everything above
#ifdef Py_GIL_DISABLED
  std::recursive_mutex hot_mu_;
#endif
};

// Process-wide hooks over every live collector: the atexit hook stops their
// threads before finalization; the fork child handler forgets them.
void register_collector(Collector* c);
void unregister_collector(Collector* c);
void stop_all_collectors();

}  // namespace dc
