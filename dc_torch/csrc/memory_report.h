// dc_torch's memory by context: a reporter in the allocators' debug-info
// slot, and the marks that say what a tracked block holds. Included by
// capture.cc alone (one translation unit), after failopen.h.
#pragma once

#include <Python.h>

#include <c10/util/Logging.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <pthread.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "failopen.h"

namespace {

// Memory by context: the allocators (CPU and CUDA caching) report every
// allocation and free to the MemoryReportingInfoBase in the calling thread's
// PROFILER_STATE debug-info slot while it says memory profiling is on. That
// slot holds a profiler's state, so the reporter is one (a disabled config:
// nothing treats it as a running profiler). Pushed on the training thread
// for a window; autograd's threads inherit it with the rest of the thread's
// state. Reports go to the collector's table without the GIL.
namespace profiler = torch::profiler::impl;

std::atomic<bool> g_memory{false};

class MemoryReporter final : public profiler::ProfilerStateBase {
 public:
  MemoryReporter()
      : ProfilerStateBase(profiler::ProfilerConfig(profiler::ProfilerState::Disabled)) {}

  void reportMemoryUsage(void* ptr, int64_t size, size_t total_allocated, size_t total_reserved,
                         c10::Device device) override {
    if (!g_memory.load(std::memory_order_relaxed)) return;
    guarded("memory report", [&] {
      const dc_capture_api* api = g_api.load(std::memory_order_acquire);
      if (api == nullptr) return;
      api->memory(api->collector, reinterpret_cast<uint64_t>(ptr), size,
                  static_cast<int32_t>(device.type()), device.index() < 0 ? 0 : device.index(),
                  total_allocated, total_reserved);
    });
  }
  bool memoryProfilingEnabled() const override { return g_memory.load(std::memory_order_relaxed); }
  profiler::ActiveProfilerType profilerType() override {
    return profiler::ActiveProfilerType::NONE;
  }
};

// The reporter this extension pushed, and the thread it is on.
std::shared_ptr<MemoryReporter> g_reporter;
pthread_t g_reporter_thread;

// The CPU allocator logs a warning for every thousandth free of a block it
// saw allocated before reporting began (every window has such frees: the
// last step's tensors). The window's own reports need no such warning, so
// c10's log level is raised to errors while they run, then put back.
class QuietAllocatorLog {
 public:
  void begin() {
#ifndef C10_USE_GFLAGS
    if (FLAGS_caffe2_log_level < kError) {
      saved_ = FLAGS_caffe2_log_level;
      FLAGS_caffe2_log_level = kError;
    }
#endif
  }
  void end() {
#ifndef C10_USE_GFLAGS
    if (saved_ >= 0 && FLAGS_caffe2_log_level == kError) FLAGS_caffe2_log_level = saved_;
#endif
    saved_ = -1;
  }

 private:
  static constexpr int kError = 2;  // c10's severities: INFO 0, WARNING 1, ERROR 2
  int saved_ = -1;
};
QuietAllocatorLog g_quiet;

PyObject* memory_start(PyObject*, PyObject*) {
  if (g_reporter != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "memory reporting is already on");
    return nullptr;
  }
  // Another profiler's state holds the slot (torch.profiler): it keeps it.
  if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr)
    Py_RETURN_FALSE;
  try {
    auto reporter = std::make_shared<MemoryReporter>();
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, reporter);
    g_reporter = std::move(reporter);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  g_reporter_thread = pthread_self();
  g_quiet.begin();
  g_memory.store(true);
  Py_RETURN_TRUE;
}

// Stops the reports and takes the reporter out of the thread's slot. Returns
// False when it could not be taken out (another thread, or something pushed
// above it): it stays there inert.
PyObject* memory_stop(PyObject*, PyObject*) {
  g_memory.store(false);
  if (g_reporter == nullptr) Py_RETURN_TRUE;
  g_quiet.end();
  if (!pthread_equal(g_reporter_thread, pthread_self())) Py_RETURN_FALSE;
  bool popped = false;
  try {
    if (c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE).get() ==
        g_reporter.get()) {
      c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
      popped = true;
    }
  } catch (const std::exception&) {
    // the top of the thread's chain is another kind's: ours stays below it
  }
  if (popped) g_reporter.reset();
  return PyBool_FromLong(popped);
}

// Marks the blocks of tensors as of a memory category, without a Python
// frame per tensor: the saved-tensor pack hook (one tensor, returned as it
// is) and the optimizer's parameters, gradients and state (a list).
constexpr int32_t kSavedForBackward = 4;  // native/memory.h's MemCategory

uint64_t block_of(PyObject* obj) {
  if (!THPVariable_Check(obj)) return 0;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || !t.has_storage() || t.layout() != at::kStrided) return 0;
  return reinterpret_cast<uint64_t>(t.storage().data());
}

PyObject* pack_saved(PyObject*, PyObject* tensor) {
  if (g_memory.load(std::memory_order_relaxed)) {
    guarded("saved-tensor mark", [&] {
      const dc_capture_api* api = g_api.load(std::memory_order_acquire);
      const uint64_t ptr = block_of(tensor);
      if (api != nullptr && ptr != 0) api->memory_mark(api->collector, ptr, kSavedForBackward, 1);
    });
  }
  Py_INCREF(tensor);
  return tensor;
}

PyObject* same(PyObject*, PyObject* obj) {
  Py_INCREF(obj);
  return obj;
}

// mark_blocks(tensors, category) -> [bool]: per tensor, whether its block is tracked.
PyObject* mark_blocks(PyObject*, PyObject* args) {
  PyObject* seq = nullptr;
  int category = 0;
  if (!PyArg_ParseTuple(args, "Oi", &seq, &category)) return nullptr;
  PyObject* fast = PySequence_Fast(seq, "mark_blocks takes a sequence of tensors");
  if (fast == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject* out = PyList_New(n);
  if (out == nullptr) {
    Py_DECREF(fast);
    return nullptr;
  }
  const dc_capture_api* api = g_api.load(std::memory_order_acquire);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const uint64_t ptr = block_of(PySequence_Fast_GET_ITEM(fast, i));
    const bool tracked =
        api != nullptr && ptr != 0 && api->memory_mark(api->collector, ptr, category, 1) != 0;
    PyObject* flag = tracked ? Py_True : Py_False;
    Py_INCREF(flag);
    PyList_SET_ITEM(out, i, flag);
  }
  Py_DECREF(fast);
  return out;
}

}  // namespace
