// MemoryTracker: memory by context in one window. Planted sequences with
// hand-computed numbers, a brute-force reference for the peak snapshot, the
// bounds (live map, timeline), and reports from several threads at once.
#include "memory.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "check.h"

using dc::DeviceMemory;
using dc::kCategories;
using dc::MemoryReadout;
using dc::MemoryTracker;

namespace {

constexpr int32_t kCpu = 0, kCuda = 1;  // c10::DeviceType

// A per-node column read out past its end is 0: the tracker's arrays stop at
// the highest node the device saw.
int64_t at(const std::vector<int64_t>& col, int64_t node) {
  return static_cast<size_t>(node) < col.size() ? col[static_cast<size_t>(node)] : 0;
}

int64_t sum_peak_bytes(const DeviceMemory& d) {
  int64_t sum = 0;
  for (const auto& col : d.peak_bytes)
    for (int64_t v : col) sum += v;
  return sum;
}

// By value: CHECK_EQ binds its operands by reference, and a readout's
// member would not outlive the statement.
int64_t live_now(MemoryTracker& m, size_t slot) { return m.snapshot().devices[slot].live; }

}  // namespace

TEST(memory_category_names_follow_the_enum) {
  CHECK_EQ(kCategories, 6);
  CHECK_EQ(std::strcmp(dc::kCategoryNames[dc::kTemporary], "temporary"), 0);
  CHECK_EQ(std::strcmp(dc::kCategoryNames[dc::kParameter], "parameter"), 0);
  CHECK_EQ(std::strcmp(dc::kCategoryNames[dc::kGradient], "gradient"), 0);
  CHECK_EQ(std::strcmp(dc::kCategoryNames[dc::kOptimizerState], "optimizer_state"), 0);
  CHECK_EQ(std::strcmp(dc::kCategoryNames[dc::kSavedForBackward], "saved_for_backward"), 0);
  CHECK_EQ(std::strcmp(dc::kCategoryNames[dc::kInput], "input"), 0);
}

TEST(memory_device_slots_are_small_bounded_and_survive_start) {
  MemoryTracker m;
  CHECK_EQ(m.device_slot(kCuda, 0), 0);
  CHECK_EQ(m.device_slot(kCpu, 0), 1);
  CHECK_EQ(m.device_slot(kCuda, 0), 0);
  for (int i = 1; i < 7; ++i) CHECK_EQ(m.device_slot(kCuda, i), i + 1);
  CHECK_EQ(m.device_slot(kCuda, 7), -1);  // a ninth device
  m.start(16, 8);
  CHECK_EQ(m.device_slot(kCpu, 0), 1);
  const MemoryReadout r = m.snapshot();
  CHECK_EQ(r.devices.size(), size_t{8});
  CHECK_EQ(r.devices[1].type, kCpu);
  CHECK_EQ(r.devices[7].index, 6);
}

