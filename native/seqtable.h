// (forward thread, sequence number) -> forward operator node: how a backward
// function finds the forward operator that made its autograd node.
//
// Direct-mapped and lock-free: a forward op writes its slot on its own
// thread, a backward function on another thread reads it, neither waits.
// Each slot is a seqlock: a writer claims it by moving its version from even
// to odd, writes key and node, and releases it at the next even version; a
// reader accepts the node only if the version was even and unchanged around
// its reads and the key is the one it asked for. So a reader never gets
// another key's node, even when two threads write one slot at once (only
// one of them keeps it; the other's put is dropped as if overwritten) or a
// key comes back to a slot. Bounded: an entry is overwritten by the op 64k
// numbers later on its thread, long after its backward ran (or its graph was
// dropped); other threads' numbers start at other offsets.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace dc {

class SeqTable {
 public:
  static constexpr size_t kSize = size_t{1} << 16;

  SeqTable() : slots_(new Slot[kSize]) {}

  // Not concurrent with put/get (capture start, GIL held).
  void clear() {
    for (size_t i = 0; i < kSize; ++i) slots_[i].key.store(0, std::memory_order_relaxed);
  }

  void put(uint64_t thread, int64_t seq, int64_t node) {
    const uint64_t k = key(thread, seq);
    Slot& s = slots_[index(thread, seq)];
    uint64_t v = s.version.load(std::memory_order_relaxed);
    // Odd: another thread is writing this slot now; its put wins.
    if ((v & 1) != 0 || !s.version.compare_exchange_strong(v, v + 1, std::memory_order_acquire,
                                                           std::memory_order_relaxed))
      return;
    // Release stores: a reader that sees either one also sees the odd version.
    s.key.store(k, std::memory_order_release);
    s.node.store(node, std::memory_order_release);
    s.version.store(v + 2, std::memory_order_release);
  }

  // The node put for (thread, seq), or -1.
  int64_t get(uint64_t thread, int64_t seq) const {
    const uint64_t k = key(thread, seq);
    const Slot& s = slots_[index(thread, seq)];
    const uint64_t v = s.version.load(std::memory_order_acquire);
    if ((v & 1) != 0) return -1;  // being written
    // Acquire loads: the version's second read cannot move above them.
    const uint64_t found = s.key.load(std::memory_order_acquire);
    const int64_t node = s.node.load(std::memory_order_acquire);
    if (s.version.load(std::memory_order_relaxed) != v || found != k) return -1;
    return node;
  }

 private:
  struct Slot {
    std::atomic<uint64_t> version{0};  // odd while a put writes the slot
    std::atomic<uint64_t> key{0};
    std::atomic<int64_t> node{-1};
  };
  // Sequence numbers count per thread, so consecutive ones take consecutive
  // slots; each thread starts at its own offset, so two threads' same
  // numbers rarely share one.
  static size_t index(uint64_t thread, int64_t seq) {
    return (static_cast<uint64_t>(seq) + ((thread * 0x9E3779B97F4A7C15ull) >> 48)) & (kSize - 1);
  }
  // The thread in the high bits. Never 0 (the empty key).
  static uint64_t key(uint64_t thread, int64_t seq) {
    return (thread << 44) ^ (static_cast<uint64_t>(seq) & ((uint64_t{1} << 44) - 1)) ^
           (uint64_t{1} << 63);
  }
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace dc
