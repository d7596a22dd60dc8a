// Per-thread scope stacks and the registry that lets the sampler read other
// threads' innermost scope.
//
// Locking: every caller holds the GIL (pybind methods, and the sampler takes
// it before sampling), and the GIL is what makes the stacks safe to share.
// The registry's mutex only guards the map itself (insertions are rare, and
// the fork handler must be able to rebuild it); the hot path does not take it
// once a thread's stack is cached in a thread_local.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dc {

struct Scope {
  int64_t node;
  int64_t start_ns;
  int64_t child_ns;    // inclusive time of nested scopes, for exclusive time
  int64_t user_depth;  // Python user depth at entry
};

struct ThreadScopes {
  PyThreadState* tstate = nullptr;
  // PyThreadState_GetID of the bound thread state: unique for the life of the
  // interpreter, unlike the tstate address or pthread_t, which glibc and
  // CPython both recycle as soon as a thread ends.
  uint64_t tstate_id = 0;
  std::vector<Scope> stack;
};

class ScopeRegistry {
 public:
  ScopeRegistry();

  // The calling thread's stack (GIL held). Fast path: a thread_local cache.
  ThreadScopes* current() {
    PyThreadState* ts = PyThreadState_Get();
    Cache& c = cache_;
    if (c.owner == id_ && c.scopes->tstate == ts && c.scopes->tstate_id == PyThreadState_GetID(ts))
      return c.scopes;
    return bind(ts);
  }

  // Another thread's stack, or null if it never opened a scope (GIL held).
  ThreadScopes* find(PyThreadState* ts);

  // Empties every thread's stack; the objects stay, cached pointers stay valid.
  void clear_all();

  // In a forked child only the forking thread exists and the mutex may have
  // been held by a thread that is gone: rebuild the mutex, empty the stacks.
  void after_fork_child();

 private:
  struct Cache {
    uint64_t owner = 0;
    ThreadScopes* scopes = nullptr;
  };
  ThreadScopes* bind(PyThreadState* ts);

  static thread_local Cache cache_;
  uint64_t id_;  // unique per registry, never reused, so stale caches miss
  std::mutex mu_;
  std::unordered_map<PyThreadState*, std::unique_ptr<ThreadScopes>> map_;
};

}  // namespace dc
