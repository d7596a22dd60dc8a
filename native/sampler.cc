#include "sampler.h"

#include <Python.h>

#include <chrono>
#include <new>

namespace dc {

Sampler::~Sampler() {
  // Destroyed from Python (the collector's dealloc) with the GIL held, or at
  // teardown after the atexit hook already stopped the thread.
  stop();
}

void Sampler::start(double hz) {
  if (thread_) return;
  if (!(hz > 0)) hz = 100.0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_.reset(new std::thread([this, hz] { loop(hz); }));
}

void Sampler::stop() {
  if (!thread_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS
    thread_->join();
    Py_END_ALLOW_THREADS
  } else {
    thread_->join();
  }
  thread_.reset();
}

void Sampler::after_fork_child() {
  new (&mu_) std::mutex();
  new (&wake_) std::condition_variable();
  (void)thread_.release();  // leak: joining or destroying it would abort
  stop_ = true;
}

void Sampler::loop(double hz) {
  const auto period = std::chrono::nanoseconds(static_cast<int64_t>(1e9 / hz));
  auto next = std::chrono::steady_clock::now() + period;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (wake_.wait_until(lock, next, [this] { return stop_; })) break;
    next += period;
    auto now = std::chrono::steady_clock::now();
    if (next < now) {
      // Fell behind (a slow tick, or this thread not scheduled): count the
      // lost ticks, don't burst.
      missed_ += static_cast<int64_t>((now - next) / period) + 1;
      next = now + period;
    }
    // The tick touches no Python object and takes no GIL, so it also runs
    // while the interpreter finalizes: the collector it reads outlives it.
    lock.unlock();
    tick_();
    lock.lock();
  }
}

}  // namespace dc
