// dc_torch's native operator capture: a global at::RecordFunction callback,
// registered only while a window is open, that reports every ATen op and
// autograd function on every thread to the collector through its C table
// (dc_core/include/capture_api.h). Built on first use against the torch that imports
// it (dc_torch/native.py); no pybind11, so it compiles against ATen's
// headers alone. It also clocks when collectives complete, on their
// backend's thread (completion.h).
#include <Python.h>

#include <ATen/record_function.h>
#include <c10/util/Logging.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <pthread.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#define DC_CONCAT_(a, b) a##b
#define DC_CONCAT(a, b) DC_CONCAT_(a, b)
#define DC_STR_(a) #a
#define DC_STR(a) DC_STR_(a)

#include "capture_api.h"
#include "completion.h"
#include "failopen.h"
#include "memory_report.h"
#include "names.h"

namespace {

at::CallbackHandle g_handle = at::INVALID_CALLBACK_HANDLE;
// Set by start() before g_api is published; read by the callbacks.
int64_t g_flops = -1;  // metric id of matmul FLOPs, -1: off
int64_t g_alloc = -1;  // metric id of output bytes, -1: off
bool g_marks = false;  // open a "dc#<node>" record per recorded op, for Kineto

int64_t matmul_flops(Family family, c10::ArrayRef<const c10::IValue> in) {
  const size_t a = (family == ADDMM || family == BADDBMM) ? 1 : 0;
  if (in.size() < a + 2 || !in[a].isTensor() || !in[a + 1].isTensor()) return 0;
  const at::Tensor& x = in[a].toTensor();
  const at::Tensor& y = in[a + 1].toTensor();
  if (!x.defined() || !y.defined()) return 0;
  const int64_t dims = (family == BMM || family == BADDBMM) ? 3 : 2;
  if (x.dim() != dims || y.dim() != dims) return 0;
  // 2·M·K·N (per batch): a multiply and an add per contracted element.
  int64_t flops = 2 * x.size(-2) * x.size(-1) * y.size(-1);
  return dims == 3 ? flops * x.size(0) : flops;
}

const void* storage_of(const c10::IValue& v) {
  if (!v.isTensor()) return nullptr;
  const at::Tensor& t = v.toTensor();
  return t.defined() && t.has_storage() ? t.storage().data() : nullptr;
}

int64_t fresh_bytes(const NameCache::Open& o, const c10::IValue& v) {
  if (!v.isTensor()) return 0;
  const at::Tensor& t = v.toTensor();
  if (!t.defined() || t.is_view() || !t.has_storage() || t.layout() != at::kStrided) return 0;
  const void* data = t.storage().data();
  for (const void* given : o.inputs)
    if (given != nullptr && given == data) return 0;  // an input returned, or written into
  return static_cast<int64_t>(t.storage().nbytes());
}

// A collective's work, run by its backend on a thread of its own (gloo's
// worker), runs with the state of the thread that issued it: this slot of
// that state names the collective's node (pushed by serving_call around the
// issuing call), so the worker's operators land under that collective.
constexpr std::string_view kServingName = "deepcontext.serving";
const c10::DebugInfoKind kServing(&kServingName);

class Serving final : public c10::DebugInfoBase {
 public:
  Serving(int64_t node, uint64_t generation) : node(node), generation(generation) {}
  const int64_t node;
  const uint64_t generation;  // the window's: a work run after its window ends serves nothing
};

// Whether this window pushed a Serving slot: until then no operator looks.
std::atomic<bool> g_serving{false};

void serve(const dc_capture_api* api, NameCache& cache) {
  const auto* s = static_cast<const Serving*>(c10::ThreadLocalDebugInfo::get(kServing));
  const int64_t node =
      s != nullptr && s->generation == g_generation.load(std::memory_order_relaxed) ? s->node : -1;
  if (node != cache.serving) {
    cache.serving = node;
    api->serve(api->collector, node);
  }
}

void enter(const at::RecordFunction& fn) {
  const dc_capture_api* api = g_api.load(std::memory_order_acquire);
  if (api == nullptr) return;
  NameCache& cache = names();
  const bool backward = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;
  NameCache::Known& k = cache.lookup(api, fn.name(), backward);
  if (g_serving.load(std::memory_order_relaxed)) serve(api, cache);
  // The twin record of an op already open as itself is that op, once.
  int64_t frame =
      k.twin && !cache.open.empty() && cache.open.back().frame == k.frame ? kSkip : k.frame;
  if (k.family == TO && frame >= 0 && std::strcmp(fn.overload_name(), "dtype_layout") == 0) {
    // x.to("cuda"), x.cpu(): Python's Tensor.to with a device and no dtype
    // calls this overload with the tensor's own options: a transfer, not a cast
    if (k.device_frame == kSkip)
      k.device_frame = api->op_frame_detail(api->collector, fn.name(), "device", 0);
    frame = k.device_frame;
  }
  const int64_t node =
      backward && frame >= 0
          ? api->backward_enter(api->collector, frame, fn.seqNr(), fn.forwardThreadId())
          : api->op_enter(api->collector, frame, fn.seqNr(), fn.threadId(), k.flags);
  cache.open.emplace_back();
  NameCache::Open& o = cache.open.back();
  o.frame = frame;
  if (fn.needsInputs() && !backward) {
    c10::ArrayRef<const c10::IValue> in = fn.inputs();
    if (g_flops >= 0 && k.family != NONE && k.family != TO) {
      const int64_t flops = matmul_flops(k.family, in);
      if (flops > 0) api->op_add(api->collector, g_flops, flops);
    }
    if (g_alloc >= 0 && node >= 0 && !k.in_place && std::strcmp(fn.overload_name(), "out") != 0) {
      o.alloc = true;
      for (size_t i = 0; i < in.size() && i < 4; ++i) o.inputs[i] = storage_of(in[i]);
    }
  }
  if (g_marks && node >= 0) {
    // Kineto correlates each kernel with the innermost CPU record open at its
    // launch; this one names the collector's node (dc_torch/device.py).
    auto rf = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (rf->isActive()) {
      cache.marks.emplace_back(std::move(rf), "dc#" + std::to_string(node));
      cache.marks.back().first->before(std::string_view(cache.marks.back().second), -1);
      o.marked = true;
    }
  }
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  guarded("operator entry", [&] { enter(fn); });
  return nullptr;
}

void leave(const at::RecordFunction& fn) {
  const dc_capture_api* api = g_api.load(std::memory_order_acquire);
  if (api == nullptr) return;
  NameCache& cache = names();
  int64_t bytes = 0;
  if (!cache.open.empty()) {
    const NameCache::Open& o = cache.open.back();
    if (o.alloc && fn.needsOutputs()) {
      for (const c10::IValue& v : fn.outputs()) {
        if (v.isTensorList()) {
          for (const at::Tensor& t : v.toTensorList().vec())
            bytes += fresh_bytes(o, c10::IValue(t));
        } else {
          bytes += fresh_bytes(o, v);
        }
      }
    }
    if (o.marked && !cache.marks.empty()) cache.marks.pop_back();  // ends the dc# record
    cache.open.pop_back();
  }
  api->op_exit(api->collector, g_alloc, bytes);  // every enter reported one, even a skipped record
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  guarded("operator exit", [&] { leave(fn); });
}

void after_fork_child() {
  // A forked child (a DataLoader worker) records nothing; Python removes the
  // callback itself right after (os.register_at_fork in dc_torch.native).
  g_api.store(nullptr);
}

PyObject* start(PyObject*, PyObject* args) {
  PyObject* capsule = nullptr;
  long long flops = -1, alloc = -1;
  int marks = 0;
  if (!PyArg_ParseTuple(args, "OLLp", &capsule, &flops, &alloc, &marks)) return nullptr;
  auto* api = static_cast<const dc_capture_api*>(PyCapsule_GetPointer(capsule, DC_CAPTURE_CAPSULE));
  if (api == nullptr) return nullptr;
  if (api->abi != DC_CAPTURE_ABI) {
    PyErr_Format(PyExc_RuntimeError, "collector capture ABI %d, extension built for %d",
                 static_cast<int>(api->abi), DC_CAPTURE_ABI);
    return nullptr;
  }
  if (g_handle != at::INVALID_CALLBACK_HANDLE) {
    PyErr_SetString(PyExc_RuntimeError, "operator capture is already on");
    return nullptr;
  }
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] { pthread_atfork(nullptr, nullptr, after_fork_child); });
  g_generation.fetch_add(1);
  g_serving.store(false);
  g_failed.store(false);
  g_flops = flops;
  g_alloc = alloc;
  g_marks = marks != 0;
  g_api.store(api, std::memory_order_release);
  // Shapes cost every op its boxed inputs and outputs: taken only for the
  // metrics that need them.
  const bool shapes = g_flops >= 0 || g_alloc >= 0;
  try {
    g_handle = at::addGlobalCallback(
        at::RecordFunctionCallback(&on_enter, &on_exit)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION})
            .needsInputs(shapes)
            .needsOutputs(g_alloc >= 0)
            .needsIds(false));
  } catch (const std::exception& e) {
    g_api.store(nullptr);
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* stop(PyObject*, PyObject*) {
  g_api.store(nullptr, std::memory_order_release);
  if (g_handle != at::INVALID_CALLBACK_HANDLE) {
    at::CallbackHandle handle = g_handle;
    g_handle = at::INVALID_CALLBACK_HANDLE;
    try {
      at::removeCallback(handle);
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      return nullptr;
    }
  }
  Py_RETURN_NONE;
}

// A callback that does nothing, registered like the real one: what
// RecordFunction itself costs a step (benchmarks/torch_overhead.py's floor).
std::unique_ptr<at::ObserverContext> bare_enter(const at::RecordFunction&) { return nullptr; }
void bare_exit(const at::RecordFunction&, at::ObserverContext*) {}
at::CallbackHandle g_bare = at::INVALID_CALLBACK_HANDLE;

PyObject* bare(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  try {
    if (on && g_bare == at::INVALID_CALLBACK_HANDLE) {
      g_bare = at::addGlobalCallback(
          at::RecordFunctionCallback(&bare_enter, &bare_exit)
              .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION})
              .needsInputs(false)
              .needsIds(false));
    } else if (!on && g_bare != at::INVALID_CALLBACK_HANDLE) {
      at::removeCallback(g_bare);
      g_bare = at::INVALID_CALLBACK_HANDLE;
    }
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

// serving_call(node, fn, args, kwargs): fn(*args, **kwargs) with this
// thread's state naming `node` as the collective it issues (see Serving).
PyObject* serving_call(PyObject*, PyObject* args) {
  long long node = -1;
  PyObject *fn = nullptr, *call_args = nullptr, *kwargs = nullptr;
  if (!PyArg_ParseTuple(args, "LOO!O", &node, &fn, &PyTuple_Type, &call_args, &kwargs))
    return nullptr;
  if (kwargs == Py_None) kwargs = nullptr;
  std::optional<c10::DebugInfoGuard> guard;
  if (node >= 0 && g_api.load(std::memory_order_acquire) != nullptr) {
    try {
      guard.emplace(kServing,
                    std::make_shared<Serving>(node, g_generation.load(std::memory_order_relaxed)));
      g_serving.store(true, std::memory_order_relaxed);
    } catch (const std::exception&) {
      guard.reset();  // the call runs as without us
    }
  }
  return PyObject_Call(fn, call_args, kwargs);
}

PyObject* failure(PyObject*, PyObject*) {
  if (!g_failed.load()) Py_RETURN_NONE;
  return PyUnicode_DecodeUTF8(g_failure, static_cast<Py_ssize_t>(std::strlen(g_failure)),
                              "replace");
}

PyObject* inject_fault(PyObject*, PyObject* arg) {
  const long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred()) return nullptr;
  g_fault_in.store(n);
  Py_RETURN_NONE;
}

