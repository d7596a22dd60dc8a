// Native operator capture: the state behind capture_api.h.
//
// Operators are reported by a framework callback on whatever thread runs
// them, usually without the GIL. Each thread keeps its own open operators and
// a cache from "context path" to tree node (opthread.h), so the steady state
// of an operator is: read the thread's own interpreter frames (pyframes.h),
// hash them, one probe of the thread's cache, a timestamp; and at exit one
// locked add to the tree. A cache miss (a new line, module or operator)
// takes the GIL once to resolve names, lines and module paths
// (callpaths.cc).
//
// Backward functions find the forward operator that made their autograd node
// through SeqTable, keyed by (forward thread, sequence number), and land
// under the mirror of its context below the backward phase.
//
// OpCapture owns what lives for one capture (start to stop): the sequence
// table, the module frames its namer gave, the C table handed to the
// framework extension and the generation that tells each thread's state
// whether it belongs to this capture. The tree it records into is the
// store's, under the store's mutex.
#pragma once

#include <Python.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "between.h"
#include "capture_api.h"
#include "flatmap.h"
#include "memory.h"
#include "opthread.h"
#include "scopes.h"
#include "seqtable.h"
#include "store.h"

namespace dc {

class OpCapture {
 public:
  OpCapture(Store* store, ScopeRegistry* scopes, Between* between, MemoryTracker* memory);
  OpCapture(const OpCapture&) = delete;
  OpCapture& operator=(const OpCapture&) = delete;

  // GIL held. Backward functions mirror their forward context under the
  // root's child of frame `backward_frame` (the backward phase); `nested`
  // records every operator (else only the outermost of each call from
  // Python); frames of `context_code` name a module by their first local,
  // through `namer(module, outermost_module) -> frame id`. Returns whether
  // the GIL-free frame walk is in use. Operators on a thread with no open
  // scope (a thread of the user's own, outside any step) hang under the
  // root's child of frame `unscoped_frame` (a phase; -1: the root itself).
  bool start(int64_t backward_frame, bool nested, PyObject* context_code, PyObject* namer,
             bool allow_gil_free, int64_t unscoped_frame);
  // Stops recording (GIL held); returns {ops recorded without their path
  // (stack too deep), namer errors}.
  std::pair<int64_t, int64_t> stop();
  // The capture failed inside a callback (any thread): operators open now
  // never exit, so none is recorded from here and scopes stop nesting in them.
  void abandon();
  bool capturing() const { return capturing_.load(std::memory_order_relaxed); }
  const dc_capture_api* api() const { return &api_; }
  // In a forked child (a DataLoader worker): nothing is recorded for the parent.
  void after_fork_child() { capturing_.store(false); }
  // Where a thread in no scope records (the phase start() was given, made on
  // first use), else the root; store's mutex held.
  int64_t unscoped_node_locked();
  // The backward phase's node once a backward function made it, else -1;
  // store's mutex held.
  int64_t backward_root_locked() const { return backward_root_; }

  // The hot calls (capture_api.h): any thread, GIL or not.
  int64_t op_frame(const char* name, bool backward, const char* detail = "");
  int64_t op_enter(int64_t frame, int64_t seq, uint64_t thread, int32_t flags);
  int64_t backward_enter(int64_t frame, int64_t seq, uint64_t forward_thread);
  void op_exit(int64_t metric, int64_t value);
  void op_add(int64_t metric, int64_t value);
  // The calling thread works for `node` (-1: none); see capture_api.h's serve.
  void serve(int64_t node);
  void memory(uintptr_t ptr, int64_t size, int32_t device_type, int32_t device_index,
              uint64_t total, uint64_t reserved);
  bool memory_mark(uintptr_t ptr, int category, bool only_temporary) {
    return memory_.mark(ptr, category, only_temporary);
  }

  // The calling thread's operators are not recorded while suspended (> 0):
  // a region recorded by other means runs (GIL held, on that thread).
  void suspend(int delta);
  // Forward sequence numbers [first, last) of framework thread `thread`
  // belong to `node` (a region recorded by other means): their backward
  // lands there.
  void claim_seqs(uint64_t thread, int64_t first, int64_t last, int64_t node);

  // For Python scopes on the calling thread (python_scopes.h), store's mutex
  // held. The calling thread's innermost recorded operator opened inside its
  // innermost scope (`ts`'s top), or null: what a scope closing now ran in.
  OpThread::Open* open_operator(ThreadScopes* ts);
  // After the calling thread's scope stack changed: what it is in now.
  void republish(ThreadScopes* ts);

 private:
  // The calling thread's state; `python`: also refresh its thread state
  // (not needed at an exit).
  OpThread& op_thread(bool python = true);
  // Starts the timing of a recorded slot; last, so the lookup is not billed to it.
  static int64_t begin(OpThread& t, OpThread::Open& o, int64_t node, bool inside);

  // callpaths.cc
  int64_t context_node(OpThread& t, int64_t frame);
  // Where a thread in no scope records: the mirror of the node it serves
  // below the unscoped phase, else that phase; -1 once the capture stopped.
  int64_t unscoped_parent(OpThread& t);
  int64_t resolve_path(OpThread& t, int keep, int64_t parent, int64_t frame, bool engine);
  // The node of op `frame` right under `at`, cached per thread.
  int64_t anchored(OpThread& t, int64_t at, int64_t frame);
  int walk_with_gil(OpThread& t);
  int64_t module_frame(PyObject* module, PyObject* root);
  bool walk_matches_public_api();

  Store& store_;
  ScopeRegistry& scopes_;
  Between& between_;
  MemoryTracker& memory_;

  dc_capture_api api_;
  std::atomic<bool> capturing_{false};
  std::atomic<uint64_t> generation_{0};
  bool nested_ = false;
  bool gil_free_ = false;
  int64_t backward_frame_ = -1;
  int64_t backward_root_ = -1;  // store's mutex
  int64_t unscoped_frame_ = -1;
  // Where the profiler's own time inside a scope goes (deepcontext::call_paths).
  int64_t own_frame_ = -1;
  // Made under the store's mutex on first use, read without it.
  std::atomic<int64_t> unscoped_root_{-1};
  PyObject* context_code_ = nullptr;  // strong references while capturing
  PyObject* namer_ = nullptr;
  SeqTable seqs_;
  PairMap module_frames_;  // (module, root) -> frame id; GIL
  std::atomic<int64_t> unpathed_ops_{0};
  int64_t namer_errors_ = 0;  // GIL
};

}  // namespace dc
