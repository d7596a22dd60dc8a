#include "monitor.h"

#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <string>

namespace dc {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

namespace {

// The few NVML entry points we need, declared here so no CUDA headers are
// required to build; resolved with dlopen so a machine without a GPU driver
// simply reports no GPU columns.
struct NvmlUtilization {
  unsigned int gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
typedef void* NvmlDevice;

struct Nvml {
  int (*init)() = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*handle)(unsigned int, NvmlDevice*) = nullptr;
  int (*util)(NvmlDevice, NvmlUtilization*) = nullptr;
  int (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  bool ok = false;

  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    count = reinterpret_cast<int (*)(unsigned int*)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
    handle = reinterpret_cast<int (*)(unsigned int, NvmlDevice*)>(
        dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    util = reinterpret_cast<int (*)(NvmlDevice, NvmlUtilization*)>(
        dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    memory =
        reinterpret_cast<int (*)(NvmlDevice, NvmlMemory*)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    ok = init && count && handle && util && memory && init() == 0;
  }
};

Nvml& nvml() {
  static Nvml* n = new Nvml();  // leaked on purpose: no teardown-order hazards
  return *n;
}

std::string slurp(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t field_after(const std::string& text, const char* key) {
  size_t at = text.find(key);
  if (at == std::string::npos) return 0;
  return std::strtoll(text.c_str() + at + std::strlen(key), nullptr, 10);
}

}  // namespace

Monitor::Monitor(int64_t max_samples)
    : max_samples_(max_samples),
      thread_(PeriodicThread::Schedule::kFixedDelayWithEnds, [this] { record(); }) {}

void Monitor::start(int64_t interval_ms) {
  thread_.start(std::chrono::milliseconds(interval_ms < 1 ? 1 : interval_ms));
}

void Monitor::after_fork_child() {
  thread_.after_fork_child();
  // The mutex may have been held by the monitor thread at fork time.
  new (&mu_) std::mutex();
}

void Monitor::record() {
  MonitorSample s = take();
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int64_t>(samples_.size()) < max_samples_)
    samples_.push_back(std::move(s));
  else
    ++dropped_;
}

MonitorSample Monitor::take() {
  MonitorSample s{};
  s.t_ns = now_ns();
  // /proc/stat: "cpuN user nice system idle iowait irq softirq steal ..."
  std::istringstream stat(slurp("/proc/stat"));
  std::string line;
  std::vector<std::pair<uint64_t, uint64_t>> cur;
  while (std::getline(stat, line)) {
    if (line.compare(0, 3, "cpu") != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9')
      continue;
    std::istringstream fields(line.substr(line.find(' ')));
    uint64_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint64_t& x : v) fields >> x;
    uint64_t idle = v[3] + v[4], total = 0;
    for (uint64_t x : v) total += x;
    cur.emplace_back(total - idle, total);
  }
  for (size_t i = 0; i < cur.size(); ++i) {
    double pct = 0.0;
    // The first sample has no previous counters: utilisation since boot.
    uint64_t busy0 = i < prev_cpu_.size() ? prev_cpu_[i].first : 0;
    uint64_t total0 = i < prev_cpu_.size() ? prev_cpu_[i].second : 0;
    if (cur[i].second > total0)
      pct = 100.0 * static_cast<double>(cur[i].first - busy0) /
            static_cast<double>(cur[i].second - total0);
    s.cpu_percent.push_back(pct);
  }
  prev_cpu_ = cur;

  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    // A short read leaves resident 0; /proc/self/statm holds two decimal page counts.
    // NOLINTNEXTLINE(bugprone-unchecked-string-to-number-conversion)
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  s.rss_bytes = static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);

  std::string mem = slurp("/proc/meminfo");
  int64_t total = field_after(mem, "MemTotal:"), avail = field_after(mem, "MemAvailable:");
  s.mem_used_percent =
      total > 0 ? 100.0 * static_cast<double>(total - avail) / static_cast<double>(total) : 0.0;

  std::string io = slurp("/proc/self/io");  // absent without CAP / on some kernels: zeros
  s.disk_read_bytes = field_after(io, "\nread_bytes:");
  s.disk_write_bytes = field_after(io, "\nwrite_bytes:");

  // /proc/net/dev: "  iface: rx_bytes p e d f fr c m tx_bytes ...", two header lines.
  std::istringstream net(slurp("/proc/net/dev"));
  for (int i = 0; std::getline(net, line); ++i) {
    size_t colon = line.find(':');
    if (i < 2 || colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name == "lo") continue;  // loopback is not I/O the job waits on
    std::istringstream fields(line.substr(colon + 1));
    int64_t v[9] = {0};
    for (int64_t& x : v) fields >> x;
    s.net_rx_bytes += v[0];
    s.net_tx_bytes += v[8];
  }

  Nvml& n = nvml();
  unsigned int count = 0;
  if (n.ok && n.count(&count) == 0) {
    for (unsigned int i = 0; i < count; ++i) {
      NvmlDevice dev = nullptr;
      NvmlUtilization u{0, 0};
      NvmlMemory m{0, 0, 0};
      if (n.handle(i, &dev) != 0) continue;
      s.gpu_util_percent.push_back(n.util(dev, &u) == 0 ? u.gpu : 0.0);
      s.gpu_mem_bytes.push_back(n.memory(dev, &m) == 0 ? static_cast<int64_t>(m.used) : 0);
    }
  }
  return s;
}

std::vector<MonitorSample> Monitor::samples() {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

int64_t Monitor::dropped() {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void Monitor::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  samples_.clear();
  dropped_ = 0;
  prev_cpu_.clear();
}

}  // namespace dc
