// MemoryTracker: blocks made before the window (resident holds), the
// allocator's own totals, and marks that keep a category already told.
#include <cstdint>
#include <vector>

#include "check.h"
#include "memory.h"

using dc::MemoryReadout;
using dc::MemoryTracker;

namespace {

constexpr int32_t kCpu = 0;

int64_t at(const std::vector<int64_t>& col, int64_t node) {
  return static_cast<size_t>(node) < col.size() ? col[static_cast<size_t>(node)] : 0;
}

}  // namespace

TEST(memory_a_resident_hold_counts_at_the_peak_already_reached) {
  MemoryTracker m;
  const int cpu = m.device_slot(kCpu, 0);
  m.start(64, 16);
  m.report(0x1000, 300, cpu, 1, 100, 0);  // the peak: 300
  m.report(0x1000, -300, cpu, 1, 200, 0);
  m.report(0x2000, 100, cpu, 2, 300, 0);
  // a parameter seen only now, live since the window began
  const uint64_t token = m.hold(0x9000, 1000, cpu, 3, dc::kParameter, true);
  CHECK(token != 0);
  MemoryReadout r = m.snapshot();
  const dc::DeviceMemory& d = r.devices[static_cast<size_t>(cpu)];
  CHECK_EQ(d.peak, 1300);
  CHECK_EQ(d.peak_ns, uint64_t{100});  // the moment did not move
  CHECK_EQ(d.held_at_peak, 1000);
  CHECK_EQ(at(d.peak_bytes[dc::kParameter], 3), 1000);
  CHECK_EQ(at(d.peak_bytes[dc::kTemporary], 1), 300);
  CHECK_EQ(at(d.alloc_bytes, 3), 0);  // not one of the window's allocations
  CHECK_EQ(d.live, 1100);
  for (int64_t b : d.timeline_bytes) CHECK(b >= 1000);
  // released: out of the live total, not of the peak it was part of
  m.release(0x9000, token);
  r = m.snapshot();
  CHECK_EQ(r.devices[static_cast<size_t>(cpu)].live, 100);
  CHECK_EQ(r.devices[static_cast<size_t>(cpu)].peak, 1300);
}

TEST(memory_a_resident_block_marked_later_moves_its_peak_bytes) {
  MemoryTracker m;
  const int cpu = m.device_slot(kCpu, 0);
  m.start(64, 16);
  m.report(0x1000, 500, cpu, 1, 100, 0);
  m.hold(0x9000, 200, cpu, 2, dc::kGradient, true);
  m.report(0x1000, -500, cpu, 1, 200, 0);
  CHECK(m.mark(0x9000, dc::kOptimizerState));
  const MemoryReadout r = m.snapshot();
  const dc::DeviceMemory& d = r.devices[static_cast<size_t>(cpu)];
  CHECK_EQ(d.peak, 700);
  CHECK_EQ(at(d.peak_bytes[dc::kGradient], 2), 0);
  CHECK_EQ(at(d.peak_bytes[dc::kOptimizerState], 2), 200);
}

TEST(memory_marks_only_a_temporary_when_asked) {
  MemoryTracker m;
  const int cpu = m.device_slot(kCpu, 0);
  m.start(64, 16);
  m.report(0x1000, 64, cpu, 1, 100, 0);
  CHECK(m.mark(0x1000, dc::kParameter));
  // autograd saves a parameter: it stays a parameter
  CHECK(m.mark(0x1000, dc::kSavedForBackward, true));
  m.report(0x2000, 32, cpu, 1, 110, 0);
  CHECK(m.mark(0x2000, dc::kSavedForBackward, true));
  CHECK(!m.mark(0x3000, dc::kSavedForBackward, true));  // not tracked
  // holding a tracked block marks it, and only if it is still a temporary
  CHECK_EQ(m.hold(0x2000, 32, cpu, 1, dc::kGradient), uint64_t{0});
  const MemoryReadout r = m.snapshot();
  const dc::DeviceMemory& d = r.devices[static_cast<size_t>(cpu)];
  CHECK_EQ(at(d.peak_bytes[dc::kParameter], 1), 64);
  CHECK_EQ(at(d.peak_bytes[dc::kSavedForBackward], 1), 32);
  CHECK_EQ(at(d.peak_bytes[dc::kGradient], 1), 0);
}

TEST(memory_the_allocators_peak_is_its_highest_total_over_the_window) {
  MemoryTracker m;
  const int cpu = m.device_slot(kCpu, 0);
  m.start(64, 16);
  // the allocator held 5000 before the window; its totals after each report
  m.report(0x1000, 100, cpu, 1, 10, 0, 5100);
  m.report(0x2000, 400, cpu, 1, 20, 0, 5500);
  m.report(0x1000, -100, cpu, 1, 30, 0, 5400);
  m.report(0x3000, 50, cpu, 1, 40, 0, 5450);
  m.hold(0x9000, 1000, cpu, 2, dc::kParameter, true);
  const MemoryReadout r = m.snapshot();
  const dc::DeviceMemory& d = r.devices[static_cast<size_t>(cpu)];
  CHECK_EQ(d.allocator_peak, 500);
  CHECK_EQ(d.peak - d.held_at_peak, d.allocator_peak);
  // the same through report_on, the slot looked up by device
  MemoryTracker n;
  n.start(64, 16);
  n.report_on(kCpu, 0, 0x1000, 100, 1, 10, 0, 200);
  n.report_on(kCpu, 0, 0x1000, -100, 1, 20, 0, 100);
  const MemoryReadout s = n.snapshot();
  CHECK_EQ(s.devices.size(), size_t{1});
  CHECK_EQ(s.devices[0].allocator_peak, 100);
  CHECK_EQ(s.devices[0].free_bytes[1], 100);
}