TEST(memory_planted_sequence_on_two_nodes_and_two_devices) {
  MemoryTracker m;
  const int cpu = m.device_slot(kCpu, 0);
  const int cuda = m.device_slot(kCuda, 0);
  m.start(1000, 100);
  CHECK(m.on());

  // CUDA: node 0 holds a 400-byte parameter from before the window.
  const uint64_t param = m.hold(0xA000, 400, cuda, 0, dc::kParameter);
  CHECK(param != 0);
  m.report(0x1000, 100, cuda, 1, 10, 2048);      // live 500
  m.report(0x2000, 200, cuda, 0, 20, 4096);      // live 700: the first peak
  CHECK(m.mark(0x2000, dc::kSavedForBackward));  // while the peak is pending
  m.report(0x1000, -100, cuda, 1, 30, 4096);     // 600: the peak's snapshot is taken
  m.report(0x3000, 50, cuda, 1, 40, 4096);       // 650, below the peak
  CHECK(m.mark(0x3000, dc::kGradient));          // not live at the peak
  CHECK(m.mark(0x2000, dc::kInput));             // live at the peak: its peak bytes move
  CHECK(m.mark(0x2000, dc::kInput));             // already: nothing moves
  m.report(0x2000, -200, cuda, 0, 50, 4096);     // 450
  m.release(0xA000, param);                      // 50: no free_bytes, held before
  // CPU: an allocation freed in a report naming another node: billed back.
  m.report(0x5000, 64, cpu, 1, 5, 0);
  m.report(0x5000, -64, cpu, 0, 6, 0);

  MemoryReadout r = m.snapshot();
  CHECK_EQ(r.bad_reports, uint64_t{0});
  {
    const DeviceMemory& d = r.devices[static_cast<size_t>(cuda)];
    CHECK_EQ(d.type, kCuda);
    CHECK_EQ(d.peak, 700);
    CHECK_EQ(d.peak_ns, uint64_t{20});
    CHECK_EQ(d.peak_node, 0);
    CHECK_EQ(d.max_reserved, uint64_t{4096});
    CHECK_EQ(d.live, 50);
    CHECK_EQ(at(d.alloc_bytes, 0), 200);
    CHECK_EQ(at(d.free_bytes, 0), 200);
    CHECK_EQ(at(d.alloc_bytes, 1), 150);
    CHECK_EQ(at(d.free_bytes, 1), 100);
    CHECK_EQ(at(d.peak_bytes[dc::kParameter], 0), 400);
    CHECK_EQ(at(d.peak_bytes[dc::kInput], 0), 200);
    CHECK_EQ(at(d.peak_bytes[dc::kSavedForBackward], 0), 0);
    CHECK_EQ(at(d.peak_bytes[dc::kTemporary], 0), 0);
    CHECK_EQ(at(d.peak_bytes[dc::kTemporary], 1), 100);
    CHECK_EQ(at(d.peak_bytes[dc::kGradient], 1), 0);
    CHECK_EQ(sum_peak_bytes(d), 700);
  }
  {
    const DeviceMemory& d = r.devices[static_cast<size_t>(cpu)];
    CHECK_EQ(d.peak, 64);
    CHECK_EQ(d.peak_ns, uint64_t{5});
    CHECK_EQ(d.peak_node, 1);
    CHECK_EQ(d.max_reserved, uint64_t{0});
    CHECK_EQ(d.live, 0);
    CHECK_EQ(d.alloc_bytes.size(), size_t{2});  // up to the highest node seen
    CHECK_EQ(at(d.alloc_bytes, 1), 64);
    CHECK_EQ(at(d.free_bytes, 1), 64);
    CHECK_EQ(at(d.free_bytes, 0), 0);
    CHECK_EQ(at(d.peak_bytes[dc::kTemporary], 1), 64);
  }

  // A new, higher peak replaces the whole snapshot: node 0 holds nothing now.
  m.report(0x4000, 900, cuda, 1, 60, 1024);  // 950
  r = m.snapshot();
  const DeviceMemory& d = r.devices[static_cast<size_t>(cuda)];
  CHECK_EQ(d.peak, 950);
  CHECK_EQ(d.peak_ns, uint64_t{60});
  CHECK_EQ(d.peak_node, 1);
  CHECK_EQ(d.max_reserved, uint64_t{4096});
  for (int c = 0; c < kCategories; ++c) CHECK_EQ(at(d.peak_bytes[c], 0), 0);
  CHECK_EQ(at(d.peak_bytes[dc::kTemporary], 1), 900);
  CHECK_EQ(at(d.peak_bytes[dc::kGradient], 1), 50);
  CHECK_EQ(at(d.alloc_bytes, 1), 1050);
  CHECK_EQ(sum_peak_bytes(d), 950);
  // The timeline's points: one bucket per report time from 10 ns (width 1).
  CHECK_EQ(d.timeline_ns.front(), uint64_t{10});
  CHECK_EQ(d.timeline_ns.size(), size_t{51});
  CHECK_EQ(d.timeline_bytes.front(), 500);
  CHECK_EQ(d.timeline_bytes[10], 700);
  CHECK_EQ(d.timeline_bytes[11], 700);  // no report at 21 ns: the level held
  CHECK_EQ(d.timeline_bytes.back(), 950);

  m.stop();
  CHECK(!m.on());
  m.report(0x7000, 10, cuda, 0, 70, 0);  // ignored
  CHECK(!m.mark(0x4000, dc::kGradient));
  CHECK_EQ(live_now(m, static_cast<size_t>(cuda)), 950);
  m.start(1000, 100);  // clears the window
  r = m.snapshot();
  CHECK_EQ(r.devices[static_cast<size_t>(cuda)].peak, 0);
  CHECK_EQ(r.devices[static_cast<size_t>(cuda)].alloc_bytes.size(), size_t{0});
  CHECK(!m.mark(0x4000, dc::kGradient));
}

