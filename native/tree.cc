#include "tree.h"

namespace dc {

Tree::Tree(int64_t max_nodes) : max_nodes_(max_nodes < 1 ? 1 : max_nodes) {
  metric("cpu_time_ns", "ns");
  metric("count", "1");
  metric("samples", "1");
  clear();
}

int64_t Tree::metric(const std::string& name, const std::string& unit) {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return units_[i] == unit ? static_cast<int64_t>(i) : -1;
  }
  names_.push_back(name);
  units_.push_back(unit);
  columns_.emplace_back();
  return static_cast<int64_t>(names_.size() - 1);
}

int64_t Tree::insert(int64_t parent, int64_t frame) {
  if (node_count() >= max_nodes_) {
    ++dropped_nodes_;
    return parent;
  }
  int64_t id = node_count();
  parent_.push_back(parent);
  depth_.push_back(depth_[static_cast<size_t>(parent)] + 1);
  frame_.push_back(frame);
  children_.insert(static_cast<uint64_t>(parent), static_cast<uint64_t>(frame), id);
  return id;
}

int64_t Tree::mirror(int64_t node, int64_t top) {
  if (const int64_t* hit = mirrors_.find(static_cast<uint64_t>(node), static_cast<uint64_t>(top)))
    return *hit;
  mirror_frames_.clear();
  // Frames from `node` up to (not including) the root's child, innermost first.
  for (int64_t n = node; n > 0 && parent_[static_cast<size_t>(n)] > 0;
       n = parent_[static_cast<size_t>(n)])
    mirror_frames_.push_back(frame_[static_cast<size_t>(n)]);
  int64_t out = top;
  for (size_t i = mirror_frames_.size(); i-- > 0;) out = child(out, mirror_frames_[i]);
  mirrors_.insert(static_cast<uint64_t>(node), static_cast<uint64_t>(top), out);
  return out;
}

void Tree::mark_step(size_t metric) {
  const std::vector<int64_t>& col = columns_[metric];
  const size_t n = parent_.size(), seen = step_last_.size();
  step_last_.resize(n, 0);
  step_min_.resize(n, 0);
  step_max_.resize(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t now = i < col.size() ? col[i] : 0;
    const int64_t value = now - step_last_[i];
    step_last_[i] = now;
    if (steps_marked_ == 0) {
      step_min_[i] = step_max_[i] = value;
    } else if (i >= seen) {  // new since the last mark: 0 in every earlier step
      step_min_[i] = value < 0 ? value : 0;
      step_max_[i] = value > 0 ? value : 0;
    } else {
      if (value < step_min_[i]) step_min_[i] = value;
      if (value > step_max_[i]) step_max_[i] = value;
    }
  }
  ++steps_marked_;
}

void Tree::clear() {
  parent_.assign(1, -1);  // node 0: the root, frame 0
  depth_.assign(1, 0);
  frame_.assign(1, 0);
  children_.clear();
  mirrors_.clear();
  for (auto& c : columns_) std::vector<int64_t>().swap(c);
  dropped_nodes_ = 0;
  steps_marked_ = 0;
  std::vector<int64_t>().swap(step_last_);
  std::vector<int64_t>().swap(step_min_);
  std::vector<int64_t>().swap(step_max_);
}

}  // namespace dc