// A compiled graph's run, reported by dc_torch/compiled.py from Python (GIL
// held) as an operator of frame `frame`: placed like any operator, under the
// module and line that called it (the same frame walk), so the graph's kernel
// scopes, opened inside it, nest under it and bill their time there. Like
// any operator it is not recorded while the thread's capture is suspended.
PyObject* region_enter(PyObject*, PyObject* arg) {
  const long long frame = PyLong_AsLongLong(arg);
  if (frame == -1 && PyErr_Occurred()) return nullptr;
  int64_t node = -1;
  guarded("compiled region entry", [&] {
    const dc_capture_api* api = g_api.load(std::memory_order_acquire);
    if (api != nullptr)
      node = api->op_enter(api->collector, frame, -1, at::RecordFunction::currentThreadId(), 0);
  });
  return PyLong_FromLongLong(node);
}

PyObject* region_exit(PyObject*, PyObject*) {
  guarded("compiled region exit", [&] {
    const dc_capture_api* api = g_api.load(std::memory_order_acquire);
    if (api != nullptr) api->op_exit(api->collector, -1, 0);
  });
  Py_RETURN_NONE;
}

PyObject* thread_id(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(at::RecordFunction::currentThreadId());
}

PyObject* active(PyObject*, PyObject*) {
  return PyBool_FromLong(g_handle != at::INVALID_CALLBACK_HANDLE);
}

