#include "args.h"

#include <cstring>
#include <string>

#include "collector.h"

namespace dc {

bool bind_args(const char* fn, const char* const* names, int n, int required, PyObject* const* args,
               Py_ssize_t nargs, PyObject* kwnames, PyObject** given) {
  for (int i = 0; i < n; ++i) given[i] = nullptr;
  if (nargs > n) {
    if (n == 0)
      PyErr_Format(PyExc_TypeError, "%s() takes no arguments", fn);
    else
      PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments", fn, n);
    return false;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) given[i] = args[i];
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    int slot = -1;
    for (int j = 0; key != nullptr && j < n; ++j)
      if (std::strcmp(key, names[j]) == 0) slot = j;
    if (slot < 0 || given[slot] != nullptr) {
      if (key == nullptr) PyErr_Clear();  // a key that is not UTF-8 reads as "?"
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected or repeated argument %s", fn,
                   key ? key : "?");
      return false;
    }
    given[slot] = args[nargs + k];
  }
  for (int i = 0; i < required; ++i) {
    if (given[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
      return false;
    }
  }
  return true;
}

bool check_node(const Collector& c, int64_t node) {
  if (c.tree().valid_node(node)) return true;
  PyErr_SetString(PyExc_IndexError, ("no node " + std::to_string(node)).c_str());
  return false;
}

bool check_frame(const Collector& c, int64_t frame) {
  if (c.valid_frame(frame)) return true;
  PyErr_SetString(PyExc_IndexError, ("no frame " + std::to_string(frame)).c_str());
  return false;
}

bool read_frames(PyObject* seq, const Collector& c, std::vector<int64_t>* out) {
  out->clear();
  PyObject* fast = PySequence_Fast(seq, "frames must be a sequence of ints");
  if (fast == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    const long long v = PyLong_AsLongLong(items[i]);
    ok = !(v == -1 && PyErr_Occurred()) && check_frame(c, v);
    if (ok) out->push_back(v);
  }
  Py_DECREF(fast);
  return ok;
}

}  // namespace dc