TEST(memory_stale_token_does_not_release_a_reused_address) {
  MemoryTracker m;
  const int s = m.device_slot(kCuda, 0);
  m.start(100, 16);
  const uint64_t t1 = m.hold(0xB000, 100, s, 0, dc::kParameter);
  CHECK(t1 != 0);
  m.report(0xB000, -100, s, 0, 1, 0);  // the held parameter is freed
  m.report(0xB000, 300, s, 1, 2, 0);   // and its address reused
  m.release(0xB000, t1);               // stale: nothing happens
  MemoryReadout r = m.snapshot();
  CHECK_EQ(r.devices[0].live, 300);
  CHECK_EQ(at(r.devices[0].free_bytes, 0), 0);  // a held entry's free is not the window's
  CHECK_EQ(at(r.devices[0].alloc_bytes, 1), 300);

  const uint64_t t2 = m.hold(0xC000, 40, s, 2, dc::kOptimizerState);
  CHECK(t2 != 0 && t2 != t1);
  m.release(0xC000, t1);  // another entry's token
  CHECK_EQ(live_now(m, 0), 340);
  m.release(0xC000, t2);
  CHECK_EQ(live_now(m, 0), 300);
  m.release(0xC000, t2);  // twice: already gone
  CHECK_EQ(live_now(m, 0), 300);

  // Holding what the window allocated only marks it; its token is none.
  CHECK_EQ(m.hold(0xB000, 300, s, 1, dc::kGradient), uint64_t{0});
  m.release(0xB000, 0);
  r = m.snapshot();
  CHECK_EQ(r.devices[0].live, 300);
  CHECK_EQ(r.devices[0].peak, 340);
  CHECK_EQ(at(r.devices[0].peak_bytes[dc::kGradient], 1), 300);  // live at the peak
  CHECK_EQ(at(r.devices[0].peak_bytes[dc::kOptimizerState], 2), 40);
}

TEST(memory_unknown_frees_and_bad_reports_are_counted_and_ignored) {
  MemoryTracker m;
  const int s = m.device_slot(kCuda, 0);
  m.start(100, 16);
  m.report(0x1000, 10, s, 0, 1, 0);
  m.report(0xDEAD, -10, s, 0, 2, 0);  // allocated before the window, never held
  m.report(0xDEAD, -10, s, 0, 3, 0);
  m.report(0x2000, 10, 5, 0, 4, 0);  // no such slot
  m.report(0x2000, 10, -1, 0, 4, 0);
  m.report(0x2000, 10, s, -1, 4, 0);  // no node
  m.report(0x2000, 10, s, MemoryTracker::kMaxNode, 4, 0);
  m.report(0, 10, s, 0, 4, 0);      // null
  m.report(0x2000, 0, s, 0, 4, 0);  // nothing allocated: not a report at all
  CHECK_EQ(m.hold(0x3000, 10, s, 0, kCategories), uint64_t{0});
  CHECK(!m.mark(0xDEAD, dc::kGradient));
  CHECK(!m.mark(0x1000, -1));
  const MemoryReadout r = m.snapshot();
  CHECK_EQ(r.devices[0].unknown_frees, uint64_t{2});
  CHECK_EQ(r.bad_reports, uint64_t{6});
  CHECK_EQ(r.devices[0].live, 10);
  CHECK_EQ(r.devices[0].alloc_bytes.size(), size_t{1});
}