PyMethodDef methods[] = {
    {"start", start, METH_VARARGS,
     "start(capsule, flops_metric, alloc_metric, marks): report every operator to the collector's "
     "capture table; metric -1 leaves that metric out; marks opens a dc#<node> record per op."},
    {"stop", stop, METH_NOARGS, "stop(): remove the callback; idempotent."},
    {"active", active, METH_NOARGS, "active() -> bool: whether the callback is registered."},
    {"bare", bare, METH_O,
     "bare(on): register (or remove) a callback that does nothing, for measuring RecordFunction's "
     "own cost."},
    {"failure", failure, METH_NOARGS,
     "failure() -> str | None: the error that stopped this window's capture inside a callback, if "
     "any."},
    {"inject_fault", inject_fault, METH_O,
     "inject_fault(n): for tests, the callback n calls from now throws (-1: never)."},
    {"region_enter", region_enter, METH_O,
     "region_enter(frame) -> node: a compiled graph's run starts, recorded as an operator of "
     "`frame` under the calling thread's context (-1: not recorded, e.g. while the thread's "
     "capture is suspended)."},
    {"region_exit", region_exit, METH_NOARGS, "region_exit(): the run region_enter reported ends."},
    {"memory_start", memory_start, METH_NOARGS,
     "memory_start() -> bool: report this thread's (and its autograd threads') allocations to the "
     "capture table's memory entry; False when another profiler holds the allocator's reporting."},
    {"memory_stop", memory_stop, METH_NOARGS,
     "memory_stop() -> bool: stop the reports and take the reporter off this thread; False when it "
     "could not be taken off (it stays, inert)."},
    {"pack_saved", pack_saved, METH_O,
     "pack_saved(tensor) -> tensor: a saved-tensor pack hook marking the tensor's block "
     "saved_for_backward (if still a temporary)."},
    {"same", same, METH_O,
     "same(obj) -> obj: the saved-tensor unpack hook that goes with pack_saved."},
    {"mark_blocks", mark_blocks, METH_VARARGS,
     "mark_blocks(tensors, category) -> list[bool]: mark each tensor's block (if still a "
     "temporary); per tensor, whether its block is tracked."},
    {"serving_call", serving_call, METH_VARARGS,
     "serving_call(node, fn, args, kwargs): fn(*args, **kwargs), its backend's work on other "
     "threads recorded under node `node` (a collective's)."},
    {"thread_id", thread_id, METH_NOARGS,
     "thread_id() -> int: this thread's id as RecordFunction reports it (forward sequence numbers "
     "are per thread)."},
    {"completion_op", completion_op, METH_NOARGS,
     "completion_op() -> str: register this build's `time_completion(Future(Any) future, int "
     "launch) -> ()` operator (once) and return its namespace: torch.ops.<namespace>."
     "time_completion(future, launch) reads the clock when the future completes, on its thread, "
     "without the GIL."},
    {"record_function_enabled", record_function_enabled, METH_NOARGS,
     "record_function_enabled() -> bool: whether RecordFunction observers run on this thread "
     "(torch._C._autograd._enable_record_function sets it)."},
    {"completed_at", completed_at, METH_O,
     "completed_at(launch) -> int: time.monotonic_ns() when the future armed for `launch` "
     "completed; 0 while it has not (or the slot was armed again since)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, DC_STR(TORCH_EXTENSION_NAME),
                                 "DeepContext's RecordFunction capture", -1, methods};

PyMODINIT_FUNC DC_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
  return PyModule_Create(&module_def);
}
