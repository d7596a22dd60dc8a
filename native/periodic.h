// A background thread that runs a tick periodically: the CPU sampler's
// (Collector::sample_threads) and the system monitor's (Monitor::record).
// The thread never takes the GIL, so a thread holding it delays no tick; what
// a tick reads, and how it is guarded, is its owner's business. One class so
// that starting, stopping, the GIL release while joining and forgetting the
// thread in a forked child are written once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace dc {

// The OS name of the profiler's own threads (at most 15 characters).
constexpr const char* kThreadName = "deepcontext";

class PeriodicThread {
 public:
  enum class Schedule {
    // Ticks on a fixed grid (start + k * period), the first one a period
    // after start, none at stop. A tick the thread fell behind on (a slow
    // tick, or the thread not scheduled on a loaded host) is skipped and
    // counted in missed(), not run in a burst. The sampler's.
    kFixedRate,
    // A tick at start, the next `period` after each tick ends, and a last
    // one once stopped, so a run shorter than the period still has a first
    // and a last reading (one reading if the stop came before the first tick
    // began). Never misses. The monitor's.
    kFixedDelayWithEnds,
  };

  PeriodicThread(Schedule schedule, std::function<void()> tick)
      : schedule_(schedule), tick_(std::move(tick)) {}
  // Destroyed from Python (the collector's dealloc) with the GIL held, or at
  // teardown after the atexit hook already stopped the thread.
  ~PeriodicThread() { stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Idempotent; a period under 1 ns counts as 1 ns. Any thread.
  void start(std::chrono::nanoseconds period);
  // Joins the thread; a caller holding the GIL releases it meanwhile, so the
  // Python threads run while a tick (which may wait on signal handlers in
  // comprehensive mode, or on NVML) finishes. Call it without holding a lock
  // the tick takes. Any thread, several at once: each returns once the
  // thread has ended.
  void stop();
  bool running() const { return running_.load(); }
  // Ticks skipped (kFixedRate only).
  int64_t missed() const { return missed_.load(); }
  void clear_missed() { missed_.store(0); }
  // In a forked child the thread does not exist: forget it without joining.
  void after_fork_child();

 private:
  void loop(std::chrono::nanoseconds period);
  // Runs the tick with mu_ released: stop() must be able to take it meanwhile.
  void tick(std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    tick_();
    lock.lock();
  }

  const Schedule schedule_;
  std::function<void()> tick_;
  std::unique_ptr<std::thread> thread_;  // life_mu_
  std::mutex life_mu_;                   // guards thread_: one start or stop at a time
  std::atomic<bool> running_{false};     // thread_ set, readable without life_mu_
  std::mutex mu_;                        // guards stop_
  std::condition_variable wake_;
  bool stop_ = false;
  std::atomic<int64_t> missed_{0};
};

}  // namespace dc
