#include "scopes.h"

#include <atomic>
#include <new>

namespace dc {

thread_local ScopeRegistry::Cache ScopeRegistry::cache_;

static std::atomic<uint64_t> next_registry_id{1};

ScopeRegistry::ScopeRegistry() : id_(next_registry_id.fetch_add(1)) {}

ThreadScopes* ScopeRegistry::bind(PyThreadState* ts) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<ThreadScopes>& slot = map_[ts];
  if (!slot) slot.reset(new ThreadScopes());
  ThreadScopes* s = slot.get();
  if (s->tstate != ts || s->tstate_id != PyThreadState_GetID(ts)) {
    // A thread state address reused by another thread: the old thread is
    // gone (or moved to another tstate), so its leftovers must not leak into
    // this thread's paths.
    s->tstate = ts;
    s->tstate_id = PyThreadState_GetID(ts);
    s->stack.clear();
  }
  cache_ = Cache{id_, s};
  return s;
}

ThreadScopes* ScopeRegistry::find(PyThreadState* ts) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(ts);
  if (it == map_.end()) return nullptr;
  ThreadScopes* s = it->second.get();
  return s->tstate_id == PyThreadState_GetID(ts) ? s : nullptr;
}

void ScopeRegistry::clear_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : map_) kv.second->stack.clear();
}

void ScopeRegistry::after_fork_child() {
  new (&mu_) std::mutex();
  for (auto& kv : map_) kv.second->stack.clear();
}

}  // namespace dc
