#include "collector.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

namespace dc {

Collector::Collector(int64_t max_nodes, int64_t max_samples)
    : store_(max_nodes),
      between_(&store_),
      capture_(&store_, &registry_, &between_, &memory_),
      scopes_(&store_, &registry_, &between_, &capture_),
      monitor_(max_samples),
      sampler_(&store_, &registry_) {
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
  auto lock = store_.lock();
  return store_.frames.intern(kind, name, file, line, detail, flags);
}

void Collector::skip_prefix(const std::string& prefix) {
  auto lock = store_.lock();
  store_.pystack.add_skip_prefix(prefix);
}

int64_t Collector::metric(const std::string& name, const std::string& unit) {
  auto lock = store_.lock();
  return store_.tree.metric(name, unit);
}

int64_t Collector::path(int64_t parent, const int64_t* frames, size_t n) {
  auto lock = store_.lock();
  int64_t node = parent;
  for (size_t i = 0; i < n; ++i) node = store_.tree.child(node, frames[i]);
  return node;
}

void Collector::reset() {
  stop_threads();
  if (capturing()) capture_stop();  // node ids are about to be reused
  auto lock = store_.lock();
  store_.tree.clear();
  registry_.clear_all();
  monitor_.clear();
  sampler_.clear();
}

void Collector::after_fork_child() {
  // A forked child (a DataLoader worker) records nothing for its parent.
  capture_.after_fork_child();
  new (&store_.mu) std::mutex();
  sampler_.after_fork_child();
  monitor_.after_fork_child();
  registry_.after_fork_child();
}

// --- process-wide registry -----------------------------------------------

namespace {
std::mutex g_mu;
// Leaked: used at exit. Allocation failure at load time ends the process either way.
// NOLINTNEXTLINE(bugprone-throwing-static-initialization)
std::vector<Collector*>* g_all = new std::vector<Collector*>();
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
