// Python scopes: what enter/exit open and close on the calling thread (a
// phase, a step, a module call the Python path records), each a node with
// its own and its children's time, and the timestamps and lent spans that
// split the time between recorded things (between.h).
//
// Every method runs on the thread whose scopes it changes, with the GIL
// held, and takes the store's mutex: native operator capture on other
// threads adds to the same tree.
#pragma once

#include <cstdint>
#include <vector>

#include "between.h"
#include "opcapture.h"
#include "scopes.h"
#include "store.h"

namespace dc {

// enter()'s user_depth: the innermost open scope's (0 if none), without
// walking the stack.
constexpr int64_t kInheritUserDepth = -2;

class PythonScopes {
 public:
  PythonScopes(Store* store, ScopeRegistry* scopes, Between* between, OpCapture* capture)
      : store_(*store), scopes_(*scopes), between_(*between), capture_(*capture) {}
  PythonScopes(const PythonScopes&) = delete;
  PythonScopes& operator=(const PythonScopes&) = delete;

  // The calling thread's Python frames below its innermost scope's user
  // depth, outermost first.
  void python_frames(std::vector<int64_t>* out);
  // user_depth -1: measure it from the current stack; kInheritUserDepth: see above.
  int64_t enter(const int64_t* frames, size_t n, int64_t parent, bool capture, int64_t user_depth);
  // Returns the scope's inclusive ns; `own`, where given, gets what no
  // operator or scope inside it took (its exclusive ns).
  int64_t exit(int64_t* own = nullptr);
  int64_t top();
  int64_t depth();
  void unwind(int64_t depth);
  // A module call on the calling thread begins (entering) or ends:
  // timestamped, so the time between two recorded calls splits at module
  // boundaries (the native capture's global module hooks).
  void module_call(bool entering);
  // Thread `ident` waited in [start_ns, end_ns] for work the calling thread
  // recorded: that span leaves its time between recorded things.
  void lend(uint64_t ident, int64_t start_ns, int64_t end_ns);

 private:
  int64_t close_innermost(ThreadScopes* ts, int64_t* own = nullptr);
  // Whether `node` is the backward phase's (store's mutex held).
  bool is_backward_phase(int64_t node);

  Store& store_;
  ScopeRegistry& scopes_;
  Between& between_;
  OpCapture& capture_;
  std::vector<int64_t> scratch_;  // reused path buffer (GIL-protected)
};

}  // namespace dc
