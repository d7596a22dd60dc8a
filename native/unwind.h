// Native call stacks of other threads, for the comprehensive sampler.
//
// The sampler thread cannot unwind another thread's stack directly, so it
// sends the target a signal whose handler records backtrace() into one
// preallocated request slot, then waits for it a bounded time. Symbolisation
// (symindex.h, as dladdr would name them, + __cxa_demangle, cached by address)
// happens back on the sampler thread, never in the handler. Exported symbols
// only: an address none of them covers becomes an *unresolved* frame
// (library + offset) that dc_core/symbols.py names from the library's full
// ELF symbol table when the window's snapshot is read, off the hot path.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "frames.h"
#include "symindex.h"

namespace dc {

constexpr int kMaxNativeFrames = 256;

// Name of the frame for code outside any loaded object (JIT, anonymous
// mappings): nothing can resolve it later, so runs of them fold into one.
constexpr const char* kUnknownObject = "[unknown]";

// The demangled form of an Itanium C++ ABI name, or `name` itself when it is
// not one (C names, already demangled text).
std::string demangle(const char* name);

// Installs the signal handler once per process (idempotent). False if the
// handler could not be installed.
bool unwind_install();

// In a forked child: a request cut off by the fork must not block the next one.
void unwind_after_fork();

// Asks kernel thread `tid` for its backtrace (innermost first), waiting at
// most `timeout_ns`. Returns the frame count, or -1 on timeout / error.
int unwind_thread(pid_t tid, void** out, int max, int64_t timeout_ns);

// Turns raw backtraces into KIND_NATIVE frame ids, in two halves: `path`
// looks addresses up (in a SymbolIndex, dladdr where it cannot tell) and
// touches only the symbolizer's own index and cache, so the sampler runs it
// without the collector's lock; `intern` then turns the path into frame ids
// of that collector's frame table under it.
//
// Frame identities (kind native, detail ""):
//   named      name = demangled symbol, file = object path, line = 0
//   unresolved name = "<object basename>+0x<offset>", file = object path,
//              line = offset (> 0) of the address from the object's mapping
//              start (dladdr's dli_fbase). One frame per address: the address
//              is what dc_core/symbols.py resolves, after which frames of one
//              function merge into the named identity above. Like every
//              frame these outlive reset(); they grow with the distinct
//              unnamed instructions sampled (bounded by code size), not with
//              steps.
//   unknown    name = kUnknownObject, file = "", line = 0.
class Symbolizer {
 public:
  explicit Symbolizer(FrameTable* frames);

  struct Sym;

  // Replaces `out` with, outermost first, the native frames of `pcs` that lie
  // below (deeper than) the innermost interpreter frame, leaving out the
  // collector's own frames and the signal trampoline. Needs no lock; the
  // pointers stay valid for the symbolizer's life.
  void below_interpreter(void* const* pcs, int n, std::vector<Sym*>* out);

  // Appends the frame id of each of `path` to `out`, interning what is new
  // (under the lock that guards the frame table).
  void intern(const std::vector<Sym*>& path, std::vector<int64_t>* out);

  enum Class : int8_t { NORMAL, INTERPRETER, OWN, TRAMPOLINE };
  struct Sym {
    Class cls;
    bool fold;               // kUnknownObject: runs of them fold into one
    std::string name, file;  // the frame's identity (see above), until interned
    int64_t line;
    int64_t frame;  // -1 until interned
  };

 private:
  Sym& lookup(uintptr_t addr);

  FrameTable* frames_;
  std::string libpython_, executable_, own_;
  SymbolIndex index_;
  std::unordered_map<uintptr_t, Sym> cache_;
};

}  // namespace dc
