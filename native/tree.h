// The calling context tree: topology (parent, frame per node) and metric
// columns keyed by node. Identity lives in frames.h; this file never looks at
// what a frame means.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flatmap.h"

namespace dc {

constexpr int64_t METRIC_CPU_TIME = 0;
constexpr int64_t METRIC_COUNT = 1;
constexpr int64_t METRIC_SAMPLES = 2;

class Tree {
 public:
  explicit Tree(int64_t max_nodes);

  // Find or insert; at the node cap returns `parent` and counts a drop.
  int64_t child(int64_t parent, int64_t frame) {
    if (const int64_t* hit =
            children_.find(static_cast<uint64_t>(parent), static_cast<uint64_t>(frame)))
      return *hit;
    return insert(parent, frame);
  }

  void add(int64_t node, int64_t metric, int64_t value) {
    std::vector<int64_t>& col = columns_[static_cast<size_t>(metric)];
    // Columns grow lazily: most metrics touch few nodes, so a new node does
    // not pay for every registered column.
    if (static_cast<size_t>(node) >= col.size()) col.resize(parent_.size(), 0);
    col[static_cast<size_t>(node)] += value;
  }

  // The node whose path below `top` repeats `node`'s path below its depth-1
  // ancestor (its phase); memoized per (node, top) until clear().
  int64_t mirror(int64_t node, int64_t top);

  int64_t parent(int64_t node) const { return parent_[static_cast<size_t>(node)]; }
  int64_t depth(int64_t node) const { return depth_[static_cast<size_t>(node)]; }

  // `node`'s ancestor at depth `d` (itself at its own depth); d <= depth(node).
  int64_t ancestor(int64_t node, int64_t d) const {
    while (depth(node) > d) node = parent(node);
    return node;
  }

  // The deepest node both `a` and `b` descend from (either may be it).
  int64_t common(int64_t a, int64_t b) const {
    while (depth(a) > depth(b)) a = parent(a);
    while (depth(b) > depth(a)) b = parent(b);
    while (a != b) {
      a = parent(a);
      b = parent(b);
    }
    return a;
  }

  bool valid_node(int64_t node) const {
    return node >= 0 && static_cast<size_t>(node) < parent_.size();
  }
  bool valid_metric(int64_t metric) const {
    return metric >= 0 && static_cast<size_t>(metric) < columns_.size();
  }

  // Registers a column, or returns the existing id; -1 on a unit clash.
  int64_t metric(const std::string& name, const std::string& unit);

  int64_t node_count() const { return static_cast<int64_t>(parent_.size()); }
  int64_t dropped_nodes() const { return dropped_nodes_; }
  const std::vector<int64_t>& parents() const { return parent_; }
  const std::vector<int64_t>& frames() const { return frame_; }
  size_t metric_count() const { return columns_.size(); }
  const std::string& metric_name(size_t i) const { return names_[i]; }
  const std::string& metric_unit(size_t i) const { return units_[i]; }
  // May be shorter than node_count(): columns grow lazily, readers pad with 0.
  const std::vector<int64_t>& raw_column(size_t i) const { return columns_[i]; }

  // A step ended: each node's exclusive `metric` since the last mark is one
  // step's value; step_min/step_max keep each node's least and greatest over
  // the marked steps (a node absent from a step had 0 in it). Two columns
  // however many steps, so a rule can tell a cost every step pays from one a
  // preempted step added.
  void mark_step(size_t metric);
  int64_t steps_marked() const { return steps_marked_; }
  const std::vector<int64_t>& step_min() const { return step_min_; }
  const std::vector<int64_t>& step_max() const { return step_max_; }

  // Drops nodes and values; keeps registrations and the root.
  void clear();

 private:
  int64_t insert(int64_t parent, int64_t frame);

  int64_t max_nodes_;
  int64_t dropped_nodes_ = 0;
  std::vector<int64_t> parent_;
  std::vector<int64_t> depth_;  // the root's is 0
  std::vector<int64_t> frame_;
  PairMap children_;
  PairMap mirrors_;                     // (node, top) -> mirror(node, top)
  std::vector<int64_t> mirror_frames_;  // reused scratch
  std::vector<std::string> names_, units_;
  std::vector<std::vector<int64_t>> columns_;
  int64_t steps_marked_ = 0;
  std::vector<int64_t> step_last_, step_min_, step_max_;  // per node, see mark_step
};

}  // namespace dc
