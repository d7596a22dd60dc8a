// Python call-path capture through the public frame API only
// (PyFrame_GetBack / PyFrame_GetCode / PyFrame_GetLasti / PyFrame_GetLineNumber),
// with two caches so the steady state is one hash probe per frame:
//   code object          -> interned file / qualname strings and the skip flag
//   (code object, lasti) -> frame id (the line is computed once, on a miss)
// Cached code objects are held by a strong reference so their addresses are
// never reused by another code object while they are keys.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flatmap.h"
#include "frames.h"

namespace dc {

// The frames of a stack, innermost first, walked with the public API before
// the store's lock is taken: PyFrame_GetBack may make a frame object, and that
// allocation may run the GC, whose finalizers run any code. One that records
// something would take the lock its own thread holds; one that releases the
// GIL lets in another thread, which waits on that lock while holding the GIL.
// Kept on the caller's stack up to 128 frames, so walks that nest (a
// finalizer's inside another's) share nothing.
class FrameWalk {
 public:
  explicit FrameWalk(PyFrameObject* top);  // borrowed, may be null
  FrameWalk(const FrameWalk&) = delete;
  FrameWalk& operator=(const FrameWalk&) = delete;

  size_t size() const { return n_; }
  PyFrameObject* operator[](size_t i) const {
    return i < kInline ? inline_[i] : more_[i - kInline];
  }

 private:
  static constexpr size_t kInline = 128;
  PyFrameObject* inline_[kInline];
  std::vector<PyFrameObject*> more_;
  size_t n_ = 0;
};

class PyStack {
 public:
  PyStack(StringTable* strings, FrameTable* frames);
  ~PyStack();  // releases the cached code objects; needs the GIL
  PyStack(const PyStack&) = delete;
  PyStack& operator=(const PyStack&) = delete;

  void add_skip_prefix(const std::string& prefix);

  // Appends to `out`, outermost first, the ids of the non-skipped frames of
  // `walk` whose depth (outermost = 1) is greater than `min_depth`. Returns
  // the stack's user depth: the depth of its innermost non-skipped frame, 0
  // if none. `out` may be null when only the user depth is wanted. Runs no
  // Python code and allocates no Python object (store's lock, GIL held).
  int64_t capture(const FrameWalk& walk, int64_t min_depth, std::vector<int64_t>* out);

  struct Resolved {
    int64_t frame;
    bool skip;
  };
  // The frame of `code` at byte offset `lasti` (GIL held): what capture()
  // records for a frame in that state, shared with the native capture path.
  Resolved resolve_code(PyCodeObject* code, int lasti);

 private:
  struct CodeInfo {
    PyObject* code;  // strong reference
    int64_t file, name;
    bool skip;
  };

  Resolved resolve(PyFrameObject* f);
  int64_t code_index(PyCodeObject* code);
  bool skipped(const std::string& file) const;

  StringTable* strings_;
  FrameTable* frames_;
  std::vector<std::string> skip_prefixes_;
  std::vector<CodeInfo> codes_;
  PairMap code_ids_;  // (code, 0) -> index into codes_
  PairMap lines_;     // (code, lasti) -> code index << 32 | frame id
  // Reused between captures so a capture allocates nothing in steady state.
  std::vector<Resolved> resolved_;
};

}  // namespace dc
