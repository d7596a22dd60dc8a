// System monitor: a background thread reading /proc and NVML at a fixed
// interval. It never touches Python objects, so it never takes the GIL;
// its samples are guarded by its own mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "periodic.h"

namespace dc {

struct MonitorSample {
  int64_t t_ns;
  std::vector<double> cpu_percent;  // per core
  int64_t rss_bytes;
  double mem_used_percent;
  int64_t disk_read_bytes, disk_write_bytes;
  int64_t net_rx_bytes, net_tx_bytes;
  std::vector<double> gpu_util_percent;
  std::vector<int64_t> gpu_mem_bytes;
};

class Monitor {
 public:
  explicit Monitor(int64_t max_samples);
  // Samples at start, every interval and once more when stopped. Idempotent.
  void start(int64_t interval_ms);
  void stop() { thread_.stop(); }  // joins; call without holding mu_
  bool running() const { return thread_.running(); }
  std::vector<MonitorSample> samples();
  int64_t dropped();
  void clear();
  // In a forked child the thread does not exist: forget it without joining.
  void after_fork_child();

 private:
  void record();  // one tick (monitor thread)
  MonitorSample take();

  int64_t max_samples_;
  std::mutex mu_;  // guards samples_ and dropped_
  std::vector<MonitorSample> samples_;
  int64_t dropped_ = 0;
  // Previous /proc/stat counters (busy, total) per core, for utilisation
  // (monitor thread; cleared only while it is stopped).
  std::vector<std::pair<uint64_t, uint64_t>> prev_cpu_;
  PeriodicThread thread_;  // last: its thread uses everything above
};

int64_t now_ns();

}  // namespace dc
