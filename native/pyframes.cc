#include "pyframes.h"

namespace dc {

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && !defined(Py_GIL_DISABLED)

namespace {

// CPython's _PyInterpreterFrame (Include/internal/pycore_frame.h) for the
// versions read here, declared because the internal headers do not compile as
// C++. The capture path checks a walk against the public API before use.
#if PY_VERSION_HEX < 0x030C0000
struct Frame {  // 3.11
  PyFunctionObject* f_func;
  PyObject* f_globals;
  PyObject* f_builtins;
  PyObject* f_locals;
  PyCodeObject* f_code;
  PyFrameObject* frame_obj;
  Frame* previous;
  _Py_CODEUNIT* prev_instr;
  int stacktop;
  bool is_entry;
  char owner;
  PyObject* localsplus[1];
};
#else
struct Frame {  // 3.12
  PyCodeObject* f_code;
  Frame* previous;
  PyObject* f_funcobj;
  PyObject* f_globals;
  PyObject* f_builtins;
  PyObject* f_locals;
  PyFrameObject* frame_obj;
  _Py_CODEUNIT* prev_instr;
  int stacktop;
  uint16_t return_offset;
  char owner;
  PyObject* localsplus[1];
};
#endif

constexpr char kOwnedByGenerator = 1;
constexpr char kOwnedByCStack = 3;  // 3.12's entry shims: not frames of the program

inline _Py_CODEUNIT* code_start(PyCodeObject* code) {
  return reinterpret_cast<_Py_CODEUNIT*>(code->co_code_adaptive);
}

// A frame being set up has not run its first traceable instruction; the public
// API (PyFrame_GetBack) skips such frames, and so does this walk.
inline bool incomplete(const Frame* f) {
  if (f->owner == kOwnedByCStack) return true;
  return f->owner != kOwnedByGenerator &&
         f->prev_instr < code_start(f->f_code) + f->f_code->_co_firsttraceable;
}

// Calls visit(RawFrame) for each complete frame of `ts`, innermost first;
// returns the number visited, or -1 past `max`. Only the innermost frame can
// be incomplete (an outer frame is inside a call, past its first traceable
// instruction), so only it pays the code-object read; 3.12's entry shims are
// marked in the frame itself.
template <typename Visit>
inline int for_each_frame(PyThreadState* ts, PyCodeObject* context_code, int max, Visit visit) {
  if (ts == nullptr || ts->cframe == nullptr) return 0;
  const Frame* f = reinterpret_cast<const Frame*>(ts->cframe->current_frame);
  if (f != nullptr && incomplete(f)) f = f->previous;
  int n = 0;
  for (; f != nullptr; f = f->previous) {
    if (f->owner == kOwnedByCStack) continue;
    if (n == max) return -1;
    PyObject* self = nullptr;
    if (f->f_code == context_code) {
      self = f->localsplus[0];
      if (self != nullptr && Py_IS_TYPE(self, &PyCell_Type)) self = PyCell_GET(self);
    }
    visit(RawFrame{f->f_code, f->prev_instr, self});
    ++n;
  }
  return n;
}

}  // namespace

int walk_frames(PyThreadState* ts, PyCodeObject* context_code, RawFrame* out, int max) {
  int n = 0;
  return for_each_frame(ts, context_code, max, [&](const RawFrame& f) { out[n++] = f; });
}

int hash_frames(PyThreadState* ts, PyCodeObject* context_code, int max, uint64_t* h) {
  uint64_t acc = *h;
  const int n =
      for_each_frame(ts, context_code, max, [&](const RawFrame& f) { acc = fold_frame(acc, f); });
  *h = acc;
  return n;
}

int frame_lasti(PyCodeObject* code, const void* instr) {
  auto d = static_cast<const _Py_CODEUNIT*>(instr) - code_start(code);
  return d < 0 ? -1 : static_cast<int>(d * static_cast<int>(sizeof(_Py_CODEUNIT)));
}

#else

int walk_frames(PyThreadState*, PyCodeObject*, RawFrame*, int) { return -1; }
int hash_frames(PyThreadState*, PyCodeObject*, int, uint64_t*) { return -1; }
int frame_lasti(PyCodeObject*, const void*) { return -1; }

#endif

}  // namespace dc
