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
      api_(make_capture_api(this)),
      sampler_(PeriodicThread::Schedule::kFixedRate, [this] { sample_threads(); }) {
  register_collector(this);
}

Collector::~Collector() {
  unregister_collector(this);
  stop_threads();
  if (capturing()) capture_stop();
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
  // Inside an operator the native capture recorded, a scope nests under it.
  const int64_t inside = ts->innermost.load(std::memory_order_relaxed);
  int64_t base = parent >= 0 ? parent : (inside >= 0 ? inside : 0);
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
  const int64_t context = node;
  for (size_t i = 0; i < n; ++i) node = tree_.child(node, frames[i]);
  // A scope opened inside the enclosing one's subtree (not inside an open
  // operator) follows the last thing recorded there.
  const int64_t top = nested ? ts->stack.back().node : -1;
  const bool under_op = parent < 0 && inside >= 0 && inside != top;
  const bool follows = nested && !under_op && tree_.depth(base) >= tree_.depth(top) &&
                       tree_.ancestor(base, tree_.depth(top)) == top;
  // Timestamp last, so the tree work above is not billed to the scope.
  const int64_t start = now_ns();
  // Inside an open operator the time since the scope's last call is that
  // operator's, billed when it ends.
  if (nested && !under_op) bill_between(ts, ts->stack.back(), context, follows, start);
  ts->stack.push_back(Scope{node, start, 0, user_depth, context, follows, start, node, true});
  ts->innermost.store(node, std::memory_order_relaxed);
  return node;
}

int64_t Collector::close_innermost(ThreadScopes* ts) {
  int64_t end = now_ns();
  Scope s = ts->stack.back();
  ts->stack.pop_back();
  republish(ts);
  int64_t elapsed = end - s.start_ns;
  bill_between(ts, s, -1, false, end);  // its last stretch, after its last call
  tree_.add(s.node, METRIC_CPU_TIME, elapsed - s.child_ns);
  tree_.add(s.node, METRIC_COUNT, 1);
  if (OpThread::Open* op = open_operator(ts)) {
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
  sample_period_ns_ = std::max<int64_t>(1, static_cast<int64_t>(1e9 / (hz > 0 ? hz : 100.0)));
  ++sample_epoch_;  // CPU time run while no sampler ran is billed to nobody
  sampler_.start(std::chrono::nanoseconds(sample_period_ns_));
}

void Collector::sample_threads() {
  // CPU-time sampling: each thread earns one sample per period of CPU time it
  // ran (its kernel CPU clock, read from here at ~150 ns), placed where it is
  // at the tick; a thread whose clock did not move is idle and gets nothing.
  // No GIL and no Python state: the registry hands out what was recorded at
  // bind time, and the node each thread published.
  pending_.clear();
  const uint64_t epoch = sample_epoch_;
  const int64_t period = sample_period_ns_;
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
    pending_.push_back(PendingSample{node, n, t.tid});
  });
  if (pending_.empty()) return;
  if (!native_) {
    DC_HOT_LOCK;
    for (const PendingSample& p : pending_)
      if (tree_.valid_node(p.node)) tree_.add(p.node, METRIC_SAMPLES, p.samples);
    return;
  }
  for (const PendingSample& p : pending_) {
    // Unwound and looked up without hot_mu_: the target's handler may take up
    // to the timeout and dladdr a millisecond, and operator capture on every
    // thread waits on that lock.
    const int n = unwind_thread(p.tid, pcs_.data(), kMaxNativeFrames, kUnwindTimeoutNs);
    if (n >= 0) symbolizer_.below_interpreter(pcs_.data(), n, &native_syms_);
    DC_HOT_LOCK;
    if (!tree_.valid_node(p.node)) continue;
    int64_t node = p.node;
    if (n < 0) {
      ++dropped_samples_;  // the sample is still kept, at the thread's node
    } else {
      native_path_.clear();
      symbolizer_.intern(native_syms_, &native_path_);
      for (int64_t f : native_path_) node = tree_.child(node, f);
    }
    tree_.add(node, METRIC_SAMPLES, p.samples);
  }
}

void Collector::reset() {
  stop_threads();
  if (capturing()) capture_stop();  // node ids are about to be reused
  DC_HOT_LOCK;
  tree_.clear();
  scopes_.clear_all();
  monitor_.clear();
  dropped_samples_ = 0;
  sampler_.clear_missed();
}

void Collector::after_fork_child() {
  // A forked child (a DataLoader worker) records nothing for its parent.
  capturing_.store(false);
  new (&hot_mu_) std::mutex();
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