TEST(memory_live_map_is_bounded_and_totals_stay_exact_for_what_is_kept) {
  MemoryTracker m;
  const int s = m.device_slot(kCuda, 0);
  m.start(2, 16);
  m.report(0x1000, 10, s, 0, 1, 0);
  m.report(0x2000, 20, s, 0, 2, 0);
  m.report(0x3000, 40, s, 1, 3, 0);                                 // the map is full: dropped
  CHECK_EQ(m.hold(0x4000, 80, s, 1, dc::kParameter), uint64_t{0});  // dropped
  CHECK(!m.mark(0x3000, dc::kGradient));
  m.report(0x3000, -40, s, 1, 4, 0);  // its free is unknown
  m.report(0x1000, -10, s, 0, 5, 0);
  m.report(0x5000, 5, s, 1, 6, 0);  // room again
  // An allocation at a kept address whose free never came: the old one goes.
  m.report(0x5000, 7, s, 1, 7, 0);
  const MemoryReadout r = m.snapshot();
  const DeviceMemory& d = r.devices[0];
  CHECK_EQ(d.live_dropped, uint64_t{2});
  CHECK_EQ(d.unknown_frees, uint64_t{1});
  CHECK_EQ(d.live, 27);
  CHECK_EQ(d.peak, 30);
  CHECK_EQ(at(d.alloc_bytes, 0), 30);
  CHECK_EQ(at(d.free_bytes, 0), 10);
  CHECK_EQ(at(d.alloc_bytes, 1), 12);
  CHECK_EQ(at(d.free_bytes, 1), 5);
  CHECK_EQ(at(d.peak_bytes[dc::kTemporary], 0), 30);
  CHECK_EQ(at(d.peak_bytes[dc::kTemporary], 1), 0);
}

namespace {

// The peak snapshot the slow way: at every new maximum, copy every node's
// live bytes and remember which allocations were live; a later mark of one
// of those moves its bytes in the copy too.
class Reference {
 public:
  static constexpr int kSlots = 2, kNodes = 16;

  void alloc(uintptr_t ptr, int64_t size, int slot, int64_t node, uint64_t token, bool held,
             int category) {
    live_[ptr] = Entry{node, size, slot, category, held, token, ++id_};
    if (!held) alloc_[slot][node] += size;
    cur_[slot] += size;
    if (cur_[slot] <= peak_[slot]) return;
    peak_[slot] = cur_[slot];
    for (auto& row : peak_bytes_[slot]) row.fill(0);
    at_peak_[slot].clear();
    for (const auto& kv : live_) {
      const Entry& e = kv.second;
      if (e.slot != slot) continue;
      peak_bytes_[slot][e.node][e.category] += e.size;
      at_peak_[slot].insert(e.id);
    }
  }
  void free(uintptr_t ptr) {
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    const Entry& e = it->second;
    if (!e.held) freed_[e.slot][e.node] += e.size;
    cur_[e.slot] -= e.size;
    live_.erase(it);
  }
  void release(uintptr_t ptr, uint64_t token) {
    auto it = live_.find(ptr);
    if (it != live_.end() && it->second.held && it->second.token == token) free(ptr);
  }
  bool mark(uintptr_t ptr, int category) {
    auto it = live_.find(ptr);
    if (it == live_.end()) return false;
    Entry& e = it->second;
    if (at_peak_[e.slot].count(e.id) != 0) {
      peak_bytes_[e.slot][e.node][e.category] -= e.size;
      peak_bytes_[e.slot][e.node][category] += e.size;
    }
    e.category = category;
    return true;
  }
  bool live(uintptr_t ptr) const { return live_.count(ptr) != 0; }

  void compare(const MemoryReadout& r, int event) const {
    for (int s = 0; s < kSlots; ++s) {
      const DeviceMemory& d = r.devices[static_cast<size_t>(s)];
      const int failures = check::failures().load();
      CHECK_EQ(d.peak, peak_[s]);
      CHECK_EQ(d.live, cur_[s]);
      CHECK_EQ(sum_peak_bytes(d), peak_[s]);
      for (int64_t n = 0; n < kNodes; ++n) {
        CHECK_EQ(at(d.alloc_bytes, n), alloc_[s][n]);
        CHECK_EQ(at(d.free_bytes, n), freed_[s][n]);
        for (int c = 0; c < kCategories; ++c)
          CHECK_EQ(at(d.peak_bytes[c], n), peak_bytes_[s][n][c]);
      }
      if (check::failures().load() != failures)
        std::fprintf(stderr, "  slot %d after event %d\n", s, event);
    }
  }

