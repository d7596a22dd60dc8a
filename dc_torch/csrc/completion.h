// dc_torch's clock of collectives' completion: an operator of its own that
// arms a C++ callback on a work's future, and the slots Python reads the time
// from. Included by capture.cc alone (one translation unit), after it defines
// DC_STR (the operator's namespace is the build's module name).
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <Python.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>

namespace {

// A collective's work completes on its backend's thread. A callback on its
// future written in Python would take the GIL there: the step pays the
// hand-over, and the time it reads is when the GIL came, up to a switch
// interval (5 ms) late. This one only reads the clock, into a slot keyed by
// the launch's number, which Python reads when it needs the time (the wait
// ends, the window closes). Slots are reused every kCompletions launches: a
// slot answers only for the launch that last armed it.
constexpr int64_t kCompletions = 4096;

struct Completion {
  std::atomic<int64_t> launch{-1};  // the launch the time belongs to
  std::atomic<int64_t> ns{0};       // CLOCK_MONOTONIC, as Python's time.monotonic_ns()
};
std::array<Completion, kCompletions> g_completions;

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// time_completion(Future(Any) future, int launch) -> (): boxed, so the
// dispatcher converts Python's Future for us (no pybind11 here).
void time_completion(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  const int64_t launch = stack->back().toInt();
  stack->pop_back();
  c10::intrusive_ptr<c10::ivalue::Future> future = stack->back().toFuture();
  stack->pop_back();
  Completion& slot = g_completions[launch % kCompletions];
  slot.launch.store(-1, std::memory_order_relaxed);
  future->addCallback(
      [launch](c10::ivalue::Future&) {
        Completion& done = g_completions[launch % kCompletions];
        done.ns.store(monotonic_ns(), std::memory_order_relaxed);
        done.launch.store(launch, std::memory_order_release);
      },
      /*uses_future=*/false);
}

torch::Library* g_library = nullptr;  // kept for the process: its op stays registered

PyObject* completion_op(PyObject*, PyObject*) {
  // The namespace is this build's module name: two builds in one process
  // never register the same operator.
  const char* ns = DC_STR(TORCH_EXTENSION_NAME);
  if (g_library == nullptr) {
    try {
      auto library = std::make_unique<torch::Library>(torch::Library::FRAGMENT, ns, std::nullopt,
                                                      __FILE__, __LINE__);
      library->def("time_completion(Future(Any) future, int launch) -> ()",
                   torch::CppFunction::makeFromBoxedFunction<&time_completion>());
      g_library = library.release();
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      return nullptr;
    }
  }
  return PyUnicode_FromString(ns);
}

PyObject* record_function_enabled(PyObject*, PyObject*) {
  return PyBool_FromLong(at::isRecordFunctionEnabled());
}

PyObject* completed_at(PyObject*, PyObject* arg) {
  const long long launch = PyLong_AsLongLong(arg);
  if (launch == -1 && PyErr_Occurred()) return nullptr;
  if (launch < 0) return PyLong_FromLong(0);
  const Completion& slot = g_completions[launch % kCompletions];
  if (slot.launch.load(std::memory_order_acquire) != launch) return PyLong_FromLong(0);
  return PyLong_FromLongLong(slot.ns.load(std::memory_order_relaxed));
}

}  // namespace
