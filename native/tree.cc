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
  for (int64_t n = node; n > 0 && parent_[static_cast<size_t>(n)] > 0; n = parent_[static_cast<size_t>(n)])
    mirror_frames_.push_back(frame_[static_cast<size_t>(n)]);
  int64_t out = top;
  for (size_t i = mirror_frames_.size(); i-- > 0;) out = child(out, mirror_frames_[i]);
  mirrors_.insert(static_cast<uint64_t>(node), static_cast<uint64_t>(top), out);
  return out;
}

void Tree::clear() {
  parent_.assign(1, -1);  // node 0: the root, frame 0
  depth_.assign(1, 0);
  frame_.assign(1, 0);
  children_.clear();
  mirrors_.clear();
  for (auto& c : columns_) std::vector<int64_t>().swap(c);
  dropped_nodes_ = 0;
}

}  // namespace dc
