// What the collector's one mutex guards: interned strings and frames, the
// tree with its metrics, and the Python code caches that resolve frames.
//
// The pybind11 methods touch them with the GIL held, but native operator
// capture (opcapture.h) and the sampler (sampler.h) reach them from any
// thread without it, so every access takes `mu`. Lock order: the GIL (when
// wanted) before `mu`, `mu` before the scope registry's mutex, never the
// other way round.
#pragma once

#include <cstdint>
#include <mutex>

#include "frames.h"
#include "pystack.h"
#include "tree.h"

namespace dc {

struct Store {
  explicit Store(int64_t max_nodes)
      : frames(&strings), tree(max_nodes), pystack(&strings, &frames) {}
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // auto lock = store.lock();  held to the end of the enclosing block.
  [[nodiscard]] std::lock_guard<std::mutex> lock() { return std::lock_guard<std::mutex>(mu); }

  bool valid_frame(int64_t f) const { return f >= 0 && static_cast<size_t>(f) < frames.size(); }

  StringTable strings;
  FrameTable frames;
  Tree tree;
  PyStack pystack;  // also GIL-protected: it holds code objects
  std::mutex mu;
};

}  // namespace dc
