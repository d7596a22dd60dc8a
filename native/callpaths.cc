// Call paths of the native capture: from an operator's interpreter frames
// to its tree node below the thread's innermost scope (see opcapture.h). The
// steady state is one hash of the frames and a probe of the thread's cache;
// a miss takes the GIL once to name lines and modules.
#include "opcapture.h"

#include "monitor.h"

namespace dc {

namespace {

int lasti_of(const RawFrame& f, bool gil_free) {
  // The GIL-held walk stores lasti + 1 where the native walk stores the
  // instruction's address (both are what the path hash reads).
  return gil_free ? frame_lasti(f.code, f.instr)
                  : static_cast<int>(reinterpret_cast<intptr_t>(f.instr)) - 1;
}

}  // namespace

int64_t OpCapture::unscoped_node_locked() {
  if (!capturing_.load(std::memory_order_relaxed)) return 0;
  int64_t node = unscoped_root_.load(std::memory_order_relaxed);
  if (node >= 0) return node;
  if (unscoped_frame_ < 0) return 0;
  node = store_.tree.child(0, unscoped_frame_);
  unscoped_root_.store(node, std::memory_order_relaxed);
  return node;
}

int64_t OpCapture::unscoped_parent(OpThread& t) {
  if (t.serving < 0) {
    const int64_t root = unscoped_root_.load(std::memory_order_relaxed);
    if (root >= 0) return root;
  } else if (t.serving_parent >= 0) {
    return t.serving_parent;
  }
  auto lock = store_.lock();
  if (!capturing_.load(std::memory_order_relaxed)) return -1;
  const int64_t root = unscoped_node_locked();
  if (t.serving < 0) return root;
  // A collective's work, run by its backend on this thread: its operators
  // (gloo copying a gathered tensor into place) under the collective's
  // context, in the unscoped phase, since they are not the step's thread's time.
  t.serving_parent = store_.tree.valid_node(t.serving) && t.serving != root
                         ? store_.tree.mirror(t.serving, root)
                         : root;
  return t.serving_parent;
}

int64_t OpCapture::context_node(OpThread& t, int64_t frame) {
  int64_t parent = 0, min_depth = 0;
  ThreadScopes* sc = t.scopes;
  if (sc != nullptr && !sc->stack.empty()) {
    parent = sc->stack.back().node;
    min_depth = sc->stack.back().user_depth;
  } else {
    parent = unscoped_parent(t);
    if (parent < 0) return -1;
  }
  // The cache key is the whole walk (with the scope's depth and the op): the
  // kept part below the scope is what the node depends on, and on a hit (the
  // steady state) one pass over the chain, without storing it, is all it costs.
  const uint64_t op = static_cast<uint64_t>(frame) * 0xD6E8FEB86659FD93ull;
  uint64_t h = static_cast<uint64_t>(min_depth);
  int n = 0;
  bool walked = false;
  if (t.ts != nullptr && gil_free_) {
    n = hash_frames(t.ts, reinterpret_cast<PyCodeObject*>(context_code_), kMaxWalk, &h);
  } else if (t.ts != nullptr) {
    n = walk_with_gil(t);
    for (int i = 0; i < n; ++i) h = fold_frame(h, t.walk[i]);
    walked = true;
  }
  if (n < 0) {  // too deep to walk: the op is kept, without its path
    unpathed_ops_.fetch_add(1, std::memory_order_relaxed);
    n = 0;
    h = static_cast<uint64_t>(min_depth);
  }
  const uint64_t a = finish_hash((h ^ static_cast<uint64_t>(n)) ^ op);
  // In the backward phase an op autograd's engine runs between functions goes
  // where the function before it was (the gradients it accumulates are that
  // function's): a parameter's AccumulateGrad does the same (backward_enter).
  const Scope* scope = sc != nullptr && !sc->stack.empty() ? &sc->stack.back() : nullptr;
  const bool backward = scope != nullptr && scope->node == t.backward_root;
  const int64_t after = backward && scope->last_inside ? scope->last_context : parent;
  if (const int64_t* hit = t.paths.find(a, static_cast<uint64_t>(parent)))
    return *hit == kEngineOp ? anchored(t, after, frame) : *hit;
  const int64_t miss_start = now_ns();
  if (n > 0 && !walked)
    n = walk_frames(t.ts, reinterpret_cast<PyCodeObject*>(context_code_), t.walk, kMaxWalk);
  if (n < 0) n = 0;
  int keep = n - static_cast<int>(min_depth);
  if (keep < 0) keep = 0;
  int64_t node = resolve_path(t, keep, parent, frame, backward);
  if (node >= 0 || node == kEngineOp) t.paths.insert(a, static_cast<uint64_t>(parent), node);
  if (node == kEngineOp) node = anchored(t, after, frame);
  t.resolved_ns = node >= 0 ? now_ns() - miss_start : 0;
  return node;
}

int64_t OpCapture::anchored(OpThread& t, int64_t at, int64_t frame) {
  const uint64_t key = static_cast<uint64_t>(at) | kAnchorTag;
  if (const int64_t* hit = t.backs.find(key, static_cast<uint64_t>(frame))) return *hit;
  auto lock = store_.lock();
  if (!capturing_.load(std::memory_order_relaxed) || !store_.tree.valid_node(at)) return -1;
  const int64_t node = store_.tree.child(at, frame);
  t.backs.insert(key, static_cast<uint64_t>(frame), node);
  return node;
}

int64_t OpCapture::resolve_path(OpThread& t, int keep, int64_t parent, int64_t frame, bool engine) {
  if (_Py_IsFinalizing()) return -1;
  const bool held = PyGILState_Check() != 0;
  PyGILState_STATE g = PyGILState_UNLOCKED;
  if (!held) g = PyGILState_Ensure();
  t.busy = true;  // the namer is Python: operators it runs are not the user's
  t.ids.assign(static_cast<size_t>(keep), -1);
  PyObject* root = nullptr;  // the outermost module on this stack names the others
  for (int i = keep - 1; i >= 0 && root == nullptr; --i) root = t.walk[i].self;
  for (int i = 0; i < keep; ++i)
    if (t.walk[i].self != nullptr) t.ids[i] = module_frame(t.walk[i].self, root);
  t.busy = false;
  int64_t node = -1;
  {
    auto lock = store_.lock();
    if (capturing_.load(std::memory_order_relaxed)) {
      node = parent;
      for (int i = keep - 1; i >= 0; --i) {
        const RawFrame& f = t.walk[i];
        if (f.self != nullptr) {
          if (t.ids[i] >= 0) node = store_.tree.child(node, t.ids[i]);
          continue;
        }
        PyStack::Resolved r = store_.pystack.resolve_code(f.code, lasti_of(f, gil_free_));
        if (!r.skip) node = store_.tree.child(node, r.frame);
      }
      // No frame of its own below the scope, in the backward phase: autograd's
      // engine runs it between functions (accumulating a gradient).
      node = engine && node == parent ? kEngineOp : store_.tree.child(node, frame);
    }
  }
  if (!held) PyGILState_Release(g);
  return node;
}

int OpCapture::walk_with_gil(OpThread& t) {
  if (_Py_IsFinalizing()) return 0;
  PyGILState_STATE g = PyGILState_Ensure();
  int n = 0;
  for (PyFrameObject* f = PyEval_GetFrame(); f != nullptr && n >= 0;) {
    if (n == kMaxWalk) {
      n = -1;
      break;
    }
    PyCodeObject* code = PyFrame_GetCode(f);
    Py_DECREF(code);  // alive while its frame is
    PyObject* self = nullptr;
    if (reinterpret_cast<PyObject*>(code) == context_code_) {
      PyObject* locals = PyFrame_GetLocals(f);  // new reference
      if (locals != nullptr) {
        self = PyMapping_Check(locals) ? PyMapping_GetItemString(locals, "self") : nullptr;
        Py_XDECREF(self);  // the frame still holds it
        Py_DECREF(locals);
      }
      if (PyErr_Occurred()) PyErr_Clear();
    }
    t.walk[n++] = RawFrame{
        code, reinterpret_cast<const void*>(static_cast<intptr_t>(PyFrame_GetLasti(f)) + 1), self};
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_XDECREF(back);
    f = back;
  }
  PyGILState_Release(g);
  return n;
}

int64_t OpCapture::module_frame(PyObject* module, PyObject* root) {
  uint64_t a = reinterpret_cast<uintptr_t>(module), b = reinterpret_cast<uintptr_t>(root);
  if (const int64_t* hit = module_frames_.find(a, b)) return *hit;
  int64_t fid = -1;
  if (namer_ != nullptr) {
    PyObject* r = PyObject_CallFunctionObjArgs(namer_, module, root, nullptr);
    if (r != nullptr) fid = PyLong_AsLongLong(r);
    Py_XDECREF(r);
    if (PyErr_Occurred() || fid < 0 || !store_.valid_frame(fid)) {
      PyErr_Clear();
      ++namer_errors_;
      fid = -1;
    }
  }
  module_frames_.insert(a, b, fid);
  return fid;
}

}  // namespace dc
