// SeqTable: the lock-free map from (forward thread, sequence number) to the
// forward operator's node that backward functions read from other threads.
#include "seqtable.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "check.h"

using dc::SeqTable;

namespace {

constexpr int64_t kSlots = static_cast<int64_t>(SeqTable::kSize);

// A node that says which (thread, seq) it was put for, and in which round.
int64_t node_of(uint64_t thread, int64_t seq, int64_t round) {
  return static_cast<int64_t>(thread << 48) | (round << 32) | seq;
}
uint64_t thread_of(int64_t node) { return static_cast<uint64_t>(node) >> 48; }
int64_t seq_of(int64_t node) { return node & 0xffffffff; }

}  // namespace

TEST(seqtable_finds_what_was_put) {
  SeqTable t;
  CHECK_EQ(t.get(1, 5), -1);
  t.put(1, 5, 42);
  t.put(1, 6, 43);
  t.put(2, 7, 44);
  CHECK_EQ(t.get(1, 5), 42);
  CHECK_EQ(t.get(1, 6), 43);
  CHECK_EQ(t.get(2, 7), 44);
  CHECK_EQ(t.get(2, 5), -1);  // another thread's number 5
  CHECK_EQ(t.get(1, 7), -1);
  t.put(1, 5, 50);  // the same key again: the newer node
  CHECK_EQ(t.get(1, 5), 50);
  t.put(1, 0, 0);  // node 0 (the root) and sequence number 0 are values like any
  CHECK_EQ(t.get(1, 0), 0);
}

TEST(seqtable_is_bounded_to_64k_numbers_per_thread) {
  SeqTable t;
  for (int64_t seq = 0; seq < kSlots; ++seq) t.put(3, seq, seq);
  CHECK_EQ(t.get(3, 0), 0);
  CHECK_EQ(t.get(3, kSlots - 1), kSlots - 1);
  // The op 64k numbers later takes the slot: the old number is gone, never
  // answered with the new op's node.
  t.put(3, kSlots, 7);
  CHECK_EQ(t.get(3, kSlots), 7);
  CHECK_EQ(t.get(3, 0), -1);
  CHECK_EQ(t.get(3, 1), 1);
  // Two threads' same number: each keeps its own.
  t.put(4, 9, 90);
  t.put(5, 9, 91);
  CHECK_EQ(t.get(5, 9), 91);
  CHECK_EQ(t.get(4, 9), 90);
  t.clear();
  CHECK_EQ(t.get(5, 9), -1);
  CHECK_EQ(t.get(3, kSlots), -1);
  CHECK_EQ(t.get(3, 1), -1);
}

TEST(seqtable_never_answers_another_keys_node_under_concurrent_puts) {
  // Writers put keys that share slots (one thread's numbers 64k apart) at
  // once, round after round, while readers look them up: a reader gets the
  // node put for its key (any round) or -1, never a node put for another key.
  // Writers go on past their rounds until the readers have found keys while
  // they write: on a loaded host (or under a sanitizer) the readers may not
  // run at all during a fixed number of rounds.
  SeqTable t;
  constexpr int kWriters = 3, kReaders = 3, kRounds = 40;
  constexpr int64_t kSeqs = 4096, kMinHits = 1000, kMaxRounds = 1 << 15;
  std::atomic<bool> done{false};
  std::atomic<int64_t> wrong{0}, hits{0};
  const auto more = [&](int64_t round) {
    return round < kRounds ||
           (hits.load(std::memory_order_relaxed) < kMinHits && round < kMaxRounds);
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w)
    threads.emplace_back([&, w] {
      for (int64_t round = 0; more(round); ++round)
        for (int64_t seq = w * kSlots; seq < w * kSlots + kSeqs; ++seq)
          t.put(1, seq, node_of(1, seq, round));
    });
  for (int r = 0; r < kReaders; ++r)
    threads.emplace_back([&, r] {
      uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(r + 1);
      while (!done.load(std::memory_order_relaxed)) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const int64_t seq =
            static_cast<int64_t>(x % kWriters) * kSlots + static_cast<int64_t>((x >> 8) % kSeqs);
        const int64_t node = t.get(1, seq);
        if (node == -1) continue;
        hits.fetch_add(1, std::memory_order_relaxed);
        if (thread_of(node) != 1 || seq_of(node) != seq) wrong.fetch_add(1);
      }
    });
  for (int w = 0; w < kWriters; ++w) threads[static_cast<size_t>(w)].join();
  done.store(true);
  for (size_t i = kWriters; i < threads.size(); ++i) threads[i].join();
  CHECK_EQ(wrong.load(), 0);
  CHECK(hits.load() >= kMinHits);
  // Afterwards each slot holds exactly one of the keys written to it, whole.
  int64_t kept = 0;
  for (int64_t seq = 0; seq < kSeqs; ++seq)
    for (int w = 0; w < kWriters; ++w) {
      const int64_t node = t.get(1, w * kSlots + seq);
      if (node == -1) continue;
      ++kept;
      CHECK_EQ(seq_of(node), w * kSlots + seq);
    }
  CHECK_EQ(kept, kSeqs);
}

TEST(seqtable_keeps_every_key_of_disjoint_ranges_written_at_once) {
  // Four threads fill the table's 64k slots at once, each its own numbers of
  // one framework thread: afterwards every one of them reads back exactly.
  SeqTable t;
  constexpr int kThreads = 4;
  constexpr int64_t kEach = kSlots / kThreads;
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w)
    threads.emplace_back([&, w] {
      for (int64_t seq = w * kEach; seq < (w + 1) * kEach; ++seq)
        t.put(10, seq, node_of(10, seq, 0));
    });
  for (std::thread& th : threads) th.join();
  int64_t exact = 0;
  for (int64_t seq = 0; seq < kSlots; ++seq) exact += t.get(10, seq) == node_of(10, seq, 0);
  CHECK_EQ(exact, kSlots);
}
