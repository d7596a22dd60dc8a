// Memory by context in one profiling window, bounded: per tree node and
// device, the bytes its allocations took and gave back, and the bytes it held
// per category at the moment the device's total was highest; per device the
// peak's facts and a timeline of at most a fixed number of points.
//
// The allocator reports every allocation and free (c10's reportMemoryUsage,
// forwarded by the torch extension) from any thread, with or without the
// GIL. One mutex guards everything: a report holds it for a hash probe and a
// few additions, and allocator reports are far rarer than operators.
//
// Peak bytes per node without copying every node at every new maximum: each
// node keeps its live bytes and a peak snapshot per category, and the nodes
// whose live bytes changed since the last snapshot sit on a dirty list. A new
// maximum only sets `pending`: while the total only grows, the live state is
// the state at the (latest) maximum, so the first decrease after it (or a
// read) copies live -> peak for the dirty nodes alone. The other nodes are
// unchanged since the last copy, so after a flush peak == live for every
// node (exact), and each report pays for at most one later copy of the node
// it touched (amortized O(1)).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace dc {

// What an allocation turns out to be. Every allocation starts as a
// temporary; hold() and mark() say otherwise when the framework knows.
enum MemCategory : uint8_t {
  kTemporary = 0,
  kParameter,
  kGradient,
  kOptimizerState,
  kSavedForBackward,
  kInput,
};
constexpr int kCategories = 6;
// The metric suffixes (peak_live_bytes.<name>), in MemCategory order.
inline constexpr const char* kCategoryNames[kCategories] = {
    "temporary", "parameter", "gradient", "optimizer_state", "saved_for_backward", "input"};

// One device's window, read out. Per-node vectors are indexed by node id and
// as long as the highest node the device saw, plus one.
struct DeviceMemory {
  int32_t type = 0;  // c10::DeviceType: CPU 0, CUDA 1, ...
  int32_t index = 0;
  std::vector<int64_t> alloc_bytes;  // allocated in the window
  std::vector<int64_t> free_bytes;   // of those, freed in the window
  // Bytes live at the peak, per category, per node (exclusive).
  std::array<std::vector<int64_t>, kCategories> peak_bytes;
  int64_t peak = 0;           // the device's highest live total
  uint64_t peak_ns = 0;       // when it was reached
  int64_t peak_node = -1;     // whose allocation reached it
  uint64_t max_reserved = 0;  // the allocator's highest reserved total (0 on CPU)
  int64_t live = 0;           // the live total now
  int64_t held_at_peak = 0;   // of `peak`: held allocations (made before the window)
  // The allocator's own highest total over the window, less its total before
  // the window's first allocation: what it saw the window's allocations take.
  int64_t allocator_peak = 0;
  // (bucket start, highest live total in the bucket), oldest first.
  std::vector<uint64_t> timeline_ns;
  std::vector<int64_t> timeline_bytes;
  // Drops: allocations not kept (live map full), frees of unknown pointers.
  uint64_t live_dropped = 0;
  uint64_t unknown_frees = 0;
};

struct MemoryReadout {
  std::vector<DeviceMemory> devices;  // by slot
  // Reports naming no registered device, a negative or huge node, a null
  // pointer or no category: ignored.
  uint64_t bad_reports = 0;
};

class MemoryTracker {
 public:
  static constexpr int kMaxDevices = 8;
  // Node ids come from the tree, dense and far below this; a larger one is a
  // bad report, not a reason to allocate gigabytes of per-node arrays.
  static constexpr int64_t kMaxNode = int64_t{1} << 24;

  MemoryTracker();
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  // The slot of (device type, index), registered on first sight; -1 past
  // kMaxDevices. Slots outlive start(): a caller may keep one.
  int device_slot(int32_t type, int32_t index);

  // Clears every device's data and turns tracking on: at most `max_live`
  // allocations are kept live at once, at most `timeline_points` (>= 2)
  // timeline points per device.
  void start(size_t max_live, size_t timeline_points);
  // Reports, holds and marks are then ignored; what was tracked stays readable.
  void stop();
  bool on() const { return on_.load(std::memory_order_relaxed); }

  // An allocator report. size > 0: `size` bytes allocated at `ptr`, billed
  // to `node`. size < 0: the allocation at `ptr` freed, billed back to the
  // node and category that allocated it, on its device. `reserved`: the
  // allocator's reserved total (the CUDA caching allocator's; 0 on CPU).
  // A held entry's free leaves the live total but not free_bytes, which
  // counts the window's own allocations only. An allocation past max_live
  // counts nowhere but live_dropped (its free then in unknown_frees): the
  // totals stay exact for what is kept.
  // `total`: the allocator's own allocated total after this report.
  void report(uintptr_t ptr, int64_t size, int slot, int64_t node, uint64_t now_ns,
              uint64_t reserved, uint64_t total = 0);
  // report() on the slot of (device type, index), looked up under the same lock.
  void report_on(int32_t type, int32_t index, uintptr_t ptr, int64_t size, int64_t node,
                 uint64_t now_ns, uint64_t reserved, uint64_t total);

