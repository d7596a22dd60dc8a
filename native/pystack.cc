#include "pystack.h"

namespace dc {

PyStack::PyStack(StringTable* strings, FrameTable* frames) : strings_(strings), frames_(frames) {}

PyStack::~PyStack() {
  // During interpreter teardown the objects may already be gone with the
  // interpreter; leaking a few code objects then is harmless.
  if (_Py_IsFinalizing()) return;
  for (CodeInfo& c : codes_) Py_DECREF(c.code);
}

bool PyStack::skipped(const std::string& file) const {
  for (const std::string& p : skip_prefixes_)
    if (file.compare(0, p.size(), p) == 0) return true;
  return false;
}

void PyStack::add_skip_prefix(const std::string& prefix) {
  for (const std::string& p : skip_prefixes_)
    if (p == prefix) return;
  skip_prefixes_.push_back(prefix);
  // Cached flags must follow the new prefix; lines_ refers to codes_ by index,
  // so updating codes_ is enough.
  for (CodeInfo& c : codes_) c.skip = skipped(strings_->at(c.file));
}

static std::string utf8_or_empty(PyObject* s) {
  if (s == nullptr || !PyUnicode_Check(s)) return std::string();
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (p == nullptr) {
    PyErr_Clear();  // e.g. lone surrogates in a file name: keep going
    return std::string();
  }
  return std::string(p, static_cast<size_t>(n));
}

int64_t PyStack::code_index(PyCodeObject* code) {
  uint64_t key = reinterpret_cast<uintptr_t>(code);
  if (const int64_t* hit = code_ids_.find(key, 0)) return *hit;
  std::string file = utf8_or_empty(code->co_filename);
  std::string name = utf8_or_empty(code->co_qualname);
  Py_INCREF(code);
  codes_.push_back(CodeInfo{reinterpret_cast<PyObject*>(code), strings_->intern(file),
                            strings_->intern(name), skipped(file)});
  int64_t idx = static_cast<int64_t>(codes_.size() - 1);
  code_ids_.insert(key, 0, idx);
  return idx;
}

PyStack::Resolved PyStack::resolve(PyFrameObject* f) {
  PyCodeObject* code = PyFrame_GetCode(f);
  // The frame keeps its code alive for as long as we look at the frame.
  Py_DECREF(code);
  return resolve_code(code, PyFrame_GetLasti(f));
}

PyStack::Resolved PyStack::resolve_code(PyCodeObject* code, int lasti) {
  uint64_t key = reinterpret_cast<uintptr_t>(code);
  uint64_t sub = static_cast<uint64_t>(static_cast<uint32_t>(lasti)) + 1;  // sub 0 is code_ids_'s
  if (const int64_t* hit = lines_.find(key, sub)) {
    int64_t v = *hit;
    return Resolved{v & 0xffffffffLL, codes_[static_cast<size_t>(v >> 32)].skip};
  }
  int64_t idx = code_index(code);
  const CodeInfo& c = codes_[static_cast<size_t>(idx)];
  // As PyFrame_GetLineNumber: a frame that has not started is at its first line.
  int line = lasti < 0 ? code->co_firstlineno : PyCode_Addr2Line(code, lasti);
  int64_t frame = frames_->intern_ids(Frame{KIND_PYTHON, c.name, c.file, line, 0, 0});
  lines_.insert(key, sub, (idx << 32) | frame);
  return Resolved{frame, c.skip};
}

FrameWalk::FrameWalk(PyFrameObject* top) {
  for (PyFrameObject* f = top; f != nullptr; ++n_) {
    if (n_ < kInline)
      inline_[n_] = f;
    else
      more_.push_back(f);
    PyFrameObject* back = PyFrame_GetBack(f);
    // A frame on a live stack is owned by its interpreter frame, so the
    // pointer stays valid after dropping the new reference, whatever code
    // the GC runs meanwhile: that code runs above these frames, not in them.
    Py_XDECREF(back);
    f = back;
  }
}

int64_t PyStack::capture(const FrameWalk& walk, int64_t min_depth, std::vector<int64_t>* out) {
  const int64_t n = static_cast<int64_t>(walk.size());
  // walk[i] has depth n - i; frames deeper than min_depth are i < wanted.
  int64_t wanted = n - (min_depth < 0 ? 0 : min_depth);
  if (wanted < 0 || out == nullptr) wanted = 0;
  resolved_.clear();
  int64_t user_depth = 0;
  for (int64_t i = 0; i < wanted; ++i) {
    resolved_.push_back(resolve(walk[static_cast<size_t>(i)]));
    if (user_depth == 0 && !resolved_.back().skip) user_depth = n - i;
  }
  // The innermost non-skipped frame may lie above the scope's own frames.
  for (int64_t i = wanted; user_depth == 0 && i < n; ++i) {
    if (!resolve(walk[static_cast<size_t>(i)]).skip) user_depth = n - i;
  }
  if (out != nullptr) {
    for (int64_t i = wanted - 1; i >= 0; --i) {
      const Resolved& r = resolved_[static_cast<size_t>(i)];
      if (!r.skip) out->push_back(r.frame);
    }
  }
  return user_depth;
}

}  // namespace dc
