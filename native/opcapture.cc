// Native operator capture; see opcapture.h for the design and capture_api.h
// for the calls a framework extension makes.
#include "opcapture.h"

#include <memory>
#include <stdexcept>

#include "frames.h"
#include "monitor.h"
#include "tree.h"

namespace dc {

namespace {

// Capture generations are unique across collectors, so a thread's state from
// another collector or an earlier window never matches.
std::atomic<uint64_t> g_generation{0};
std::atomic<OpCapture*> g_capturing{nullptr};

constexpr uint64_t kNestedTag = 0x6e65737465642121ull;
// The profiler's own time resolving new call paths (a cold window's first
// operators take the GIL and name their modules in Python): billed under the
// scope as an operator of ours, not to the user's line the next op is on.
constexpr const char kOwnFrame[] = "deepcontext::call_paths";

// The C table (capture_api.h): thin casts to the capture.
int64_t api_op_frame(void* c, const char* name, int32_t backward) {
  return static_cast<OpCapture*>(c)->op_frame(name, backward != 0);
}

int64_t api_op_frame_detail(void* c, const char* name, const char* detail, int32_t backward) {
  return static_cast<OpCapture*>(c)->op_frame(name, backward != 0, detail);
}
int64_t api_op_enter(void* c, int64_t frame, int64_t seq, uint64_t thread, int32_t flags) {
  return static_cast<OpCapture*>(c)->op_enter(frame, seq, thread, flags);
}
int64_t api_backward_enter(void* c, int64_t frame, int64_t seq, uint64_t forward_thread) {
  return static_cast<OpCapture*>(c)->backward_enter(frame, seq, forward_thread);
}
void api_op_exit(void* c, int64_t metric, int64_t value) {
  static_cast<OpCapture*>(c)->op_exit(metric, value);
}
void api_op_add(void* c, int64_t metric, int64_t value) {
  static_cast<OpCapture*>(c)->op_add(metric, value);
}
void api_abandon(void* c) { static_cast<OpCapture*>(c)->abandon(); }
void api_serve(void* c, int64_t node) { static_cast<OpCapture*>(c)->serve(node); }
void api_memory(void* c, uint64_t ptr, int64_t size, int32_t device_type, int32_t device_index,
                uint64_t total_allocated, uint64_t total_reserved) {
  static_cast<OpCapture*>(c)->memory(static_cast<uintptr_t>(ptr), size, device_type, device_index,
                                     total_allocated, total_reserved);
}

int32_t api_memory_mark(void* c, uint64_t ptr, int32_t category, int32_t only_temporary) {
  return static_cast<OpCapture*>(c)->memory_mark(static_cast<uintptr_t>(ptr), category,
                                                 only_temporary != 0)
             ? 1
             : 0;
}

dc_capture_api make_api(OpCapture* c) {
  dc_capture_api api;
  api.abi = DC_CAPTURE_ABI;
  api.collector = c;
  api.op_frame = api_op_frame;
  api.op_frame_detail = api_op_frame_detail;
  api.op_enter = api_op_enter;
  api.backward_enter = api_backward_enter;
  api.op_exit = api_op_exit;
  api.op_add = api_op_add;
  api.abandon = api_abandon;
  api.memory = api_memory;
  api.memory_mark = api_memory_mark;
  api.serve = api_serve;
  return api;
}

}  // namespace

OpCapture::OpCapture(Store* store, ScopeRegistry* scopes, Between* between, MemoryTracker* memory)
    : store_(*store),
      scopes_(*scopes),
      between_(*between),
      memory_(*memory),
      api_(make_api(this)) {}

// --- start / stop (GIL held) ----------------------------------------------

bool OpCapture::walk_matches_public_api() {
  std::unique_ptr<RawFrame[]> walk(new RawFrame[kMaxWalk]);
  int n = walk_frames(own_thread_state(), nullptr, walk.get(), kMaxWalk);
  if (n <= 0) return false;
  int i = 0;
  for (PyFrameObject* f = PyEval_GetFrame(); f != nullptr; ++i) {
    PyCodeObject* code = PyFrame_GetCode(f);
    Py_DECREF(code);  // alive while its frame is
    if (i >= n || walk[i].code != code || frame_lasti(code, walk[i].instr) != PyFrame_GetLasti(f))
      return false;
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_XDECREF(back);  // owned by its live interpreter frame
    f = back;
  }
  return i == n;
}

bool OpCapture::start(int64_t backward_frame, bool nested, PyObject* context_code, PyObject* namer,
                      bool allow_gil_free, int64_t unscoped_frame) {
  OpCapture* expected = nullptr;
  if (!g_capturing.compare_exchange_strong(expected, this) && expected != this)
    throw std::runtime_error("another collector is capturing operators");
  gil_free_ = allow_gil_free && walk_compiled() && walk_matches_public_api();
  {
    auto lock = store_.lock();
    backward_frame_ = store_.valid_frame(backward_frame) ? backward_frame : -1;
    // Made on the first backward function, so a window without one has no such node.
    backward_root_ = -1;
    unscoped_frame_ = store_.valid_frame(unscoped_frame) ? unscoped_frame : -1;
    own_frame_ = store_.frames.intern(KIND_OPERATOR, kOwnFrame, "", 0, "", 0);
    unscoped_root_.store(unscoped_frame_ >= 0 ? -1 : 0);  // likewise
    nested_ = nested;
    seqs_.clear();
    module_frames_.clear();
    unpathed_ops_.store(0);
    namer_errors_ = 0;
    Py_XINCREF(context_code);
    Py_XINCREF(namer);
    Py_XSETREF(context_code_, context_code);
    Py_XSETREF(namer_, namer);
    generation_.store(g_generation.fetch_add(1) + 1);
    capturing_.store(true);
  }
  return gil_free_;
}

std::pair<int64_t, int64_t> OpCapture::stop() {
  {
    auto lock = store_.lock();  // operators in flight finish their tree work first
    capturing_.store(false);
  }
  Py_CLEAR(context_code_);
  Py_CLEAR(namer_);
  OpCapture* self = this;
  g_capturing.compare_exchange_strong(self, nullptr);
  return {unpathed_ops_.load(), namer_errors_};
}

void OpCapture::abandon() {
  auto lock = store_.lock();  // operators in flight finish their tree work first
  capturing_.store(false);
}

// --- the hot calls (any thread, GIL or not) ---------------------------------

int64_t OpCapture::op_frame(const char* name, bool backward, const char* detail) {
  auto lock = store_.lock();
  return store_.frames.intern(KIND_OPERATOR, name, "", 0, detail, backward ? FLAG_BACKWARD : 0);
}

OpThread& OpCapture::op_thread(bool python) {
  // A pointer in the initial-exec TLS block: one instruction to reach, where
  // a thread_local object (tens of KB, dynamically initialised) in a dlopen'ed
  // module costs a __tls_get_addr call and a guard check per access.
  static thread_local OpThread* state __attribute__((tls_model("initial-exec"))) = nullptr;
  if (state == nullptr) {
    static thread_local std::unique_ptr<OpThread> owner;  // frees it when the thread ends
    owner.reset(new OpThread());
    state = owner.get();
  }
  OpThread& t = *state;
  const uint64_t gen = generation_.load(std::memory_order_relaxed);
  if (t.owner != gen) {
    t.owner = gen;
    t.depth = 0;
    t.busy = false;
    t.paths.clear();
    t.backs.clear();
    t.ts = nullptr;
    t.serving = t.serving_parent = -1;
  }
  if (!python) return t;  // an exit: reads only its own slots
  PyThreadState* ts = own_thread_state();
  if (t.ts != ts || (ts != nullptr && t.scopes == nullptr)) {
    t.ts = ts;
    t.scopes = ts != nullptr ? scopes_.of(ts) : nullptr;
  }
  return t;
}

int64_t OpCapture::begin(OpThread& t, OpThread::Open& o, int64_t node, bool inside) {
  o.node = node;
  o.child_ns = 0;
  o.py_depth = t.scopes != nullptr ? static_cast<int64_t>(t.scopes->stack.size()) : 0;
  o.inside = inside && o.py_depth > 0;
  o.own_ns = t.resolved_ns;
  t.resolved_ns = 0;
  if (!o.region) t.publish(t.depth);
  o.start_ns = now_ns();
  return node;
}

int64_t OpCapture::op_enter(int64_t frame, int64_t seq, uint64_t thread, int32_t flags) {
  if (!capturing_.load(std::memory_order_relaxed)) return -1;
  OpThread& t = op_thread();
  const int d = t.depth;
  OpThread::Open* slot = t.open_slot((flags & DC_OP_REGION) != 0);
  if (slot == nullptr) return -1;
  OpThread::Open& o = *slot;
  if (t.busy || t.suspended > 0 || frame < 0)
    return -1;  // frame -1: a record that is not an operator
  const int outer = o.region ? -1 : t.innermost_op(d);
  int64_t node;
  if (outer >= 0) {
    const int64_t outer_node = t.open[outer].node;
    if (!nested_) {
      // Lightweight: one node per call from Python. An inner op's autograd
      // node still belongs to that call, so its backward lands beside it.
      if (seq >= 0) seqs_.put(thread, seq, outer_node);
      return -1;
    }
    const uint64_t a = kNestedTag ^ static_cast<uint64_t>(frame);
    if (const int64_t* hit = t.paths.find(a, static_cast<uint64_t>(outer_node))) {
      node = *hit;
    } else {
      auto lock = store_.lock();
      if (!capturing_.load(std::memory_order_relaxed)) return -1;
      int64_t fid = frame;
      const Frame& outer_frame =
          store_.frames.at(store_.tree.frames()[static_cast<size_t>(outer_node)]);
      if (outer_frame.flags & FLAG_BACKWARD) {  // an op a backward function runs is backward too
        Frame f = store_.frames.at(frame);
        f.flags |= FLAG_BACKWARD;
        fid = store_.frames.intern_ids(f);
      }
      node = store_.tree.child(outer_node, fid);
      t.paths.insert(a, static_cast<uint64_t>(outer_node), node);
    }
  } else {
    node = context_node(t, frame);
    if (node < 0) return -1;
  }
  if (seq >= 0) seqs_.put(thread, seq, node);
  // Inner ops hang from their outer op; the others from the innermost scope.
  return begin(t, o, node, outer < 0);
}

int64_t OpCapture::backward_enter(int64_t frame, int64_t seq, uint64_t forward_thread) {
  if (!capturing_.load(std::memory_order_relaxed)) return -1;
  OpThread& t = op_thread();
  const int d = t.depth;
  OpThread::Open* slot = t.open_slot(false);
  if (slot == nullptr) return -1;
  OpThread::Open& o = *slot;
  if (t.busy || t.suspended > 0 || (!nested_ && t.innermost_op(d) >= 0)) return -1;
  const int64_t forward = seq >= 0 ? seqs_.get(forward_thread, seq) : -1;
  // A function no forward op made (a parameter's AccumulateGrad) runs as soon
  // as the function that computed its gradient ends (the engine's ready queue
  // puts it first): it goes where that one was.
  int64_t anchor = -1;
  if (seq < 0 && t.scopes != nullptr && !t.scopes->stack.empty()) {
    const Scope& s = t.scopes->stack.back();
    if (s.node == t.backward_root && s.last_inside && s.last_context != s.node)
      anchor = s.last_context;
  }
  const uint64_t key =
      anchor >= 0 ? (static_cast<uint64_t>(anchor) | kAnchorTag) : static_cast<uint64_t>(forward);
  int64_t node;
  if (const int64_t* hit = t.backs.find(key, static_cast<uint64_t>(frame))) {
    node = *hit;
  } else {
    auto lock = store_.lock();
    if (!capturing_.load(std::memory_order_relaxed) || !store_.valid_frame(frame)) return -1;
    if (backward_root_ < 0)
      backward_root_ = backward_frame_ >= 0 ? store_.tree.child(0, backward_frame_) : 0;
    t.backward_root = backward_root_;
    if (forward >= 0 && store_.tree.valid_node(forward)) {
      // backward phase -> the forward op's context -> forward op [backward],
      // detail: the autograd node, so a composite call's nodes get their rows.
      const Frame& fwd = store_.frames.at(store_.tree.frames()[static_cast<size_t>(forward)]);
      const Frame& bwd = store_.frames.at(frame);
      int64_t fid = store_.frames.intern_ids(
          Frame{KIND_OPERATOR, fwd.name, fwd.file, fwd.line, bwd.name, FLAG_BACKWARD});
      node =
          store_.tree.child(store_.tree.mirror(store_.tree.parent(forward), backward_root_), fid);
    } else if (anchor >= 0 && store_.tree.valid_node(anchor)) {
      node = store_.tree.child(anchor, frame);
    } else {
      node = store_.tree.child(backward_root_, frame);  // made outside this window
    }
    t.backs.insert(key, static_cast<uint64_t>(frame), node);
  }
  // Backward functions hang below the backward phase: inside the scope when
  // that is the phase the thread is in.
  const bool inside = t.scopes != nullptr && !t.scopes->stack.empty() &&
                      t.scopes->stack.back().node == t.backward_root;
  return begin(t, o, node, inside);
}

void OpCapture::op_exit(int64_t metric, int64_t value) {
  if (!capturing_.load(std::memory_order_relaxed)) return;
  OpThread& t = op_thread(false);
  if (t.depth == 0) return;  // entered before this window: not ours
  const int d = --t.depth;
  if (d >= kMaxOpDepth) return;
  const OpThread::Open& o = t.open[d];
  if (o.node < 0) return;
  const int64_t end = now_ns();
  const int64_t elapsed = end - o.start_ns;
  const int outer = t.innermost_recorded(d);
  // Not inside another recorded op or region: the scope it was entered in
  // takes its time, and the Python time since the last thing recorded there.
  Scope* scope = nullptr;
  if (outer < 0 && t.scopes != nullptr && o.py_depth > 0 &&
      static_cast<int64_t>(t.scopes->stack.size()) >= o.py_depth)
    scope = &t.scopes->stack[static_cast<size_t>(o.py_depth - 1)];
  {
    auto lock = store_.lock();
    if (!capturing_.load(std::memory_order_relaxed)) return;
    store_.tree.add(o.node, METRIC_CPU_TIME, elapsed - o.child_ns);
    store_.tree.add(o.node, METRIC_COUNT, 1);
    if (metric >= 0 && value != 0 && store_.tree.valid_metric(metric))
      store_.tree.add(o.node, metric, value);
    if (scope != nullptr) {
      const int64_t context = store_.tree.parent(o.node);
      if (o.own_ns > 0) {
        store_.tree.add(store_.tree.child(scope->node, own_frame_), METRIC_CPU_TIME, o.own_ns);
        scope->child_ns += o.own_ns;
      }
      between_.bill_between(t.scopes, *scope, context, o.inside, o.start_ns - o.own_ns);
      scope->child_ns += elapsed;
      scope->last_ns = end;
      scope->last_context = context;
      scope->last_inside = o.inside;
    }
  }
  if (outer >= 0) t.open[outer].child_ns += elapsed;
  t.publish(d);
}

OpThread::Open* OpCapture::open_operator(ThreadScopes* ts) {
  if (!capturing_.load(std::memory_order_relaxed)) return nullptr;
  OpThread& t = op_thread(false);
  if (t.scopes != ts) return nullptr;
  const int i = t.innermost_recorded(t.depth);
  if (i < 0 || t.open[i].py_depth != static_cast<int64_t>(ts->stack.size())) return nullptr;
  return &t.open[i];
}

void OpCapture::republish(ThreadScopes* ts) {
  if (!capturing_.load(std::memory_order_relaxed)) {
    ts->publish();
    return;
  }
  OpThread& t = op_thread();
  if (t.scopes == ts)
    t.publish(t.depth);
  else
    ts->publish();
}

void OpCapture::suspend(int delta) {
  if (!capturing_.load(std::memory_order_relaxed)) return;
  OpThread& t = op_thread();
  t.suspended += delta;
  if (t.suspended < 0) t.suspended = 0;
}

void OpCapture::claim_seqs(uint64_t thread, int64_t first, int64_t last, int64_t node) {
  if (!capturing_.load(std::memory_order_relaxed) || first < 0) return;
  for (int64_t seq = first; seq < last && seq - first < 4096; ++seq) seqs_.put(thread, seq, node);
}

void OpCapture::op_add(int64_t metric, int64_t value) {
  if (!capturing_.load(std::memory_order_relaxed)) return;
  OpThread& t = op_thread();
  const int i = t.innermost_recorded(t.depth);
  if (i < 0) return;
  auto lock = store_.lock();
  if (capturing_.load(std::memory_order_relaxed) && store_.tree.valid_metric(metric))
    store_.tree.add(t.open[i].node, metric, value);
}

void OpCapture::serve(int64_t node) {
  if (!capturing_.load(std::memory_order_relaxed)) return;
  OpThread& t = op_thread(false);
  if (t.serving == node) return;
  t.serving = node;
  t.serving_parent = -1;  // mirrored on the first operator in no scope
}

void OpCapture::memory(uintptr_t ptr, int64_t size, int32_t device_type, int32_t device_index,
                       uint64_t total, uint64_t reserved) {
  if (!memory_.on()) return;
  // The context that allocates: the innermost recorded operator (a backward
  // one under its forward context), else the innermost scope, else the
  // unscoped root. A free is billed back to its allocation's node whatever
  // this says.
  int64_t node = -1;
  if (size > 0 && capturing_.load(std::memory_order_relaxed)) {
    OpThread& t = op_thread();
    const int i = t.innermost_recorded(t.depth);
    if (i >= 0) node = t.open[i].node;
    if (node < 0 && t.scopes != nullptr && !t.scopes->stack.empty())
      node = t.scopes->stack.back().node;
  }
  if (node < 0) {
    const int64_t unscoped = unscoped_root_.load(std::memory_order_relaxed);
    node = unscoped >= 0 ? unscoped : 0;
  }
  memory_.report_on(device_type, device_index, ptr, size, node, static_cast<uint64_t>(now_ns()),
                    reserved, total);
}

}  // namespace dc
