#include "memory.h"

#include <algorithm>
#include <utility>

namespace dc {

namespace {

constexpr size_t kInitialSlots = 1024;  // a power of two

}  // namespace

// --- the live map ---

void MemoryTracker::LiveMap::reset() {
  // Shrink back: a window with millions of live allocations gives its
  // memory back at the next start.
  std::vector<Entry>(kInitialSlots).swap(slots_);
  size_ = 0;
  shift_ = 64 - __builtin_ctzll(kInitialSlots);
}

MemoryTracker::Entry* MemoryTracker::LiveMap::find(uintptr_t ptr) {
  const size_t mask = slots_.size() - 1;
  for (size_t i = home(ptr);; i = (i + 1) & mask) {
    Entry& e = slots_[i];
    if (e.ptr == ptr) return &e;
    if (e.ptr == 0) return nullptr;
  }
}

MemoryTracker::Entry* MemoryTracker::LiveMap::insert(uintptr_t ptr) {
  if ((size_ + 1) * 4 > slots_.size() * 3) grow();
  const size_t mask = slots_.size() - 1;
  size_t i = home(ptr);
  while (slots_[i].ptr != 0) i = (i + 1) & mask;
  ++size_;
  slots_[i] = Entry{};
  slots_[i].ptr = ptr;
  return &slots_[i];
}

void MemoryTracker::LiveMap::erase(Entry* e) {
  const size_t mask = slots_.size() - 1;
  size_t hole = static_cast<size_t>(e - slots_.data());
  // Pull back every later entry of the run whose home is at or before the
  // hole, so a probe never stops early at the hole.
  for (size_t j = (hole + 1) & mask; slots_[j].ptr != 0; j = (j + 1) & mask) {
    const size_t h = home(slots_[j].ptr);
    if (((j - h) & mask) >= ((j - hole) & mask)) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole].ptr = 0;
  --size_;
}

void MemoryTracker::LiveMap::grow() {
  std::vector<Entry> old(slots_.size() * 2);
  old.swap(slots_);
  --shift_;
  const size_t mask = slots_.size() - 1;
  for (const Entry& e : old) {
    if (e.ptr == 0) continue;
    size_t i = home(e.ptr);
    while (slots_[i].ptr != 0) i = (i + 1) & mask;
    slots_[i] = e;
  }
}

// --- the timeline ---

void MemoryTracker::Timeline::add(uint64_t now, int64_t before, int64_t after) {
  if (!started) {
    started = true;
    t0 = now;
  }
  // Reports race to the mutex, so a time may be a little older than the
  // last bucket: it lands in the last bucket.
  auto bucket = [&] {
    const size_t i = now > t0 ? static_cast<size_t>((now - t0) / width) : 0;
    return bytes.empty() ? i : std::max(i, bytes.size() - 1);
  };
  size_t i = bucket();
  while (i >= limit) {
    const size_t n = (bytes.size() + 1) / 2;
    for (size_t k = 0; k < n; ++k)
      bytes[k] = 2 * k + 1 < bytes.size() ? std::max(bytes[2 * k], bytes[2 * k + 1]) : bytes[2 * k];
    bytes.resize(n);
    width *= 2;
    i = bucket();
  }
  // Buckets no report reached held the level before this one throughout.
  while (bytes.size() <= i) bytes.push_back(before);
  bytes[i] = std::max(bytes[i], std::max(before, after));
}

// --- the tracker ---

MemoryTracker::MemoryTracker() { live_.reset(); }

int MemoryTracker::device_slot(int32_t type, int32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  return slot_locked(type, index);
}

int MemoryTracker::slot_locked(int32_t type, int32_t index) {
  for (int s = 0; s < device_count_; ++s)
    if (devices_[s].type == type && devices_[s].index == index) return s;
  if (device_count_ == kMaxDevices) return -1;
  Device& d = devices_[device_count_];
  d.type = type;
  d.index = index;
  return device_count_++;
}

void MemoryTracker::start(size_t max_live, size_t timeline_points) {
  std::lock_guard<std::mutex> lock(mu_);
  max_live_ = max_live;
  seq_ = 0;
  bad_reports_ = 0;
  live_.reset();
  for (Device& d : devices_) {
    Device fresh;
    fresh.type = d.type;
    fresh.index = d.index;
    fresh.timeline.limit = std::max<size_t>(timeline_points, 2);  // a pair to merge
    d = std::move(fresh);
  }
  on_.store(true, std::memory_order_relaxed);
}

void MemoryTracker::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  on_.store(false, std::memory_order_relaxed);
}

