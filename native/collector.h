// The collector: frames + tree + Python stacks + per-thread scopes, and the
// sampler and monitor threads that feed it.
//
// Thread safety: the tree, frames and Python caches are guarded by one mutex
// (`hot_mu_`), taken by every method that touches them: the pybind11 methods
// run with the GIL held, but native operator capture (capture.cc) reports from
// any thread without it. Lock order: the GIL (when wanted) before hot_mu_,
// never the other way round.
#pragma once

#include <Python.h>

#include <cstdint>
#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <string>
#include <vector>

#include "capture.h"
#include "capture_api.h"
#include "frames.h"
#include "monitor.h"
#include "periodic.h"
#include "pystack.h"
#include "scopes.h"
#include "tree.h"
#include "unwind.h"

#define DC_HOT_LOCK std::lock_guard<std::mutex> dc_hot_lock_(hot_mu_)

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
  void mark_step() {
    DC_HOT_LOCK;
    tree_.mark_step(METRIC_CPU_TIME);
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
  // A module call on the calling thread begins (entering) or ends (GIL held):
  // timestamped, so the time between two recorded calls splits at module
  // boundaries (the native capture's global module hooks).
  void module_call(bool entering);
  // Thread `ident` waited in [start_ns, end_ns] for work the calling thread
  // recorded: that span leaves its time between recorded things.
  void lend(uint64_t ident, int64_t start_ns, int64_t end_ns);

  // background threads
  void start_sampler(double hz, bool native);
  void stop_sampler() { sampler_.stop(); }
  bool sampler_running() const { return sampler_.running(); }
  void start_monitor(int64_t interval_ms) { monitor_.start(interval_ms); }
  void stop_monitor() { monitor_.stop(); }
  Monitor& monitor() { return monitor_; }

  // native operator capture (capture.cc); see capture_api.h for the hot calls.
  // start: GIL held. Backward functions mirror their forward context under
  // the root's child of frame `backward_frame` (the backward phase); `nested` records every operator (else only
  // the outermost of each call from Python); frames of `context_code` name a
  // module by their first local, through `namer(module, outermost_module) ->
  // frame id`. Returns whether the GIL-free frame walk is in use.
  // Operators on a thread with no open scope (a thread of the user's own,
  // outside any step) hang under the root's child of frame `unscoped_frame`
  // (a phase; -1: the root itself).
  bool capture_start(int64_t backward_frame, bool nested, PyObject* context_code,
                     PyObject* namer, bool allow_gil_free, int64_t unscoped_frame = -1);
  // Stops recording (GIL held); returns {ops recorded without their path
  // (stack too deep), namer errors}.
  std::pair<int64_t, int64_t> capture_stop();
  // The capture failed inside a callback (any thread): operators open now
  // never exit, so none is recorded from here and scopes stop nesting in them.
  void capture_abandon();
  bool capturing() const { return capturing_.load(std::memory_order_relaxed); }
  const dc_capture_api* capture_api() const { return &api_; }
  int64_t op_frame(const char* name, bool backward, const char* detail = "");
  int64_t op_enter(int64_t frame, int64_t seq, uint64_t thread, int32_t flags);
  int64_t backward_enter(int64_t frame, int64_t seq, uint64_t forward_thread);
  void op_exit(int64_t metric, int64_t value);
  void op_add(int64_t metric, int64_t value);
  // The calling thread's operators are not recorded while suspended (> 0):
  // a region recorded by other means runs (GIL held, on that thread).
  void capture_suspend(int delta);
  // Forward sequence numbers [first, last) of framework thread `thread` belong
  // to `node` (a region recorded by other means): their backward lands there.
  void capture_seq(uint64_t thread, int64_t first, int64_t last, int64_t node);
  // Holds the tree still while a snapshot copies it.
  std::unique_lock<std::mutex> hold() { return std::unique_lock<std::mutex>(hot_mu_); }

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
  // One sampler tick (sampler thread, no GIL): one sample per period of CPU
  // time each bound thread ran since the last tick, at its published node.
  void sample_threads();
  int64_t close_innermost(ThreadScopes* ts);

  // between.cc
  // Python time between two things recorded directly inside scope `s` (hot_mu_
  // held): from the end of the last one (s.last_ns) to `start`, when the next
  // one, called from `context`, starts.
  void bill_between(ThreadScopes* ts, Scope& s, int64_t context, bool inside, int64_t start);
  // Where the time from `s`'s last call to the next one (called from
  // `context`, in `s`'s subtree when `inside`) goes; -1: nowhere below `s`.
  int64_t stretch_node(const Scope& s, int64_t context, bool inside) const;
  // Bills `ns` to `node` as time below scope `s` (hot_mu_ held).
  void bill(Scope& s, int64_t node, int64_t ns);
  // Bills the part of [from, to] not lent away to `node` (hot_mu_ held).
  void bill_span(ThreadScopes* ts, Scope& s, int64_t node, int64_t from, int64_t to);
  // The module nodes on `node`'s path below `top`, innermost first.
  void modules_below(int64_t node, int64_t top, std::vector<int64_t>* out) const;
  // The part of [from, to] lent away by `ts`'s thread (hot_mu_ held); spans
  // that end by `to` are used up.
  int64_t take_lent(ThreadScopes* ts, int64_t from, int64_t to);

  // capture.cc
  OpThread& op_thread(bool python = true);  // python: also refresh the thread state (not needed at an exit)
  // The calling thread's innermost recorded operator opened inside its
  // innermost scope (`ts`'s top), or null: what a scope closing now ran in.
  OpThread::Open* open_operator(ThreadScopes* ts);
  // After the calling thread's scope stack changed: what it is in now.
  void republish(ThreadScopes* ts);

  // callpaths.cc
  int64_t context_node(OpThread& t, int64_t frame);
  int64_t resolve_path(OpThread& t, int keep, int64_t parent, int64_t frame, bool engine);
  // The node of op `frame` right under `at`, cached per thread.
  int64_t anchored(OpThread& t, int64_t at, int64_t frame);
  int walk_with_gil(OpThread& t);
  int64_t module_frame(PyObject* module, PyObject* root);
  bool walk_matches_public_api();

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
  // The sampler's own (its thread; start_sampler sets them while it is stopped).
  struct PendingSample {
    int64_t node;
    int64_t samples;
    pid_t tid;
  };
  std::vector<PendingSample> pending_;  // this tick's, read under the registry's mutex
  std::vector<Symbolizer::Sym*> native_syms_;  // reused lookup buffer (sampler thread)
  std::vector<int64_t> native_path_;    // reused path buffer (hot_mu_)
  std::vector<int64_t> exits_, entries_, left_, entered_;  // reused by bill_between (hot_mu_)
  int64_t sample_period_ns_ = 10000000;
  uint64_t sample_epoch_ = 0;  // bumped per start: CPU readings of a previous run are stale
  Monitor monitor_;
  std::mutex hot_mu_;

  // operator capture
  dc_capture_api api_;
  std::atomic<bool> capturing_{false};
  std::atomic<uint64_t> capture_gen_{0};
  bool nested_ = false;
  bool gil_free_ = false;
  int64_t backward_frame_ = -1;
  int64_t backward_root_ = -1;  // hot_mu_
  int64_t unscoped_frame_ = -1;
  int64_t own_frame_ = -1;  // where the profiler's own time inside a scope goes (deepcontext::call_paths)
  std::atomic<int64_t> unscoped_root_{-1};  // made under hot_mu_ on first use, read without it
  PyObject* context_code_ = nullptr;  // strong references while capturing
  PyObject* namer_ = nullptr;
  SeqTable seqs_;
  PairMap module_frames_;  // (module, root) -> frame id; GIL
  std::atomic<int64_t> unpathed_ops_{0};
  int64_t namer_errors_ = 0;  // GIL

  // Ticks sample_threads(). Last: its thread uses everything above.
  PeriodicThread sampler_;
};

// The C table of `c`'s capture entry points (capture_api.h).
dc_capture_api make_capture_api(Collector* c);

// Process-wide hooks over every live collector: the atexit hook stops their
// threads before finalization; the fork child handler forgets them.
void register_collector(Collector* c);
void unregister_collector(Collector* c);
void stop_all_collectors();

}  // namespace dc