  // An allocation made before the window (a parameter, optimizer state)
  // joins the live map: it counts toward the live total and the peak, not
  // toward alloc_bytes. Returns the token release() takes, or 0 when it was
  // not kept (already tracked: then it is only marked `category`, unless it
  // is already of a category other than temporary). `resident`: it has been
  // live since the window began, so it counts toward the peak already
  // reached and every timeline point too (a parameter first seen mid-window).
  uint64_t hold(uintptr_t ptr, int64_t size, int slot, int64_t node, int category,
                bool resident = false);
  // Drops a held allocation from the live total, if the entry at `ptr` is
  // still the one hold() returned `token` for (not a later allocation that
  // reused the address).
  void release(uintptr_t ptr, uint64_t token);

  // The allocation at `ptr` is of `category`: its live bytes move there, and
  // so do its bytes in the peak snapshot when it was live at the peak. False
  // when `ptr` is not tracked. With `only_temporary`, an allocation already
  // of another category keeps it (a parameter autograd saves stays a
  // parameter).
  bool mark(uintptr_t ptr, int category, bool only_temporary = false);

  // Everything tracked so far, while on or after stop(); copies a pending
  // peak into the snapshot first, so a read mid-window changes no number.
  MemoryReadout snapshot();

 private:
  struct Entry {
    uintptr_t ptr = 0;  // 0: an empty slot (a live allocation is never at 0)
    int64_t node = 0;
    int64_t size = 0;
    uint64_t seq = 0;  // insertion order over all devices; a held entry's token
    int8_t slot = 0;
    uint8_t category = kTemporary;
    bool held = false;      // joined through hold(): not one of the window's allocations
    bool resident = false;  // live since the window began: in the peak snapshot whatever its seq
  };

  // ptr -> Entry, open addressing with linear probing and backward-shift
  // deletion (no tombstones, so a long window of churn never slows probes).
  class LiveMap {
   public:
    void reset();
    Entry* find(uintptr_t ptr);
    Entry* insert(uintptr_t ptr);  // ptr absent
    void erase(Entry* e);
    size_t size() const { return size_; }

   private:
    size_t home(uintptr_t ptr) const {
      // Fibonacci hashing: allocations are aligned, their low bits are zero.
      return static_cast<size_t>((static_cast<uint64_t>(ptr) * 0x9E3779B97F4A7C15ull) >> shift_);
    }
    void grow();
    std::vector<Entry> slots_;
    size_t size_ = 0;
    int shift_ = 64;
  };

  struct NodeMem {
    int64_t alloc = 0, freed = 0;
    std::array<int64_t, kCategories> live{};
    std::array<int64_t, kCategories> peak{};
    bool dirty = false;  // live may differ from peak; on the device's dirty list
  };

  // Fixed-width buckets from the first report; past `limit` buckets the
  // width doubles and pairs merge (max), so the points stay within the limit
  // however long the window.
  struct Timeline {
    size_t limit = 2;
    bool started = false;
    uint64_t t0 = 0;
    uint64_t width = 1;  // ns
    std::vector<int64_t> bytes;
    // A report at `now` took the live total from `before` to `after`.
    void add(uint64_t now, int64_t before, int64_t after);
  };

  struct Device {
    int32_t type = 0, index = 0;
    int64_t cur = 0, peak = 0;
    uint64_t peak_ns = 0;
    int64_t peak_node = -1;
    uint64_t max_reserved = 0;
    uint64_t last_ns = 0;   // the latest report's time: a hold's peak time
    bool pending = false;   // a new maximum not yet copied into the peak snapshot
    uint64_t peak_seq = 0;  // entries with seq <= this were live at the peak (if live now)
    uint64_t live_dropped = 0, unknown_frees = 0;
    int64_t held = 0, held_at_peak = 0;  // held bytes live now, and at the peak
    bool reported = false;               // the allocator's totals below are known
    uint64_t total_base = 0, total_max = 0;
    std::vector<NodeMem> nodes;
    std::vector<int64_t> dirty;
    Timeline timeline;
  };

  bool valid(uintptr_t ptr, int slot, int64_t node) const {
    return ptr != 0 && slot >= 0 && slot < device_count_ && node >= 0 && node < kMaxNode;
  }
  NodeMem& node_mem(Device& d, int64_t node);
  void touch(Device& d, int64_t node);
  void flush(Device& d);
  void grew(Device& d, int64_t node, uint64_t now_ns);
  void remove(Entry* e);  // a free or release: out of live and the total
  void move(Entry* e, uint8_t category);
  int slot_locked(int32_t type, int32_t index);
  void report_locked(uintptr_t ptr, int64_t size, int slot, int64_t node, uint64_t now_ns,
                     uint64_t reserved, uint64_t total);

  std::atomic<bool> on_{false};
  std::mutex mu_;  // guards everything below
  size_t max_live_ = 0;
  uint64_t seq_ = 0;
  uint64_t bad_reports_ = 0;
  LiveMap live_;
  int device_count_ = 0;
  std::array<Device, kMaxDevices> devices_;
};

}  // namespace dc