MemoryTracker::NodeMem& MemoryTracker::node_mem(Device& d, int64_t node) {
  const size_t n = static_cast<size_t>(node);
  // resize() grows the capacity geometrically: amortized O(1) per new node.
  if (n >= d.nodes.size()) d.nodes.resize(n + 1);
  return d.nodes[n];
}

void MemoryTracker::touch(Device& d, int64_t node) {
  NodeMem& m = d.nodes[static_cast<size_t>(node)];
  if (m.dirty) return;
  m.dirty = true;
  d.dirty.push_back(node);
}

void MemoryTracker::flush(Device& d) {
  for (int64_t node : d.dirty) {
    NodeMem& m = d.nodes[static_cast<size_t>(node)];
    m.peak = m.live;
    m.dirty = false;
  }
  d.dirty.clear();
  d.pending = false;
  // No entry of this device came in since the maximum (it would have been a
  // new one), so every one up to now was live at it.
  d.peak_seq = seq_;
}

void MemoryTracker::grew(Device& d, int64_t node, uint64_t now_ns) {
  if (d.cur <= d.peak) return;
  d.peak = d.cur;
  d.peak_ns = now_ns;
  d.peak_node = node;
  d.held_at_peak = d.held;
  d.pending = true;
}

void MemoryTracker::remove(Entry* e) {
  Device& d = devices_[e->slot];
  // The live state is the peak's until this first decrease: keep it.
  if (d.pending) flush(d);
  NodeMem& m = d.nodes[static_cast<size_t>(e->node)];
  m.live[e->category] -= e->size;
  // free_bytes is for the window's own allocations, so that alloc - free is
  // what they still hold; a held entry only leaves the live total.
  if (!e->held) m.freed += e->size;
  if (e->held) d.held -= e->size;
  touch(d, e->node);
  d.cur -= e->size;
  live_.erase(e);
}

void MemoryTracker::move(Entry* e, uint8_t category) {
  if (e->category == category) return;
  Device& d = devices_[e->slot];
  NodeMem& m = d.nodes[static_cast<size_t>(e->node)];
  m.live[e->category] -= e->size;
  m.live[category] += e->size;
  if (!d.pending && (e->seq <= d.peak_seq || e->resident)) {
    // Live at the peak and ever since: its peak bytes move with it, and the
    // node's live and peak stay as equal (or not) as they were.
    m.peak[e->category] -= e->size;
    m.peak[category] += e->size;
  } else {
    // Not in the snapshot, or the snapshot is due: the next flush copies it.
    touch(d, e->node);
  }
  e->category = category;
}

void MemoryTracker::report(uintptr_t ptr, int64_t size, int slot, int64_t node, uint64_t now_ns,
                           uint64_t reserved, uint64_t total) {
  if (!on() || size == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!on_.load(std::memory_order_relaxed)) return;
  report_locked(ptr, size, slot, node, now_ns, reserved, total);
}

void MemoryTracker::report_on(int32_t type, int32_t index, uintptr_t ptr, int64_t size,
                              int64_t node, uint64_t now_ns, uint64_t reserved, uint64_t total) {
  if (!on() || size == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!on_.load(std::memory_order_relaxed)) return;
  report_locked(ptr, size, slot_locked(type, index), node, now_ns, reserved, total);
}

void MemoryTracker::report_locked(uintptr_t ptr, int64_t size, int slot, int64_t node,
                                  uint64_t now_ns, uint64_t reserved, uint64_t total) {
  if (!valid(ptr, slot, node)) {
    ++bad_reports_;
    return;
  }
  Device& d = devices_[slot];
  d.max_reserved = std::max(d.max_reserved, reserved);
  if (total != 0) {
    if (!d.reported) {
      // The total before this report: what the allocator held before the window.
      d.reported = true;
      const uint64_t magnitude = static_cast<uint64_t>(size < 0 ? -size : size);
      d.total_base = size > 0 && total >= magnitude ? total - magnitude : total;
      if (size < 0) d.total_base += magnitude;
    }
    d.total_max = std::max(d.total_max, total);
  }
  d.last_ns = now_ns;
  if (size < 0) {
    Entry* e = live_.find(ptr);
    if (e == nullptr) {
      // Allocated before the window and not held, or not kept (live map full).
      ++d.unknown_frees;
      return;
    }
    Device& owner = devices_[e->slot];
    const int64_t before = owner.cur;
    remove(e);
    owner.timeline.add(now_ns, before, owner.cur);
    return;
  }
  const int64_t before = d.cur;
  // A new allocation at a tracked address: its free was never reported.
  if (Entry* stale = live_.find(ptr)) {
    Device& owner = devices_[stale->slot];
    const int64_t owner_before = owner.cur;
    remove(stale);
    if (&owner != &d) owner.timeline.add(now_ns, owner_before, owner.cur);
  }
  if (live_.size() >= max_live_) {
    // Not kept, and counted nowhere else: every total stays exact for what
    // is kept (alloc - free == live bytes), rather than half-counting an
    // allocation whose free could not be matched.
    ++d.live_dropped;
    if (d.cur != before) d.timeline.add(now_ns, before, d.cur);
    return;
  }
  Entry* e = live_.insert(ptr);
  e->node = node;
  e->size = size;
  e->seq = ++seq_;
  e->slot = static_cast<int8_t>(slot);
  NodeMem& m = node_mem(d, node);
  m.alloc += size;
  m.live[kTemporary] += size;
  touch(d, node);
  d.cur += size;
  grew(d, node, now_ns);
  d.timeline.add(now_ns, before, d.cur);
}

