// dc_torch's capture extension fails open: an error in any of its callbacks
// stops the capture and is kept for Python, never thrown into torch. The
// collector's table every callback reads, and the guard around them. Included
// by capture.cc alone (one translation unit).
#pragma once

#include <atomic>
#include <cstdio>
#include <stdexcept>

#include "capture_api.h"

namespace {

// The collector's C table while a window captures; null otherwise.
std::atomic<const dc_capture_api*> g_api{nullptr};

// Fail-open: an error inside a callback stops the capture at once (every
// later callback returns on the null table) and is kept for Python, which
// logs it once and turns the profiler off when the window closes. Nothing is
// thrown into torch's dispatcher.
std::atomic<bool> g_failed{false};
char g_failure[512];
std::atomic<long> g_fault_in{-1};  // tests: the callback that many calls from now throws

void fail_open(const char* where, const char* what) noexcept {
  // The collector forgets the operators left open (this one's exit, its outer
  // ops' exits never come): Python scopes entered later must not nest in them.
  const dc_capture_api* api = g_api.exchange(nullptr, std::memory_order_acq_rel);
  if (api != nullptr) api->abandon(api->collector);
  bool first = false;
  if (g_failed.compare_exchange_strong(first, true))
    std::snprintf(g_failure, sizeof(g_failure), "%s: %s", where, what);
}

template <typename Body>
void guarded(const char* where, Body body) noexcept {
  try {
    if (g_fault_in.load(std::memory_order_relaxed) >= 0 && g_fault_in.fetch_sub(1) == 0)
      throw std::runtime_error("injected fault");
    body();
  } catch (const std::exception& e) {
    fail_open(where, e.what());
  } catch (...) {
    fail_open(where, "unknown exception");
  }
}

}  // namespace
