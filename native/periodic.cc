#include "periodic.h"

#include <pthread.h>

#include <Python.h>

#include <new>

namespace dc {

void PeriodicThread::start(std::chrono::nanoseconds period) {
  std::lock_guard<std::mutex> life(life_mu_);
  if (thread_) return;
  if (period.count() < 1) period = std::chrono::nanoseconds(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_.reset(new std::thread([this, period] { loop(period); }));
  running_.store(true);
}

void PeriodicThread::stop() {
  // Two callers may stop one thread at once (the window's end on one Python
  // thread, the atexit hook on another): the second waits for the first's
  // join instead of joining the same thread again, which never returns. The
  // GIL is released before life_mu_ is taken, so its holder never waits on it.
  auto stop_and_join = [this] {
    std::lock_guard<std::mutex> life(life_mu_);
    if (!thread_) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_->join();
    thread_.reset();
    running_.store(false);
  };
  if (PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS stop_and_join();
    Py_END_ALLOW_THREADS
  } else {
    stop_and_join();
  }
}

void PeriodicThread::after_fork_child() {
  // The mutex may have been held by the thread at fork time.
  new (&mu_) std::mutex();
  new (&life_mu_) std::mutex();
  new (&wake_) std::condition_variable();
  // Leaked on purpose: joining or destroying it would abort.
  (void)thread_.release();  // NOLINT(bugprone-unused-return-value)
  running_.store(false);
  stop_ = true;
}

void PeriodicThread::loop(std::chrono::nanoseconds period) {
  // Named, so that the analyzer's count of worker threads waiting for a CPU
  // (dc_core/collect/sysmon.py) leaves the profiler's own threads out.
  pthread_setname_np(pthread_self(), kThreadName);
  using Clock = std::chrono::steady_clock;
  const bool fixed_rate = schedule_ == Schedule::kFixedRate;
  std::unique_lock<std::mutex> lock(mu_);
  // With ends, the reading at start is taken even when stop() came first, so
  // a window however short has two readings (the contract in _native.pyi).
  if (!fixed_rate) tick(lock);
  Clock::time_point next = Clock::now() + period;
  // The tick touches no Python object and takes no GIL, so it also runs
  // while the interpreter finalizes: the owner it reads outlives it.
  while (!wake_.wait_until(lock, next, [this] { return stop_; })) {
    if (fixed_rate) {
      next += period;
      const Clock::time_point now = Clock::now();
      if (next < now) {
        // Fell behind: count the lost ticks, don't burst.
        missed_ += static_cast<int64_t>((now - next) / period) + 1;
        next = now + period;
      }
    }
    tick(lock);
    if (!fixed_rate) next = Clock::now() + period;
  }
  if (!fixed_rate) tick(lock);  // the reading at stop
}

}  // namespace dc
