#include "scopes.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <new>

namespace dc {

thread_local ScopeRegistry::Cache ScopeRegistry::cache_;

static std::atomic<uint64_t> next_registry_id{1};

ScopeRegistry::ScopeRegistry() : id_(next_registry_id.fetch_add(1)) {}

namespace {
// The calling thread's kernel id and CPU clock, for the sampler. The clock id
// names the thread by its tid (pthread_getcpuclockid encodes it), so reading
// it after the thread ended fails with EINVAL instead of touching freed state.
void bind_to_calling_thread(ThreadScopes* s) {
  s->tid = static_cast<pid_t>(syscall(SYS_gettid));
  s->ident = PyThread_get_thread_ident();
  if (pthread_getcpuclockid(pthread_self(), &s->cpu_clock) != 0) s->tid = 0;  // unsampleable
  ++s->binding;
}
}  // namespace

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
    s->publish();
    bind_to_calling_thread(s);
  } else if (s->tid == 0) {
    bind_to_calling_thread(s);  // the survivor of a fork, met through another registry's cache
  }
  cache_ = Cache{id_, s};
  return s;
}

ThreadScopes* ScopeRegistry::find(uint64_t ident) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : map_)
    if (kv.second->tid != 0 && kv.second->ident == ident) return kv.second.get();
  return nullptr;
}

void ScopeRegistry::clear_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : map_) {
    kv.second->stack.clear();
    kv.second->lent.clear();
    kv.second->calls.clear();
    kv.second->publish();
  }
}

void ScopeRegistry::after_fork_child() {
  new (&mu_) std::mutex();
  for (auto& kv : map_) {
    kv.second->stack.clear();
    kv.second->lent.clear();
    kv.second->publish();
    kv.second->tid = 0;  // those threads do not exist here
  }
  // The forking thread survives under a new tid, with a fresh CPU clock.
  if (cache_.owner == id_ && cache_.scopes != nullptr) bind_to_calling_thread(cache_.scopes);
}

}  // namespace dc
