// Reading the calling thread's own Python frames without the GIL.
//
// A thread that called into native code (a framework operator) is parked in
// that call: its interpreter frames cannot change until it returns, so it may
// read them without the GIL. The public frame API cannot be used for this
// (PyEval_GetFrame needs the GIL and materialises frame objects), so the
// interpreter's frame records are read directly. Their layout is private and
// changes between minor versions: it is declared here only for the versions
// whose layout this project tests (CPython 3.11 and 3.12), and the capture
// path checks a walk against the public API at every start before trusting
// it. Elsewhere callers read frames with the GIL held.
#pragma once

#include <Python.h>

#include <cstdint>

namespace dc {

// One frame as read from the interpreter: its code object, the address of its
// current instruction (both stable while the frame is live) and, for frames of
// registered "context" code (a module's call method), its first local.
struct RawFrame {
  PyCodeObject* code;
  const void* instr;
  PyObject* self;
};

// Whether this build knows the interpreter's frame layout.
constexpr bool walk_compiled() {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && !defined(Py_GIL_DISABLED)
  return true;
#else
  return false;
#endif
}

// The calling thread's thread state, read without the GIL (null on a thread
// that never ran Python).
inline PyThreadState* own_thread_state() { return PyGILState_GetThisThreadState(); }

// Walks `ts`'s frames (ts must be the calling thread's, parked in a native
// call, or the GIL must be held) innermost first into `out`; frames of code
// object `context_code` get their first local in `self` (cells unwrapped).
// Returns the number of frames written, or -1 if the stack is deeper than
// `max` or the layout is unknown.
int walk_frames(PyThreadState* ts, PyCodeObject* context_code, RawFrame* out, int max);

// Folds one frame into a running path hash. The words are multiplied apart
// (independent of `h`, so the CPU overlaps them with the walk's loads) and
// folded in with a rotate-xor: the chain through `h` is two cycles a frame.
inline uint64_t fold_frame(uint64_t h, const RawFrame& f) {
  uint64_t x = reinterpret_cast<uintptr_t>(f.code) * 0x9E3779B97F4A7C15ull +
               reinterpret_cast<uintptr_t>(f.instr) * 0xC2B2AE3D27D4EB4Full +
               reinterpret_cast<uintptr_t>(f.self);
  return ((h << 7) | (h >> 57)) ^ x;
}

// The frames walk_frames would write, folded into `*h` (fold_frame, innermost
// first) instead of stored: one pass over the chain, no writes. Returns the
// number of frames, or -1 if deeper than `max` or the layout is unknown.
int hash_frames(PyThreadState* ts, PyCodeObject* context_code, int max, uint64_t* h);

// Byte offset of `instr` in `code`, as PyFrame_GetLasti reports it.
int frame_lasti(PyCodeObject* code, const void* instr);

}  // namespace dc