uint64_t MemoryTracker::hold(uintptr_t ptr, int64_t size, int slot, int64_t node, int category,
                             bool resident) {
  if (!on()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (!on_.load(std::memory_order_relaxed)) return 0;
  if (!valid(ptr, slot, node) || size <= 0 || category < 0 || category >= kCategories) {
    ++bad_reports_;
    return 0;
  }
  if (Entry* known = live_.find(ptr)) {
    // The window's own allocation: its free comes as a report, not a release.
    if (known->category == kTemporary) move(known, static_cast<uint8_t>(category));
    return 0;
  }
  Device& d = devices_[slot];
  if (live_.size() >= max_live_) {
    ++d.live_dropped;
    return 0;
  }
  // The snapshot is brought up to date first, so that a resident entry can
  // join it directly.
  if (resident && d.pending) flush(d);
  Entry* e = live_.insert(ptr);
  e->node = node;
  e->size = size;
  e->seq = ++seq_;
  e->slot = static_cast<int8_t>(slot);
  e->category = static_cast<uint8_t>(category);
  e->held = true;
  e->resident = resident;
  NodeMem& m = node_mem(d, node);
  m.live[category] += size;
  d.cur += size;
  d.held += size;
  if (resident) {
    // Live at the peak already reached, and through every bucket so far.
    m.peak[category] += size;
    d.peak += size;
    d.held_at_peak += size;
    for (int64_t& b : d.timeline.bytes) b += size;
    // live and peak moved together: the node is as dirty (or not) as it was
  } else {
    touch(d, node);
  }
  grew(d, node, d.last_ns);
  return e->seq;
}

void MemoryTracker::release(uintptr_t ptr, uint64_t token) {
  if (!on() || ptr == 0 || token == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!on_.load(std::memory_order_relaxed)) return;
  Entry* e = live_.find(ptr);
  if (e != nullptr && e->held && e->seq == token) remove(e);
}

bool MemoryTracker::mark(uintptr_t ptr, int category, bool only_temporary) {
  if (!on() || ptr == 0 || category < 0 || category >= kCategories) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!on_.load(std::memory_order_relaxed)) return false;
  Entry* e = live_.find(ptr);
  if (e == nullptr) return false;
  if (!only_temporary || e->category == kTemporary) move(e, static_cast<uint8_t>(category));
  return true;
}

MemoryReadout MemoryTracker::snapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryReadout out;
  out.bad_reports = bad_reports_;
  out.devices.resize(static_cast<size_t>(device_count_));
  for (int s = 0; s < device_count_; ++s) {
    Device& d = devices_[s];
    if (d.pending) flush(d);
    DeviceMemory& r = out.devices[static_cast<size_t>(s)];
    r.type = d.type;
    r.index = d.index;
    const size_t n = d.nodes.size();
    r.alloc_bytes.resize(n);
    r.free_bytes.resize(n);
    for (auto& col : r.peak_bytes) col.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const NodeMem& m = d.nodes[i];
      r.alloc_bytes[i] = m.alloc;
      r.free_bytes[i] = m.freed;
      for (int c = 0; c < kCategories; ++c) r.peak_bytes[c][i] = m.peak[c];
    }
    r.peak = d.peak;
    r.peak_ns = d.peak_ns;
    r.peak_node = d.peak_node;
    r.max_reserved = d.max_reserved;
    r.live = d.cur;
    r.held_at_peak = d.held_at_peak;
    r.allocator_peak = d.reported && d.total_max > d.total_base
                           ? static_cast<int64_t>(d.total_max - d.total_base)
                           : 0;
    const Timeline& t = d.timeline;
    r.timeline_bytes = t.bytes;
    r.timeline_ns.resize(t.bytes.size());
    for (size_t i = 0; i < t.bytes.size(); ++i) r.timeline_ns[i] = t.t0 + i * t.width;
    r.live_dropped = d.live_dropped;
    r.unknown_frees = d.unknown_frees;
  }
  return out;
}

}  // namespace dc
