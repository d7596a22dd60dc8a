// (forward thread, sequence number) -> forward operator node: how a backward
// function finds the forward operator that made its autograd node.
//
// Direct-mapped and lock-free: a forward op writes its slot on its own
// thread, a backward function on another thread reads it, neither waits.
// Each slot is a tiny seqlock: the writer empties the key, writes the node,
// then publishes the key; a reader accepts the node only if the key it read
// before and after is the one it asked for, so it never returns another
// key's node. Bounded: an entry is overwritten by the op 64k numbers later
// on its thread, long after its backward ran (or its graph was dropped).
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
    Slot& s = slots_[k & (kSize - 1)];
    s.key.store(0, std::memory_order_relaxed);
    // Orders the emptied key before the new node: a reader that sees the new
    // node then sees the key change and refuses it.
    std::atomic_thread_fence(std::memory_order_release);
    s.node.store(node, std::memory_order_relaxed);
    s.key.store(k, std::memory_order_release);
  }

  // The node put for (thread, seq), or -1.
  int64_t get(uint64_t thread, int64_t seq) const {
    const uint64_t k = key(thread, seq);
    const Slot& s = slots_[k & (kSize - 1)];
    if (s.key.load(std::memory_order_acquire) != k) return -1;
    const int64_t node = s.node.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    return s.key.load(std::memory_order_relaxed) == k ? node : -1;
  }

 private:
  struct Slot {
    std::atomic<uint64_t> key{0};
    std::atomic<int64_t> node{-1};
  };
  // Sequence numbers count per thread, so the low bits spread slots; the
  // thread goes in the high bits. Never 0 (the empty key).
  static uint64_t key(uint64_t thread, int64_t seq) {
    return (thread << 44) ^ (static_cast<uint64_t>(seq) & ((uint64_t{1} << 44) - 1)) ^
           (uint64_t{1} << 63);
  }
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace dc
