// Per-thread scope stacks, and the registry through which the sampler reaches
// every thread without the GIL.
//
// Locking: a thread's `stack` is its own thread's (Python scopes change it
// with the GIL held, native operator capture reads it without; reset and the
// fork handler empty them all). The sampler never reads it: it reads
// `innermost`, an atomic each thread publishes, and the thread's CPU clock.
// The registry's mutex guards the map and each entry's binding (tid, CPU
// clock); it is taken at bind time (rare: the hot path hits a thread_local
// cache) and once per sampler tick. Lock order: the store's mutex (store.h)
// before the registry's (enter binds under the store's), so whoever holds the
// registry's mutex takes no other lock.
#pragma once

#include <Python.h>
#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dc {

struct Scope {
  int64_t node;
  int64_t start_ns;
  int64_t child_ns;    // time billed below it (nested scopes, operators, the time between them)
  int64_t user_depth;  // Python user depth at entry
  int64_t context;     // the node its own frames hang from: where it was opened
  bool inside;         // that node is in the enclosing scope's subtree
  // The last thing recorded directly inside it (an operator or a nested
  // scope): when it ended and where it was called from. The time from there
  // to the next one was spent running the Python code between the two.
  int64_t last_ns;
  int64_t last_context;
  bool last_inside;
};

// What the sampler remembers of a thread between ticks; only the sampler
// thread reads or writes it.
struct SampledCpu {
  uint64_t epoch = 0;     // the sampler run these readings belong to
  uint64_t binding = 0;   // the ThreadScopes binding they were read under
  int64_t cpu_ns = 0;     // the thread's CPU clock at the previous tick
  int64_t credit_ns = 0;  // CPU time run but not billed yet (under one period)
};

struct ThreadScopes {
  PyThreadState* tstate = nullptr;
  // PyThreadState_GetID of the bound thread state: unique for the life of the
  // interpreter, unlike the tstate address or pthread_t, which glibc and
  // CPython both recycle as soon as a thread ends.
  uint64_t tstate_id = 0;
  std::vector<Scope> stack;
  // threading.get_ident() of the bound thread, for another thread to name it.
  uint64_t ident = 0;
  // Module calls entered (+) and left (-) since the last thing recorded in
  // the innermost scope, timestamped: where the time between two recorded
  // calls splits (its own thread's; the native capture's module hooks).
  struct Call {
    int64_t ns;
    bool enter;
  };
  std::vector<Call> calls;
  bool calls_lost = false;  // more than the cap came between two recorded things
  // Spans of this thread's time another thread recorded the work of (it
  // waited for it): taken out of this thread's time between recorded things.
  // Guarded by the store's mutex (store.h), not by this thread.
  std::vector<std::pair<int64_t, int64_t>> lent;
  // The node this thread is in now (its innermost open operator or scope; -1
  // when none), published for the sampler, which reads it without the GIL.
  std::atomic<int64_t> innermost{-1};
  void publish() {
    innermost.store(stack.empty() ? -1 : stack.back().node, std::memory_order_relaxed);
  }

  // Recorded at bind, on the thread itself, so the sampler never touches the
  // thread state (freed once its thread ends). Guarded by the registry's mutex.
  pid_t tid = 0;            // kernel thread id; 0: not bound, or found gone
  clockid_t cpu_clock = 0;  // its CPU-time clock; reads fail once it has ended
  uint64_t binding = 0;     // bumped at every (re)bind
  SampledCpu sampled;
};

class ScopeRegistry {
 public:
  ScopeRegistry();

  // The calling thread's stack (GIL held). Fast path: a thread_local cache.
  ThreadScopes* current() { return of(PyThreadState_Get()); }

  // The stack of thread state `ts`, which must be the calling thread's own;
  // safe without the GIL (the native capture path calls it from operators).
  ThreadScopes* of(PyThreadState* ts) {
    Cache& c = cache_;
    if (c.owner == id_ && c.scopes->tstate == ts && c.scopes->tstate_id == PyThreadState_GetID(ts))
      return c.scopes;
    return bind(ts);
  }

  // Calls `f(ThreadScopes&)` for every thread bound and not found gone, under
  // the registry's mutex, from any thread, without the GIL. `f` may read the
  // binding, mark the thread gone (tid = 0) and use `sampled`; it must take
  // no lock (see the lock order above).
  template <class F>
  void for_each_bound(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : map_)
      if (kv.second->tid != 0) f(*kv.second);
  }

  // The bound thread whose threading.get_ident() is `ident`, or null; from
  // any thread (the entry's stack is still its own thread's).
  ThreadScopes* find(uint64_t ident);

  // Empties every thread's stack; the objects stay, cached pointers stay valid.
  void clear_all();

  // In a forked child only the forking thread exists and the mutex may have
  // been held by a thread that is gone: rebuild the mutex, empty the stacks,
  // forget every other thread and rebind the survivor to its new tid.
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
