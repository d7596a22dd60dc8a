// Open-addressing hash map from a pair of 64-bit words to an int64.
//
// Why not std::unordered_map: every node lookup (parent, frame) and every
// Python frame lookup (code, lasti) on the hot path goes through one of these;
// a node-based map costs a pointer chase and an allocation per insert, this one
// is a single probe into a flat array in the common case.
#pragma once

#include <cstdint>
#include <vector>

namespace dc {

class PairMap {
 public:
  PairMap() { rehash(1024); }

  // Returns a pointer to the value for (a, b), or nullptr.
  const int64_t* find(uint64_t a, uint64_t b) const {
    size_t mask = slots_.size() - 1;
    for (size_t i = hash(a, b) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.a == a && s.b == b) return &s.value;
    }
  }

  // Inserts (a, b) -> value; the key must not be present.
  void insert(uint64_t a, uint64_t b, int64_t value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.size() * 2);
    place(a, b, value);
    ++size_;
  }

  void clear() {
    // Shrink back so a reset after a huge window gives memory back.
    slots_.clear();
    size_ = 0;
    rehash(1024);
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t a = 0, b = 0;
    int64_t value = 0;
    bool used = false;
  };

  static size_t hash(uint64_t a, uint64_t b) {
    // splitmix64-style finaliser over both words: pointers and small ids are
    // both badly distributed in their low bits.
    uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return static_cast<size_t>(x);
  }

  void place(uint64_t a, uint64_t b, int64_t value) {
    size_t mask = slots_.size() - 1;
    size_t i = hash(a, b) & mask;
    while (slots_[i].used) i = (i + 1) & mask;
    slots_[i] = Slot{a, b, value, true};
  }

  void rehash(size_t n) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(n, Slot{});
    for (const Slot& s : old)
      if (s.used) place(s.a, s.b, s.value);
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace dc
