#include "python_scopes.h"

#include "monitor.h"
#include "tree.h"

namespace dc {

namespace {

constexpr size_t kMaxCalls = 256;  // module calls kept between two recorded things (more: no split)
constexpr size_t kMaxLent = 64;    // spans a thread may have lent and not yet given up

}  // namespace

void PythonScopes::python_frames(std::vector<int64_t>* out) {
  const FrameWalk walk(PyEval_GetFrame());  // before the lock (pystack.h)
  auto lock = store_.lock();
  ThreadScopes* ts = scopes_.current();
  int64_t min_depth = ts->stack.empty() ? 0 : ts->stack.back().user_depth;
  store_.pystack.capture(walk, min_depth, out);
}

int64_t PythonScopes::enter(const int64_t* frames, size_t n, int64_t parent, bool capture,
                            int64_t user_depth) {
  // Without capture the walk is still needed unless the caller gave the user
  // depth: it is what later captures inside this scope are cut at. Walked
  // before the lock is taken (pystack.h).
  const bool walks = capture || (user_depth < 0 && user_depth != kInheritUserDepth);
  const FrameWalk walk(walks ? PyEval_GetFrame() : nullptr);
  auto lock = store_.lock();
  ThreadScopes* ts = scopes_.current();
  const bool nested = !ts->stack.empty();
  // Inside an operator the native capture recorded, a scope nests under it.
  const int64_t inside = ts->innermost.load(std::memory_order_relaxed);
  // In no scope at all (a thread the window's steps do not run on), where
  // that thread's operators go: a phase, not the root.
  int64_t base = parent >= 0 ? parent : (inside >= 0 ? inside : capture_.unscoped_node_locked());
  int64_t min_depth = nested ? ts->stack.back().user_depth : 0;
  if (user_depth == kInheritUserDepth) user_depth = min_depth;
  scratch_.clear();
  if (walks) {
    int64_t measured = store_.pystack.capture(walk, min_depth, capture ? &scratch_ : nullptr);
    if (user_depth < 0) user_depth = measured;
  }
  // In the backward phase, outside any operator and with no frames of its
  // own (a collective autograd's engine issues between functions, as DDP's
  // reducer does once a bucket's last gradient is in): where the function
  // before it was, as the engine's own operators go (OpCapture::backward_enter).
  if (parent < 0 && nested && scratch_.empty() && inside == ts->stack.back().node) {
    const Scope& s = ts->stack.back();
    if (s.last_inside && s.last_context != s.node && store_.tree.valid_node(s.last_context) &&
        is_backward_phase(s.node)) {
      // beside that function, not in it (the Python path's scopes of
      // functions are their own contexts)
      int64_t at = s.last_context;
      while (at != s.node && at > 0 &&
             store_.frames.at(store_.tree.frames()[static_cast<size_t>(at)]).kind == KIND_OPERATOR)
        at = store_.tree.parent(at);
      base = at;
    }
  }
  int64_t node = base;
  for (int64_t f : scratch_) node = store_.tree.child(node, f);
  const int64_t context = node;
  for (size_t i = 0; i < n; ++i) node = store_.tree.child(node, frames[i]);
  // A scope opened inside the enclosing one's subtree (not inside an open
  // operator) follows the last thing recorded there.
  const int64_t top = nested ? ts->stack.back().node : -1;
  const bool under_op = parent < 0 && inside >= 0 && inside != top;
  const bool follows = nested && !under_op && store_.tree.depth(base) >= store_.tree.depth(top) &&
                       store_.tree.ancestor(base, store_.tree.depth(top)) == top;
  // Timestamp last, so the tree work above is not billed to the scope.
  const int64_t start = now_ns();
  // Inside an open operator the time since the scope's last call is that
  // operator's, billed when it ends.
  if (nested && !under_op) between_.bill_between(ts, ts->stack.back(), context, follows, start);
  ts->stack.push_back(Scope{node, start, 0, user_depth, context, follows, start, node, true});
  ts->innermost.store(node, std::memory_order_relaxed);
  return node;
}

int64_t PythonScopes::close_innermost(ThreadScopes* ts, int64_t* own) {
  int64_t end = now_ns();
  Scope s = ts->stack.back();
  ts->stack.pop_back();
  capture_.republish(ts);
  int64_t elapsed = end - s.start_ns;
  between_.bill_between(ts, s, -1, false, end);  // its last stretch, after its last call
  store_.tree.add(s.node, METRIC_CPU_TIME, elapsed - s.child_ns);
  store_.tree.add(s.node, METRIC_COUNT, 1);
  if (own != nullptr) *own = elapsed - s.child_ns;
  if (OpThread::Open* op = capture_.open_operator(ts)) {
    op->child_ns += elapsed;  // it ran inside that operator: billed once, there
  } else if (!ts->stack.empty()) {
    Scope& outer = ts->stack.back();
    outer.child_ns += elapsed;
    outer.last_ns = end;
    outer.last_context = s.context;
    outer.last_inside = s.inside;
  }
  return elapsed;
}

bool PythonScopes::is_backward_phase(int64_t node) {
  if (node == capture_.backward_root_locked()) return true;
  // The Python capture path's (no native capture made it): the root's child
  // of the backward phase frame.
  return store_.tree.parent(node) == 0 &&
         store_.tree.frames()[static_cast<size_t>(node)] ==
             store_.frames.intern(KIND_PHASE, "backward", "", 0, "", 0);
}

int64_t PythonScopes::exit(int64_t* own) {
  auto lock = store_.lock();
  ThreadScopes* ts = scopes_.current();
  if (ts->stack.empty()) return -1;
  return close_innermost(ts, own);
}

int64_t PythonScopes::top() {
  auto lock = store_.lock();
  ThreadScopes* ts = scopes_.current();
  return ts->stack.empty() ? 0 : ts->stack.back().node;
}

int64_t PythonScopes::depth() {
  auto lock = store_.lock();
  return static_cast<int64_t>(scopes_.current()->stack.size());
}

void PythonScopes::unwind(int64_t depth) {
  auto lock = store_.lock();
  ThreadScopes* ts = scopes_.current();
  if (depth < 0) depth = 0;
  while (static_cast<int64_t>(ts->stack.size()) > depth) close_innermost(ts);
}

void PythonScopes::module_call(bool entering) {
  if (!capture_.capturing()) return;
  ThreadScopes* ts = scopes_.current();
  if (ts->stack.empty()) return;
  if (capture_.open_operator(ts) != nullptr) return;  // inside an operator (a region): its time
  if (ts->calls.size() >= kMaxCalls) {
    ts->calls_lost = true;
    return;
  }
  ts->calls.push_back(ThreadScopes::Call{now_ns(), entering});
}

void PythonScopes::lend(uint64_t ident, int64_t start_ns, int64_t end_ns) {
  if (end_ns <= start_ns) return;
  auto lock = store_.lock();
  ThreadScopes* ts = scopes_.find(ident);
  if (ts == nullptr || ts->stack.empty()) return;
  if (ts->lent.size() >= kMaxLent) ts->lent.erase(ts->lent.begin());  // bounded: the oldest go
  ts->lent.emplace_back(start_ns, end_ns);
}

}  // namespace dc
