#include "fastcall.h"

#include <vector>

#include "args.h"
#include "collector.h"

namespace py = pybind11;

namespace dc {

namespace {

// The C++ object behind `self`. pybind11 keeps it in simple_value_holder[0]
// for a class like ours (one C++ base, default holder); anything else goes
// through the general, slower cast.
Collector* self_of(PyObject* self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  Collector* c = inst->simple_layout ? static_cast<Collector*>(inst->simple_value_holder[0])
                                     : py::handle(self).cast<Collector*>();
  if (c == nullptr) PyErr_SetString(PyExc_TypeError, "Collector.__init__ was not called");
  return c;
}

// enter(frames, parent=-1, capture=False, user_depth=-1)
PyObject* fast_enter(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"frames", "parent", "capture", "user_depth"};
  PyObject* given[4];
  if (!bind_args("enter", names, 4, 1, args, nargs, kwnames, given)) return nullptr;
  Collector* c = self_of(self);
  if (c == nullptr) return nullptr;
  long long parent = given[1] ? PyLong_AsLongLong(given[1]) : -1;
  if (parent == -1 && PyErr_Occurred()) return nullptr;
  int capture = given[2] ? PyObject_IsTrue(given[2]) : 0;
  if (capture < 0) return nullptr;
  long long user_depth = given[3] ? PyLong_AsLongLong(given[3]) : -1;
  if (user_depth == -1 && PyErr_Occurred()) return nullptr;
  if (parent >= 0 && !check_node(*c, parent)) return nullptr;
  // The call's own: enter() may run a finalizer that enters a scope too
  // (pystack.h), and a buffer shared between the two would be overwritten.
  std::vector<int64_t> ids;
  if (!read_frames(given[0], *c, &ids)) return nullptr;
  return PyLong_FromLongLong(c->enter(ids.data(), ids.size(), parent, capture != 0, user_depth));
}

// exit()
PyObject* fast_exit(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (!bind_args("exit", nullptr, 0, 0, args, nargs, kwnames, nullptr)) return nullptr;
  Collector* c = self_of(self);
  return c ? PyLong_FromLongLong(c->exit()) : nullptr;
}

// module_enter(*hook_args) / module_exit(*hook_args): global module hooks
// (their arguments are the module's, unused); None, so the hook changes nothing.
PyObject* fast_module_enter(PyObject* self, PyObject* const*, Py_ssize_t, PyObject*) {
  Collector* c = self_of(self);
  if (c == nullptr) return nullptr;
  c->module_call(true);
  Py_RETURN_NONE;
}

PyObject* fast_module_exit(PyObject* self, PyObject* const*, Py_ssize_t, PyObject*) {
  Collector* c = self_of(self);
  if (c == nullptr) return nullptr;
  c->module_call(false);
  Py_RETURN_NONE;
}

PyMethodDef module_enter_def = {
    "module_enter",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fast_module_enter)),
    METH_FASTCALL | METH_KEYWORDS,
    "module_enter(*hook_args) -> None\n\nA module call begins on this thread (see _native.pyi)."};
PyMethodDef module_exit_def = {
    "module_exit",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fast_module_exit)),
    METH_FASTCALL | METH_KEYWORDS,
    "module_exit(*hook_args) -> None\n\nA module call ends on this thread (see _native.pyi)."};

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
  for (PyMethodDef* def : {&enter_def, &exit_def, &module_enter_def, &module_exit_def}) {
    py::object descr = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, def));
    if (!descr) throw py::error_already_set();
    py::setattr(cls, def->ml_name, descr);
  }
}

}  // namespace dc
