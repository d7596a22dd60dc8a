// The GIL-free frame walk (pyframes.h): a thread parked in a native call
// reads its own interpreter frames without the GIL. Driven from Python code
// run in an embedded interpreter through a `probe` module whose walk()
// releases the GIL, walks, and checks the walk against the public frame API.
#include "pyframes.h"

#include <Python.h>

#include <string>
#include <vector>

#include "check.h"

namespace {

constexpr int kMax = 512;

// The public API's view of the calling thread's frames (GIL held): code
// objects and lasti, innermost first.
std::vector<std::pair<PyCodeObject*, int>> public_walk() {
  std::vector<std::pair<PyCodeObject*, int>> out;
  for (PyFrameObject* f = PyEval_GetFrame(); f != nullptr;) {
    PyCodeObject* code = PyFrame_GetCode(f);
    Py_DECREF(code);  // alive while its frame is
    out.emplace_back(code, PyFrame_GetLasti(f));
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_XDECREF(back);
    f = back;
  }
  return out;
}

// probe.walk(context_code=None, max=512) -> [(qualname, line, self), ...]
// innermost first, from the walk made without the GIL; -1 when the walk
// refused (deeper than max). Fails a check where the walk, its hash or
// frame_lasti disagree with the public API.
PyObject* probe_walk(PyObject*, PyObject* args) {
  PyObject* context = Py_None;
  int max = kMax;
  if (!PyArg_ParseTuple(args, "|Oi", &context, &max)) return nullptr;
  PyCodeObject* context_code =
      context == Py_None ? nullptr : reinterpret_cast<PyCodeObject*>(context);
  const std::vector<std::pair<PyCodeObject*, int>> expected = public_walk();
  std::vector<dc::RawFrame> walk(static_cast<size_t>(kMax));
  int n = 0, hashed = 0;
  uint64_t hash = 7;
  PyThreadState* own = nullptr;
  Py_BEGIN_ALLOW_THREADS;  // from here the thread holds no GIL: other threads run Python
  own = dc::own_thread_state();
  n = dc::walk_frames(own, context_code, walk.data(), max);
  hashed = dc::hash_frames(own, context_code, max, &hash);
  Py_END_ALLOW_THREADS;
  CHECK_EQ(hashed, n);
  if (n < 0) return PyLong_FromLong(-1);
  CHECK_EQ(static_cast<size_t>(n), expected.size());
  uint64_t folded = 7;
  PyObject* out = PyList_New(0);
  for (int i = 0; i < n; ++i) {
    const dc::RawFrame& f = walk[static_cast<size_t>(i)];
    folded = dc::fold_frame(folded, f);
    const int lasti = dc::frame_lasti(f.code, f.instr);
    if (static_cast<size_t>(i) < expected.size()) {
      CHECK(f.code == expected[static_cast<size_t>(i)].first);
      CHECK_EQ(lasti, expected[static_cast<size_t>(i)].second);
    }
    CHECK(f.self == nullptr || f.code == context_code);  // only context frames carry one
    PyObject* item = Py_BuildValue("(OiO)", f.code->co_qualname, PyCode_Addr2Line(f.code, lasti),
                                   f.self != nullptr ? f.self : Py_None);
    PyList_Append(out, item);
    Py_DECREF(item);
  }
  CHECK_EQ(folded, hash);
  return out;
}

PyMethodDef probe_methods[] = {
    {"walk", probe_walk, METH_VARARGS, "The calling thread's frames, walked without the GIL."},
    {nullptr, nullptr, 0, nullptr}};
PyModuleDef probe_module = {
    PyModuleDef_HEAD_INIT, "probe", nullptr, -1, probe_methods, nullptr, nullptr, nullptr, nullptr};

PyObject* probe_init() { return PyModule_Create(&probe_module); }
const int probe_registered = PyImport_AppendInittab("probe", &probe_init);

// Runs `code` in a fresh namespace; its variable `result`, or null.
PyObject* run(const char* code) {
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* r = PyRun_String(code, Py_file_input, globals, globals);
  if (r == nullptr) {
    PyErr_Print();
    Py_DECREF(globals);
    return nullptr;
  }
  Py_DECREF(r);
  PyObject* result = PyDict_GetItemString(globals, "result");
  Py_XINCREF(result);
  Py_DECREF(globals);
  return result;
}

std::string str(PyObject* o) {
  PyObject* s = PyObject_Str(o);
  std::string out = s != nullptr ? PyUnicode_AsUTF8(s) : "?";
  Py_XDECREF(s);
  return out;
}

}  // namespace

