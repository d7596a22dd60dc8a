// The CPU sampler's thread: wakes `hz` times a second and runs a tick
// (Collector::sample_threads). It never takes the GIL, so a thread holding it
// (a long pure-Python loop, a C call that keeps it) delays no tick. Knows
// nothing about trees or frames.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace dc {

class Sampler {
 public:
  explicit Sampler(std::function<void()> tick) : tick_(std::move(tick)) {}
  ~Sampler();
  // Idempotent. Any thread.
  void start(double hz);
  // Joins the thread; a caller holding the GIL releases it meanwhile, so the
  // Python threads run while a tick (which may wait on signal handlers in
  // comprehensive mode) finishes.
  void stop();
  bool running() const { return thread_ != nullptr; }
  // Ticks skipped because the previous one overran or the thread was not
  // scheduled in time (a loaded host).
  int64_t missed() const { return missed_.load(); }
  void clear_missed() { missed_.store(0); }
  // In a forked child the thread does not exist: forget it without joining.
  void after_fork_child();

 private:
  void loop(double hz);

  std::function<void()> tick_;
  std::unique_ptr<std::thread> thread_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::atomic<int64_t> missed_{0};
};

}  // namespace dc
