// The CPU sampler's thread: wakes `hz` times a second, takes the GIL and runs
// a tick (Collector::sample_threads). Knows nothing about trees or frames.
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
  // Called with the GIL held. Idempotent.
  void start(double hz);
  // Called with the GIL held; releases it while joining, since the thread
  // may be waiting for the GIL to finish its current tick.
  void stop();
  bool running() const { return thread_ != nullptr; }
  // Ticks skipped because the previous one (or the wait for the GIL) overran.
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