TEST(walk_reads_the_threads_own_frames_without_the_gil) {
  if (!dc::walk_compiled()) {
    std::printf("skip: this interpreter's frame layout is not known to the walk\n");
    return;
  }
  CHECK_EQ(probe_registered, 0);
  // Which frames, at which lines, and the first local of context frames
  // (a module's call method): what the capture's path and module names come from.
  PyObject* result =
      run("import probe\n"                               // 1
          "class Block:\n"                               // 2
          "    def call(self, depth):\n"                 // 3
          "        return inner(depth)\n"                // 4
          "def inner(depth):\n"                          // 5
          "    if depth:\n"                              // 6
          "        return inner(depth - 1)\n"            // 7
          "    return list(gen())[0]\n"                  // 8
          "def gen():\n"                                 // 9
          "    yield probe.walk(Block.call.__code__)\n"  // 10
          "block = Block()\n"                            // 11
          "frames = block.call(2)\n"                     // 12
          "result = (frames, block)\n");                 // 13
  CHECK(result != nullptr);
  if (result == nullptr) return;
  PyObject* frames = PyTuple_GetItem(result, 0);
  PyObject* block = PyTuple_GetItem(result, 1);
  const char* names[] = {"gen", "inner", "inner", "inner", "Block.call", "<module>"};
  const int lines[] = {10, 8, 7, 7, 4, 12};
  CHECK_EQ(PyList_Size(frames), 6);
  for (Py_ssize_t i = 0; i < PyList_Size(frames) && i < 6; ++i) {
    PyObject* f = PyList_GetItem(frames, i);
    CHECK_EQ(str(PyTuple_GetItem(f, 0)), std::string(names[i]));
    CHECK_EQ(PyLong_AsLong(PyTuple_GetItem(f, 1)), lines[i]);
    CHECK(PyTuple_GetItem(f, 2) == (i == 4 ? block : Py_None));
  }
  Py_DECREF(result);
}

TEST(walk_refuses_a_stack_deeper_than_its_bound) {
  if (!dc::walk_compiled()) return;
  PyObject* result =
      run("import probe\n"
          "def down(n, max):\n"
          "    return down(n - 1, max) if n else probe.walk(None, max)\n"
          "result = (len(down(20, 64)), down(20, 21), down(20, 22))\n");
  CHECK(result != nullptr);
  if (result == nullptr) return;
  // 21 frames of down() and the module's: 22 in all.
  CHECK_EQ(PyLong_AsLong(PyTuple_GetItem(result, 0)), 22);
  CHECK_EQ(PyLong_AsLong(PyTuple_GetItem(result, 1)), -1);
  CHECK_EQ(PyList_Size(PyTuple_GetItem(result, 2)), 22);
  Py_DECREF(result);
}

TEST(walks_on_many_threads_while_others_run_python) {
  if (!dc::walk_compiled()) return;
  // Each thread walks its own frames with the GIL released while the
  // others run Python (and change their own frames): every walk still sees
  // exactly its own thread's stack.
  PyObject* result =
      run("import probe, threading\n"
          "bad = []\n"
          "def down(n):\n"
          "    return down(n - 1) if n else probe.walk(None)\n"
          "def work(k):\n"
          "    for i in range(300):\n"
          "        depth = (k * 7 + i) % 23\n"
          "        names = [f[0] for f in down(depth)]\n"
          "        if names != ['down'] * (depth + 1) + ['work', 'Thread.run', "
          "'Thread._bootstrap_inner', 'Thread._bootstrap']:\n"
          "            bad.append((k, i, names))\n"
          "threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]\n"
          "for t in threads: t.start()\n"
          "for t in threads: t.join()\n"
          "result = len(bad)\n");
  CHECK(result != nullptr);
  if (result == nullptr) return;
  CHECK_EQ(PyLong_AsLong(result), 0);
  Py_DECREF(result);
}
