#include "frames.h"

namespace dc {

StringTable::StringTable() { intern(""); }  // string 0 is "", the root's name

int64_t StringTable::intern(std::string_view s) {
  auto it = ids_.find(std::string(s));
  if (it != ids_.end()) return it->second;
  int64_t id = static_cast<int64_t>(strings_.size());
  strings_.emplace_back(s);
  ids_.emplace(strings_.back(), id);
  return id;
}

FrameTable::FrameTable(StringTable* strings) : strings_(strings) {
  intern(KIND_ROOT, "", "", 0, "", 0);  // frame 0 is the root frame
}

int64_t FrameTable::intern(int64_t kind, std::string_view name, std::string_view file, int64_t line,
                           std::string_view detail, int64_t flags) {
  return intern_ids(Frame{kind, strings_->intern(name), strings_->intern(file), line,
                          strings_->intern(detail), flags});
}

int64_t FrameTable::intern_ids(const Frame& f) {
  auto it = ids_.find(f);
  if (it != ids_.end()) return it->second;
  int64_t id = static_cast<int64_t>(frames_.size());
  frames_.push_back(f);
  ids_.emplace(f, id);
  return id;
}

}  // namespace dc
