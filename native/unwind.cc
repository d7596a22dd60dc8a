#include "unwind.h"

#include <Python.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dc {

namespace {

// One request at a time: the sampler thread is the only requester, and it
// serialises targets. States move IDLE -> REQUESTED (sampler) -> WRITING
// (handler, by CAS, so a late handler cannot race a timed-out request) ->
// DONE (handler) -> IDLE (sampler).
enum State : int { IDLE, REQUESTED, WRITING, DONE };

struct Request {
  // Also a futex word: the sampler sleeps on it, the handler wakes it.
  std::atomic<int> state{IDLE};
  std::atomic<pid_t> tid{0};
  int n = 0;
  void* pcs[kMaxNativeFrames];
};

Request g_request;

// The request's state word as a futex (a raw system call: async-signal-safe).
long futex(int op, int value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<int*>(&g_request.state), op, value, timeout, nullptr,
                 0);
}

int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

struct sigaction g_previous;
std::once_flag g_install_once;
bool g_installed = false;
// SIGURG, whose default action is to ignore it: code that resets every
// signal it saved to what Python recorded (Lightning's trainer does so when
// fit ends, SIG_DFL for this one) then drops a request instead of killing
// the process, as SIGPROF's default did.
constexpr int kSignal = SIGURG;

void on_signal(int sig, siginfo_t* info, void* ctx) {
  int saved_errno = errno;
  pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  int expected = REQUESTED;
  if (g_request.tid.load(std::memory_order_acquire) == self &&
      g_request.state.compare_exchange_strong(expected, WRITING)) {
    g_request.n = backtrace(g_request.pcs, kMaxNativeFrames);
    g_request.state.store(DONE, std::memory_order_release);
    futex(FUTEX_WAKE_PRIVATE, 1, nullptr);
  } else if (g_previous.sa_flags & SA_SIGINFO) {
    // Not ours (e.g. an itimer profiler in the same process): pass it on.
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(sig, info, ctx);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  }
  errno = saved_errno;
}

// Installs our handler, keeping what it replaces in `previous` (if given).
bool install_ours(struct sigaction* previous) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_signal;
  // SA_RESTART: the target's interrupted system calls resume by themselves.
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  return sigaction(kSignal, &sa, previous) == 0;
}

// Whether a request may be sent: our handler is in place, or nobody's is
// (SIG_DFL, SIG_IGN: someone reset it) and ours goes back. Another handler
// put over ours is left alone, and gets none of our requests.
bool handler_in_place() {
  struct sigaction current;
  if (sigaction(kSignal, nullptr, &current) != 0) return false;
  if ((current.sa_flags & SA_SIGINFO) != 0) return current.sa_sigaction == on_signal;
  if (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN) return false;
  return install_ours(nullptr);
}

}  // namespace

bool unwind_install() {
  std::call_once(g_install_once, [] {
    // backtrace() loads libgcc_s and takes locks on its first call; doing
    // that inside a signal handler could deadlock, so do it here first.
    void* warm[4];
    backtrace(warm, 4);
    // The handler stays installed for the life of the process: a request
    // that times out may still be delivered after the sampler stopped.
    g_installed = install_ours(&g_previous);
  });
  return g_installed;
}

void unwind_after_fork() { g_request.state.store(IDLE); }

int unwind_thread(pid_t tid, void** out, int max, int64_t timeout_ns) {
  if (!g_installed || !handler_in_place()) return -1;
  g_request.n = 0;
  g_request.tid.store(tid, std::memory_order_release);
  g_request.state.store(REQUESTED, std::memory_order_release);
  if (syscall(SYS_tgkill, getpid(), tid, kSignal) != 0) {
    g_request.state.store(IDLE);
    return -1;
  }
  // Sleep, not spin: on a host with few cores a spinning (or yielding)
  // sampler takes the core the target needs to run its handler, and comes
  // back a scheduler slice late (4 ms on a 250 Hz kernel) once it yields it.
  const int64_t deadline = mono_ns() + timeout_ns;
  for (int state; (state = g_request.state.load(std::memory_order_acquire)) != DONE;) {
    const int64_t left = deadline - mono_ns();
    if (left <= 0 && state == REQUESTED) {
      int expected = REQUESTED;
      if (g_request.state.compare_exchange_strong(expected, IDLE)) return -1;
      continue;  // the handler began meanwhile: it finishes in microseconds
    }
    // A handler already writing is waited for without a bound.
    timespec wait{0, 0};
    if (state == REQUESTED) wait = timespec{left / 1000000000, left % 1000000000};
    futex(FUTEX_WAIT_PRIVATE, state, state == REQUESTED ? &wait : nullptr);
  }
  int n = g_request.n < max ? g_request.n : max;
  std::memcpy(static_cast<void*>(out), static_cast<const void*>(g_request.pcs),
              sizeof(void*) * static_cast<size_t>(n));
  g_request.state.store(IDLE, std::memory_order_release);
  return n;
}

