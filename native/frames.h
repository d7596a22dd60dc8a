// Interned strings and frames: the identity half of the collector.
//
// Frames and strings are append-only and survive Collector::reset(), so
// adapters can cache frame ids for the life of a collector.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dc {

enum Kind : int64_t {
  KIND_ROOT = 0,
  KIND_PYTHON = 1,
  KIND_MODULE = 2,
  KIND_OPERATOR = 3,
  KIND_NATIVE = 4,
  KIND_KERNEL = 5,
  KIND_PHASE = 6,
  KIND_COMPILED = 7,
  KIND_SHARDING = 8,
};

constexpr int64_t FLAG_BACKWARD = 1;

class StringTable {
 public:
  StringTable();
  int64_t intern(std::string_view s);
  const std::string& at(int64_t id) const { return strings_[static_cast<size_t>(id)]; }
  size_t size() const { return strings_.size(); }

 private:
  std::vector<std::string> strings_;
  // The map owns copies of its keys: interning strings is off the hot path
  // (Python frames are cached per code object), so simplicity wins.
  std::unordered_map<std::string, int64_t> ids_;
};

struct Frame {
  int64_t kind, name, file, line, detail, flags;  // name/file/detail: string ids
  bool operator==(const Frame& o) const {
    return kind == o.kind && name == o.name && file == o.file && line == o.line &&
           detail == o.detail && flags == o.flags;
  }
};

struct FrameHash {
  size_t operator()(const Frame& f) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : {f.kind, f.name, f.file, f.line, f.detail, f.flags}) {
      h ^= static_cast<uint64_t>(v);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

class FrameTable {
 public:
  explicit FrameTable(StringTable* strings);
  int64_t intern(int64_t kind, std::string_view name, std::string_view file, int64_t line,
                 std::string_view detail, int64_t flags);
  int64_t intern_ids(const Frame& f);
  size_t size() const { return frames_.size(); }
  const Frame& at(int64_t id) const { return frames_[static_cast<size_t>(id)]; }
  const std::vector<Frame>& all() const { return frames_; }

 private:
  StringTable* strings_;
  std::vector<Frame> frames_;
  std::unordered_map<Frame, int64_t, FrameHash> ids_;
};

}  // namespace dc