 private:
  struct Entry {
    int64_t node, size;
    int slot, category;
    bool held;
    uint64_t token, id;
  };
  std::map<uintptr_t, Entry> live_;
  uint64_t id_ = 0;
  int64_t cur_[kSlots] = {}, peak_[kSlots] = {};
  int64_t alloc_[kSlots][kNodes] = {}, freed_[kSlots][kNodes] = {};
  std::array<int64_t, kCategories> peak_bytes_[kSlots][kNodes] = {};
  std::set<uint64_t> at_peak_[kSlots];
};

}  // namespace

TEST(memory_peak_snapshot_equals_a_brute_force_replay) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    MemoryTracker m;
    m.device_slot(kCuda, 0);
    m.device_slot(kCpu, 0);
    m.start(1 << 12, 64);
    Reference ref;
    constexpr int kPtrs = 200, kEvents = 4000;
    std::vector<uint64_t> tokens(kPtrs, 0);  // the latest hold's, per address
    std::vector<uint64_t> issued;            // every token, stale ones included
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    for (int ev = 0; ev < kEvents; ++ev) {
      const int p = pick(kPtrs);
      const uintptr_t ptr = 0x10000 + static_cast<uintptr_t>(p) * 512;
      const uint64_t now = static_cast<uint64_t>(ev) * 10;
      if (!ref.live(ptr)) {
        const int64_t size = 1 + pick(1000);
        const int slot = pick(2);
        const int64_t node = pick(Reference::kNodes);
        if (pick(4) != 0) {
          m.report(ptr, size, slot, node, now, 0);
          ref.alloc(ptr, size, slot, node, 0, false, dc::kTemporary);
        } else {
          const int category = pick(kCategories);
          const uint64_t token = m.hold(ptr, size, slot, node, category);
          CHECK(token != 0);
          tokens[static_cast<size_t>(p)] = token;
          issued.push_back(token);
          ref.alloc(ptr, size, slot, node, token, true, category);
        }
      } else {
        const int what = pick(10);
        if (what < 5) {
          m.report(ptr, -1, pick(2), pick(Reference::kNodes), now, 0);
          ref.free(ptr);
        } else if (what < 8) {
          const int category = pick(kCategories);
          CHECK(m.mark(ptr, category));
          CHECK(ref.mark(ptr, category));
        } else {
          // The address's own latest token, or any earlier one (stale).
          const uint64_t token =
              what == 8 || issued.empty()
                  ? tokens[static_cast<size_t>(p)]
                  : issued[static_cast<size_t>(pick(static_cast<int>(issued.size())))];
          m.release(ptr, token);
          ref.release(ptr, token);
        }
      }
      // Reading mid-window flushes a pending peak: it must change nothing.
      if (ev % 397 == 0) ref.compare(m.snapshot(), ev);
    }
    ref.compare(m.snapshot(), kEvents);
  }
}

TEST(memory_timeline_stays_bounded_and_its_max_is_the_peak) {
  MemoryTracker m;
  const int s = m.device_slot(kCuda, 0);
  constexpr size_t kPoints = 500;
  m.start(1 << 16, kPoints);
  std::mt19937 rng(7);
  std::vector<uintptr_t> live;
  uint64_t now = 1000000;
  const uint64_t first = now + 1;
  for (int i = 0; i < 1000000; ++i) {
    now += i == 0 ? 1 : 1 + rng() % 1000;
    if (live.empty() || (live.size() < 4000 && rng() % 2 == 0)) {
      const uintptr_t ptr = 0x100000 + static_cast<uintptr_t>(i) * 64;
      m.report(ptr, 1 + rng() % 4096, s, rng() % 50, now, 0);
      live.push_back(ptr);
    } else {
      const size_t k = rng() % live.size();
      m.report(live[k], -1, s, 0, now, 0);
      live[k] = live.back();
      live.pop_back();
    }
  }
  const MemoryReadout r = m.snapshot();
  const DeviceMemory& d = r.devices[0];
  CHECK(d.timeline_bytes.size() <= kPoints);
  CHECK(d.timeline_bytes.size() > kPoints / 4);  // the window spans most buckets
  CHECK_EQ(d.timeline_ns.size(), d.timeline_bytes.size());
  CHECK_EQ(*std::max_element(d.timeline_bytes.begin(), d.timeline_bytes.end()), d.peak);
  CHECK_EQ(d.timeline_ns.front(), first);
  CHECK(d.timeline_ns.back() <= now);
  const uint64_t width = d.timeline_ns[1] - d.timeline_ns[0];
  CHECK_EQ(width & (width - 1), uint64_t{0});  // doubled from 1 ns
  CHECK(now - first < width * kPoints);
  CHECK(d.peak_ns >= first && d.peak_ns <= now);
  CHECK_EQ(d.unknown_frees + d.live_dropped, uint64_t{0});
}

