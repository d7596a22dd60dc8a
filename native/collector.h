// The collector: the object Python holds (dc_core._native.Collector, the
// contract in _native.pyi). It owns one of each part and wires them
// together; the parts own their state:
//
//   Store         strings, frames, tree, Python code caches, and the mutex
//                 that guards them (store.h)
//   ScopeRegistry every thread's scope stack, reachable without the GIL (scopes.h)
//   Between       the time between two recorded things (between.h)
//   MemoryTracker memory by context: allocator reports, live map, peak (memory.h)
//   OpCapture     native operator capture behind capture_api.h (opcapture.h)
//   PythonScopes  enter/exit and what splits the time between them (python_scopes.h)
//   Sampler       the CPU sampler's thread (sampler.h)
//   Monitor       the system monitor's thread (monitor.h)
//
// The pybind11 methods run with the GIL held; operator capture and the
// sampler reach the store from other threads without it, under its mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "between.h"
#include "capture_api.h"
#include "memory.h"
#include "monitor.h"
#include "opcapture.h"
#include "python_scopes.h"
#include "sampler.h"
#include "scopes.h"
#include "store.h"

namespace dc {

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
    auto lock = store_.lock();
    return store_.tree.child(parent, frame);
  }
  int64_t path(int64_t parent, const int64_t* frames, size_t n);
  int64_t mirror(int64_t node, int64_t top) {
    auto lock = store_.lock();
    return store_.tree.mirror(node, top);
  }
  int64_t parent(int64_t node) {
    auto lock = store_.lock();
    return store_.tree.parent(node);
  }
  void add(int64_t node, int64_t metric, int64_t value) {
    auto lock = store_.lock();
    store_.tree.add(node, metric, value);
  }
  void mark_step() {
    auto lock = store_.lock();
    store_.tree.mark_step(METRIC_CPU_TIME);
  }

  // Python call paths and scopes (python_scopes.h)
  void python_frames(std::vector<int64_t>* out) { scopes_.python_frames(out); }
  int64_t enter(const int64_t* frames, size_t n, int64_t parent, bool capture, int64_t user_depth) {
    return scopes_.enter(frames, n, parent, capture, user_depth);
  }
  int64_t exit() { return scopes_.exit(); }
  // Closes the innermost scope; returns its exclusive ns (-1: none open).
  int64_t exit_own() {
    int64_t own = -1;
    scopes_.exit(&own);
    return own;
  }
  int64_t top() { return scopes_.top(); }
  int64_t depth() { return scopes_.depth(); }
  void unwind(int64_t depth) { scopes_.unwind(depth); }
  void module_call(bool entering) { scopes_.module_call(entering); }
  void lend(uint64_t ident, int64_t start_ns, int64_t end_ns) {
    scopes_.lend(ident, start_ns, end_ns);
  }

  // background threads
  void start_sampler(double hz, bool native) { sampler_.start(hz, native); }
  void stop_sampler() { sampler_.stop(); }
  bool sampler_running() const { return sampler_.running(); }
  void start_monitor(int64_t interval_ms) { monitor_.start(interval_ms); }
  void stop_monitor() { monitor_.stop(); }
  Monitor& monitor() { return monitor_; }

  // native operator capture (opcapture.h)
  bool capture_start(int64_t backward_frame, bool nested, PyObject* context_code, PyObject* namer,
                     bool allow_gil_free, int64_t unscoped_frame = -1) {
    return capture_.start(backward_frame, nested, context_code, namer, allow_gil_free,
                          unscoped_frame);
  }
  std::pair<int64_t, int64_t> capture_stop() { return capture_.stop(); }
  bool capturing() const { return capture_.capturing(); }
  const dc_capture_api* capture_api() const { return capture_.api(); }
  void capture_suspend(int delta) { capture_.suspend(delta); }
  void capture_seq(uint64_t thread, int64_t first, int64_t last, int64_t node) {
    capture_.claim_seqs(thread, first, last, node);
  }

  // memory by context (memory.h); reports come through the capture table
  MemoryTracker& memory() { return memory_; }

  // Holds the tree still while a snapshot copies it.
  std::unique_lock<std::mutex> hold() { return std::unique_lock<std::mutex>(store_.mu); }

  void reset();
  void after_fork_child();
  void stop_threads();

  // read access for snapshots
  const Tree& tree() const { return store_.tree; }
  const FrameTable& frames() const { return store_.frames; }
  const StringTable& strings() const { return store_.strings; }
  int64_t dropped_samples() const { return sampler_.dropped(); }
  bool valid_frame(int64_t f) const { return store_.valid_frame(f); }

 private:
  // In dependency order: each part uses only those above it, and is
  // destroyed before them.
  Store store_;
  ScopeRegistry registry_;
  Between between_;
  MemoryTracker memory_;
  OpCapture capture_;
  PythonScopes scopes_;
  Monitor monitor_;
  Sampler sampler_;  // last: its thread reads the store and the registry
};

// Process-wide hooks over every live collector: the atexit hook stops their
// threads before finalization; the fork child handler forgets them.
void register_collector(Collector* c);
void unregister_collector(Collector* c);
void stop_all_collectors();

}  // namespace dc
