#include "collector.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

namespace dc {

namespace {
// Bounded wait for a target thread's signal handler; a thread that cannot
// run it in time (stopped, or inside a long uninterruptible call) loses its
// native frames for that sample rather than stalling every other thread.
constexpr int64_t kUnwindTimeoutNs = 2000000;
}  // namespace

Collector::Collector(int64_t max_nodes, int64_t max_samples)
    : frames_(&strings_),
      tree_(max_nodes),
      pystack_(&strings_, &frames_),
      symbolizer_(&frames_),
      pcs_(kMaxNativeFrames),
      monitor_(max_samples),
      sampler_([this] { sample_threads(); }) {
  register_collector(this);
}

Collector::~Collector() {
  unregister_collector(this);
  stop_threads();
}

void Collector::stop_threads() {
  sampler_.stop();  // first: its ticks read everything else
  monitor_.stop();
}

int64_t Collector::intern(int64_t kind, const std::string& name, const std::string& file,
                          int64_t line, const std::string& detail, int64_t flags) {
  DC_HOT_LOCK;
  return frames_.intern(kind, name, file, line, detail, flags);
}

void Collector::skip_prefix(const std::string& prefix) {
  DC_HOT_LOCK;
  pystack_.add_skip_prefix(prefix);
}

int64_t Collector::metric(const std::string& name, const std::string& unit) {
  DC_HOT_LOCK;
  return tree_.metric(name, unit);
}

int64_t Collector::path(int64_t parent, const int64_t* frames, size_t n) {
  DC_HOT_LOCK;
  int64_t node = parent;
  for (size_t i = 0; i < n; ++i) node = tree_.child(node, frames[i]);
  return node;
}

void Collector::python_frames(std::vector<int64_t>* out) {
  DC_HOT_LOCK;
  ThreadScopes* ts = scopes_.current();
  int64_t min_depth = ts->stack.empty() ? 0 : ts->stack.back().user_depth;
  pystack_.capture(PyEval_GetFrame(), min_depth, out);
}

int64_t Collector::enter(const int64_t* frames, size_t n, int64_t parent, bool capture,
                         int64_t user_depth) {
  DC_HOT_LOCK;
  ThreadScopes* ts = scopes_.current();
  const bool nested = !ts->stack.empty();
  int64_t base = parent >= 0 ? parent : (nested ? ts->stack.back().node : 0);
  int64_t min_depth = nested ? ts->stack.back().user_depth : 0;
  if (user_depth == kInheritUserDepth) user_depth = min_depth;
  // Without capture the walk is still needed unless the caller gave the user
  // depth: it is what later captures inside this scope are cut at.
  scratch_.clear();
  if (capture || user_depth < 0) {
    int64_t measured =
        pystack_.capture(PyEval_GetFrame(), min_depth, capture ? &scratch_ : nullptr);
    if (user_depth < 0) user_depth = measured;
  }
  int64_t node = base;
  for (int64_t f : scratch_) node = tree_.child(node, f);
  for (size_t i = 0; i < n; ++i) node = tree_.child(node, frames[i]);
  // Timestamp last, so the tree work above is not billed to the scope.
  ts->stack.push_back(Scope{node, now_ns(), 0, user_depth});
  return node;
}

int64_t Collector::close_innermost(ThreadScopes* ts) {
  int64_t end = now_ns();
  Scope s = ts->stack.back();
  ts->stack.pop_back();
  int64_t elapsed = end - s.start_ns;
  tree_.add(s.node, METRIC_CPU_TIME, elapsed - s.child_ns);
  tree_.add(s.node, METRIC_COUNT, 1);
  if (!ts->stack.empty()) ts->stack.back().child_ns += elapsed;
  return elapsed;
}

int64_t Collector::exit() {
  DC_HOT_LOCK;
  ThreadScopes* ts = scopes_.current();
  if (ts->stack.empty()) return -1;
  return close_innermost(ts);
}

int64_t Collector::top() {
  DC_HOT_LOCK;
  ThreadScopes* ts = scopes_.current();
  return ts->stack.empty() ? 0 : ts->stack.back().node;
}

int64_t Collector::depth() {
  DC_HOT_LOCK;
  return static_cast<int64_t>(scopes_.current()->stack.size());
}

void Collector::unwind(int64_t depth) {
  DC_HOT_LOCK;
  ThreadScopes* ts = scopes_.current();
  if (depth < 0) depth = 0;
  while (static_cast<int64_t>(ts->stack.size()) > depth) close_innermost(ts);
}

void Collector::start_sampler(double hz, bool native) {
  if (sampler_.running()) return;
  // Installing the handler and warming backtrace() happen here, on a Python
  // thread, never inside the sampler's tick.
  native_ = native && unwind_install();
  sampler_.start(hz);
}

void Collector::sample_threads() {
  DC_HOT_LOCK;
  PyThreadState* self = PyThreadState_Get();
  PyInterpreterState* interp = PyThreadState_GetInterpreter(self);
  for (PyThreadState* t = PyInterpreterState_ThreadHead(interp); t != nullptr;
       t = PyThreadState_Next(t)) {
    if (t == self) continue;  // the sampler's own, made by PyGILState_Ensure
    ThreadScopes* sc = scopes_.find(t);
    const bool scoped = sc != nullptr && !sc->stack.empty();
    PyFrameObject* top = PyThreadState_GetFrame(t);  // new reference
    if (top == nullptr) {
      if (PyErr_Occurred()) PyErr_Clear();
      if (!scoped) continue;  // a thread with nothing to attribute
    }
    scratch_.clear();
    pystack_.capture(top, scoped ? sc->stack.back().user_depth : 0, &scratch_);
    Py_XDECREF(top);
    if (native_) {
      int n = unwind_thread(static_cast<pid_t>(t->native_thread_id), pcs_.data(),
                            kMaxNativeFrames, kUnwindTimeoutNs);
      if (n < 0)
        ++dropped_samples_;  // the Python part of the sample is still kept
      else
        symbolizer_.below_interpreter(pcs_.data(), n, &scratch_);
    }
    int64_t node = scoped ? sc->stack.back().node : 0;
    for (int64_t f : scratch_) node = tree_.child(node, f);
    tree_.add(node, METRIC_SAMPLES, 1);
  }
}

void Collector::reset() {
  stop_threads();
  DC_HOT_LOCK;
  tree_.clear();
  scopes_.clear_all();
  monitor_.clear();
  dropped_samples_ = 0;
  sampler_.clear_missed();
}

void Collector::after_fork_child() {
  sampler_.after_fork_child();
  monitor_.after_fork_child();
  scopes_.after_fork_child();
}

// --- process-wide registry -----------------------------------------------

namespace {
std::mutex g_mu;
std::vector<Collector*>* g_all = new std::vector<Collector*>();  // leaked: used at exit
std::once_flag g_atfork_once;

void atfork_prepare() { g_mu.lock(); }
void atfork_parent() { g_mu.unlock(); }
void atfork_child() {
  // Only the forking thread exists here; the sampler and monitor threads do
  // not, so their objects are told to forget them instead of joining.
  for (Collector* c : *g_all) c->after_fork_child();
  unwind_after_fork();
  g_mu.unlock();
}
}  // namespace

void register_collector(Collector* c) {
  std::call_once(g_atfork_once,
                 [] { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); });
  std::lock_guard<std::mutex> lock(g_mu);
  g_all->push_back(c);
}

void unregister_collector(Collector* c) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_all->erase(std::remove(g_all->begin(), g_all->end(), c), g_all->end());
}

void stop_all_collectors() {
  std::vector<Collector*> all;
  {
    // Copied so the lock is not held while stop() releases the GIL.
    std::lock_guard<std::mutex> lock(g_mu);
    all = *g_all;
  }
  for (Collector* c : all) c->stop_threads();
}

}  // namespace dc
