// Argument checks and conversions, written once for both kinds of binding:
// the pybind11 methods (module.cc) and the METH_FASTCALL ones (fastcall.cc).
// C-API style: on failure a Python exception is set and false returned; a
// pybind11 caller turns that into `throw pybind11::error_already_set()`.
// All of them run with the GIL held.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

namespace dc {

class Collector;

// Binds METH_FASTCALL arguments (positional, then keyword) to the `n`
// parameters `names` of `fn`: given[i] is the object passed for names[i], or
// nullptr. The first `required` must be passed. TypeError otherwise.
bool bind_args(const char* fn, const char* const* names, int n, int required, PyObject* const* args,
               Py_ssize_t nargs, PyObject* kwnames, PyObject** given);

// IndexError "no node N" / "no frame N" unless the id exists.
bool check_node(const Collector& c, int64_t node);
bool check_frame(const Collector& c, int64_t frame);

// A sequence of frame ids, each checked, into `out` (cleared first). Reads the
// items directly instead of through pybind11's list caster, which allocates
// and dispatches per item: this is on the path of every enter().
bool read_frames(PyObject* seq, const Collector& c, std::vector<int64_t>* out);

}  // namespace dc