std::string demangle(const char* name) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && demangled != nullptr) ? demangled : name;
  std::free(demangled);
  return out;
}

static std::string object_of(const void* addr) {
  Dl_info info;
  if (addr != nullptr && dladdr(addr, &info) != 0 && info.dli_fname != nullptr)
    return info.dli_fname;
  return std::string();
}

Symbolizer::Symbolizer(FrameTable* frames) : frames_(frames) {
  libpython_ = object_of(reinterpret_cast<const void*>(&PyEval_GetFrame));
  executable_ = object_of(dlsym(RTLD_DEFAULT, "main"));
  own_ = object_of(reinterpret_cast<const void*>(&unwind_thread));
}

Symbolizer::Sym& Symbolizer::lookup(uintptr_t addr) {
  auto it = cache_.find(addr);
  if (it != cache_.end()) return it->second;
  std::string file, name;
  uintptr_t offset = 0;
  SymbolIndex::Hit hit;
  switch (index_.lookup(addr, &hit)) {
    case SymbolIndex::FOUND:
      name = demangle(hit.name);
      [[fallthrough]];
    case SymbolIndex::NO_NAME:
      file = *hit.file;
      offset = addr - hit.base;
      break;
    case SymbolIndex::UNKNOWN:
      break;
    case SymbolIndex::ASK: {
      Dl_info info;
      std::memset(&info, 0, sizeof(info));
      if (dladdr(reinterpret_cast<void*>(addr), &info) != 0) {
        if (info.dli_fname != nullptr) file = info.dli_fname;
        if (info.dli_sname != nullptr) name = demangle(info.dli_sname);
        offset = addr - reinterpret_cast<uintptr_t>(info.dli_fbase);
      }
      break;
    }
  }
  Sym sym{NORMAL, false, std::string(), std::string(), 0, -1};
  if (name == "__restore_rt")
    sym.cls = TRAMPOLINE;
  else if (!file.empty() && file == own_)
    sym.cls = OWN;
  else if ((!file.empty() && (file == libpython_ || file == executable_)) ||
           name.rfind("_PyEval_EvalFrame", 0) == 0)
    sym.cls = INTERPRETER;
  if (sym.cls == NORMAL) {
    if (!name.empty()) {
      sym.name = std::move(name);
      sym.file = std::move(file);
    } else if (!file.empty() && offset > 0) {
      // No exported symbol covers it (static and hidden functions): record
      // where it is; the snapshot reader names it from the full symbol table.
      char hex[2 + 2 * sizeof(uintptr_t) + 1];
      std::snprintf(hex, sizeof(hex), "0x%" PRIxPTR, offset);
      const size_t slash = file.rfind('/');
      sym.name = (slash == std::string::npos ? file : file.substr(slash + 1)) + "+" + hex;
      sym.file = std::move(file);
      sym.line = static_cast<int64_t>(offset);
    } else {
      sym.fold = true;
      sym.name = kUnknownObject;
    }
  }
  return cache_.emplace(addr, std::move(sym)).first->second;
}

void Symbolizer::intern(const std::vector<Sym*>& path, std::vector<int64_t>* out) {
  for (Sym* s : path) {
    if (s->frame < 0) s->frame = frames_->intern(KIND_NATIVE, s->name, s->file, s->line, "", 0);
    out->push_back(s->frame);
  }
}

void Symbolizer::below_interpreter(void* const* pcs, int n, std::vector<Sym*>* out) {
  out->clear();
  // Frames above the trampoline are the handler's own; the frame right after
  // it is the interrupted instruction itself, every later one a return
  // address, which is looked up one byte back to land inside the call.
  int start = 0;
  while (start < n && lookup(reinterpret_cast<uintptr_t>(pcs[start]) - 1).cls == OWN) ++start;
  // libc's __restore_rt is usually not an exported symbol, so it is found by
  // position (right after the handler) as well as by name.
  if (start < n && (start > 0 || lookup(reinterpret_cast<uintptr_t>(pcs[start])).cls == TRAMPOLINE))
    ++start;
  int end = -1;  // index of the innermost interpreter frame
  for (int i = start; i < n; ++i) {
    uintptr_t a = reinterpret_cast<uintptr_t>(pcs[i]) - (i == start ? 0 : 1);
    if (lookup(a).cls == INTERPRETER) {
      end = i;
      break;
    }
  }
  if (end < 0) return;  // unwinding lost the interpreter: nothing reliable
  for (int i = end - 1; i >= start; --i) {
    uintptr_t a = reinterpret_cast<uintptr_t>(pcs[i]) - (i == start ? 0 : 1);
    Sym& s = lookup(a);
    if (s.cls != NORMAL) continue;
    // Code outside any object cannot be told apart later: a run is one node.
    if (s.fold && !out->empty() && out->back()->fold) continue;
    out->push_back(&s);
  }
}

}  // namespace dc
