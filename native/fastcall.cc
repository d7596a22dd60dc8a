#include "fastcall.h"

#include <string>
#include <vector>

#include "collector.h"

namespace py = pybind11;

namespace dc {

namespace {

// The C++ object behind `self`. pybind11 keeps it in simple_value_holder[0]
// for a class like ours (one C++ base, default holder); anything else goes
// through the general, slower cast.
Collector* self_of(PyObject* self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  Collector* c = inst->simple_layout
                     ? static_cast<Collector*>(inst->simple_value_holder[0])
                     : py::handle(self).cast<Collector*>();
  if (c == nullptr) PyErr_SetString(PyExc_TypeError, "Collector.__init__ was not called");
  return c;
}

bool read_frames(PyObject* seq, const Collector& c, std::vector<int64_t>* out) {
  out->clear();
  PyObject* fast = PySequence_Fast(seq, "frames must be a sequence of ints");
  if (fast == nullptr) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    long long v = PyLong_AsLongLong(items[i]);
    if (v == -1 && PyErr_Occurred()) {
      ok = false;
    } else if (!c.valid_frame(v)) {
      PyErr_SetString(PyExc_IndexError, ("no frame " + std::to_string(v)).c_str());
      ok = false;
    } else {
      out->push_back(v);
    }
  }
  Py_DECREF(fast);
  return ok;
}

// enter(frames, parent=-1, capture=False, user_depth=-1)
PyObject* fast_enter(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"frames", "parent", "capture", "user_depth"};
  PyObject* given[4] = {nullptr, nullptr, nullptr, nullptr};
  if (nargs > 4) {
    PyErr_SetString(PyExc_TypeError, "enter() takes at most 4 arguments");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) given[i] = args[i];
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    int slot = -1;
    for (int j = 0; key != nullptr && j < 4; ++j)
      if (std::string(key) == names[j]) slot = j;
    if (slot < 0 || given[slot] != nullptr) {
      PyErr_Format(PyExc_TypeError, "enter() got an unexpected or repeated argument %s",
                   key ? key : "?");
      return nullptr;
    }
    given[slot] = args[nargs + k];
  }
  if (given[0] == nullptr) {
    PyErr_SetString(PyExc_TypeError, "enter() missing required argument 'frames'");
    return nullptr;
  }
  Collector* c = self_of(self);
  if (c == nullptr) return nullptr;
  long long parent = given[1] ? PyLong_AsLongLong(given[1]) : -1;
  if (parent == -1 && PyErr_Occurred()) return nullptr;
  int capture = given[2] ? PyObject_IsTrue(given[2]) : 0;
  if (capture < 0) return nullptr;
  long long user_depth = given[3] ? PyLong_AsLongLong(given[3]) : -1;
  if (user_depth == -1 && PyErr_Occurred()) return nullptr;
  if (parent >= 0 && !c->tree().valid_node(parent)) {
    PyErr_SetString(PyExc_IndexError, ("no node " + std::to_string(parent)).c_str());
    return nullptr;
  }
  static std::vector<int64_t> ids;  // GIL-protected scratch
  if (!read_frames(given[0], *c, &ids)) return nullptr;
  return PyLong_FromLongLong(c->enter(ids.data(), ids.size(), parent, capture != 0, user_depth));
}

PyObject* fast_exit(PyObject* self, PyObject* const*, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs != 0 || (kwnames && PyTuple_GET_SIZE(kwnames) != 0)) {
    PyErr_SetString(PyExc_TypeError, "exit() takes no arguments");
    return nullptr;
  }
  Collector* c = self_of(self);
  return c ? PyLong_FromLongLong(c->exit()) : nullptr;
}

PyMethodDef enter_def = {
    "enter", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fast_enter)),
    METH_FASTCALL | METH_KEYWORDS,
    "enter(frames, parent=-1, capture=False, user_depth=-1) -> int\n\n"
    "Open a scope on this thread and return its node (see _native.pyi)."};
PyMethodDef exit_def = {
    "exit", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fast_exit)),
    METH_FASTCALL | METH_KEYWORDS,
    "exit() -> int\n\nClose this thread's innermost scope; its inclusive ns, or -1."};

}  // namespace

void install_fastcall(py::handle cls) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  for (PyMethodDef* def : {&enter_def, &exit_def}) {
    py::object descr = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, def));
    if (!descr) throw py::error_already_set();
    py::setattr(cls, def->ml_name, descr);
  }
}

}  // namespace dc