TEST(memory_reports_from_four_threads_keep_totals_exact) {
  // Four threads on two devices, each its own node and addresses, marking
  // some, while a fifth reads: afterwards every total is the sum of theirs.
  MemoryTracker m;
  const int slots[2] = {m.device_slot(kCuda, 0), m.device_slot(kCpu, 0)};
  m.start(1 << 16, 128);
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  std::atomic<bool> done{false};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const uintptr_t base = 0x10000000 * static_cast<uintptr_t>(t + 1);
      for (int i = 0; i < kEach; ++i) {
        const uintptr_t ptr = base + static_cast<uintptr_t>(i) * 256;
        const uint64_t now = static_cast<uint64_t>(i);
        m.report(ptr, 16 * (i % 7 + 1), slots[t % 2], t, now, 1u << 20);
        if (i % 3 == 0) m.mark(ptr, dc::kSavedForBackward);
        if (i % 10 != 0) m.report(ptr, -16 * (i % 7 + 1), slots[t % 2], t, now, 1u << 20);
      }
    });
  std::thread reader([&] {
    while (!done.load()) {
      const MemoryReadout r = m.snapshot();
      for (const DeviceMemory& d : r.devices) CHECK_EQ(sum_peak_bytes(d), d.peak);
    }
  });
  for (std::thread& th : threads) th.join();
  done.store(true);
  reader.join();

  int64_t alloc = 0, kept = 0;
  for (int i = 0; i < kEach; ++i) {
    alloc += 16 * (i % 7 + 1);
    if (i % 10 == 0) kept += 16 * (i % 7 + 1);
  }
  const MemoryReadout r = m.snapshot();
  for (int t = 0; t < kThreads; ++t) {
    const DeviceMemory& d = r.devices[static_cast<size_t>(slots[t % 2])];
    CHECK_EQ(at(d.alloc_bytes, t), alloc);
    CHECK_EQ(at(d.free_bytes, t), alloc - kept);
  }
  for (const DeviceMemory& d : r.devices) {
    CHECK_EQ(d.live, 2 * kept);
    CHECK(d.peak >= 2 * kept);
    CHECK_EQ(sum_peak_bytes(d), d.peak);
    CHECK_EQ(d.max_reserved, uint64_t{1} << 20);
    CHECK_EQ(d.unknown_frees + d.live_dropped, uint64_t{0});
  }
  CHECK_EQ(r.bad_reports, uint64_t{0});
}

TEST(memory_report_cost_uncontended) {
  // What one allocator report costs the thread that makes it: an alloc and
  // its free on a few dozen live addresses, one thread, the mutex free.
  MemoryTracker m;
  const int s = m.device_slot(kCuda, 0);
  m.start(1 << 16, 1000);
  constexpr int kPairs = 500000, kLive = 64;
  uint64_t now = 0;
  for (int i = 0; i < kLive; ++i) m.report(0x1000 + 512 * i, 512, s, i % 8, ++now, 0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kPairs; ++i) {
    const uintptr_t ptr = 0x1000 + 512 * static_cast<uintptr_t>(i % kLive);
    m.report(ptr, -512, s, 0, ++now, 0);
    m.report(ptr, 512, s, i % 8, ++now, 1 << 20);
  }
  const auto t1 = std::chrono::steady_clock::now();
  const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / (2.0 * kPairs);
  std::printf("     memory: %.1f ns per report (uncontended)\n", ns);
  const MemoryReadout r = m.snapshot();
  CHECK_EQ(r.devices[0].live, 512 * kLive);
  CHECK_EQ(r.devices[0].peak, 512 * kLive);
}
