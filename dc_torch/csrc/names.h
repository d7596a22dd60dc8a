// dc_torch's operator names: which ATen records are operators, regions or
// skipped, and the per-thread cache from a record's name to the collector's
// frame for it. Included by capture.cc alone (one translation unit).
#pragma once

#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capture_api.h"

namespace {

// Bumped by each start(): the caches of every thread start afresh.
std::atomic<uint64_t> g_generation{0};

// Matmul family, for FLOPs from input shapes: which inputs are the operands;
// TO for aten::to, whose overload tells a device move from a cast.
enum Family : int8_t { NONE, MM, ADDMM, BMM, BADDBMM, TO };

Family family_of(const char* name) {
  if (std::strcmp(name, "aten::to") == 0) return TO;  // its overload says: a device move or a cast
  if (std::strcmp(name, "aten::mm") == 0) return MM;
  if (std::strcmp(name, "aten::addmm") == 0 || std::strcmp(name, "aten::_addmm_activation") == 0)
    return ADDMM;
  if (std::strcmp(name, "aten::bmm") == 0) return BMM;
  if (std::strcmp(name, "aten::baddbmm") == 0) return BADDBMM;
  return NONE;
}

// In-place (``add_``) and ``out=`` ops write into storage they were given.
bool writes_in_place(const char* name) {
  size_t n = std::strlen(name);
  return n > 0 && name[n - 1] == '_' && !(n > 1 && name[n - 2] == '_');
}

constexpr int64_t kSkip = -1;  // a record that is not an operator of its own (capture_api.h)
constexpr const char kEngineRecord[] = "autograd::engine::evaluate_function";
constexpr const char kCollective[] = "c10d::";
constexpr const char kDynamoFrame[] = "Torch-Compiled Region: ";

bool starts_with(const char* name, const char* prefix, size_t n) {
  return std::strncmp(name, prefix, n) == 0;
}

// Records that are not operators of their own here: the engine's wrapper around
// each autograd function (the function's own record follows); collectives,
// which dc_torch/collectives.py records with their completion time; and
// Dynamo's record around each run of a compiled frame's bytecode: that frame
// is the user's code running (its graph, after a graph break the eager rest
// and the calls into nested compiled frames), so its operators keep their own
// context and the time between them is the calling line's. The compiled
// graphs themselves are regions of their own (dc_torch/compiled.py, region_enter).
bool skipped(const char* name) {
  return starts_with(name, kEngineRecord, sizeof(kEngineRecord) - 1) ||
         starts_with(name, kCollective, sizeof(kCollective) - 1) ||
         starts_with(name, kDynamoFrame, sizeof(kDynamoFrame) - 1);
}

// ATen ops whose autograd kernel records itself a second time under the bare
// op name (VariableTypeManual.cpp: RECORD_FUNCTION("detach", ...)), inside
// the dispatcher's own aten:: record of the same op. Named as ATen names them,
// so every name-based rule sees one operator, and not a region.
constexpr const char* kBareAtenOps[] = {"detach", "detach_"};

bool bare_aten(const char* name) {
  for (const char* op : kBareAtenOps)
    if (std::strcmp(name, op) == 0) return true;
  return false;
}

// A record without a namespace is a region (an autograd.Function's apply):
// the ops inside it keep their own context. AOTAutograd's CompiledFunction
// runs a compiled graph's generated code, no user code: its ATen calls are
// its own, like a composite op's.
constexpr const char kCompiledFunction[] = "CompiledFunction";

int32_t flags_of(const std::string& name) {
  if (name.find("::") != std::string::npos || name == kCompiledFunction) return 0;
  return DC_OP_REGION;
}

// Operator name -> frame id, per thread. ATen ops name themselves with their
// schema's string (a stable pointer); autograd nodes and a few records build
// their names per call, so a pointer hit is checked against the text, and a
// pointer miss falls back to a table keyed by the text's hash.
class NameCache {
 public:
  struct Known {  // by the text's hash
    uint64_t hash = 0;
    bool backward = false;
    std::string text;
    int64_t frame = kSkip;
    Family family = NONE;
    bool in_place = false;
    bool twin = false;             // a bare-named record of an ATen op, inside that op's own record
    int32_t flags = 0;             // DC_OP_REGION for records that are not ATen ops
    int64_t device_frame = kSkip;  // TO: the frame of its `device` overload (kSkip: not made yet)
  };

  Known& lookup(const dc_capture_api* api, const char* name, bool backward) {
    const uint64_t gen = g_generation.load(std::memory_order_relaxed);
    if (gen != generation_) {
      for (Known& k : known_) k = Known();
      for (Recent& r : recent_) r = Recent();
      used_ = 0;
      open.clear();  // records left open when the last window closed
      marks.clear();
      serving = -1;
      generation_ = gen;
    }
    Recent& r = recent_[(reinterpret_cast<uintptr_t>(name) >> 3) & (kSlots - 1)];
    if (r.ptr == name) {
      Known& k = known_[r.known];
      if (k.backward == backward && same_text(k.text, name)) return k;
    }
    // Open addressing: two names sharing a slot would otherwise evict each
    // other on every call (aten::copy_ and a backward record did, each eviction
    // a locked intern in the collector).
    const uint64_t h = fnv(name, backward);
    size_t i = h & (kSlots - 1);
    for (; known_[i].hash != 0; i = (i + 1) & (kSlots - 1)) {
      const Known& k = known_[i];
      if (k.hash == h && k.backward == backward && same_text(k.text, name)) break;
    }
    Known& k = known_[i];
    if (k.hash == 0) {
      if (++used_ * 4 > kSlots * 3) {  // a window of thousands of distinct names: start over
        for (Known& old : known_) old = Known();
        for (Recent& old : recent_) old = Recent();
        used_ = 1;
        i = h & (kSlots - 1);
      }
      Known& fresh = known_[i];
      fresh.hash = h;
      fresh.backward = backward;
      fresh.text = name;
      fresh.twin = !backward && bare_aten(name);
      const std::string named = fresh.twin ? std::string("aten::") + name : std::string(name);
      fresh.frame =
          skipped(name) ? kSkip : api->op_frame(api->collector, named.c_str(), backward ? 1 : 0);
      fresh.family = backward ? NONE : family_of(named.c_str());
      fresh.in_place = writes_in_place(name);
      fresh.flags = flags_of(named);
    }
    r.ptr = name;
    r.known = i;
    return known_[i];
  }

  // Per open record on this thread, what its exit must do.
  struct Open {
    int64_t frame = kSkip;  // the operator it was reported as
    bool alloc = false;     // recorded: add the bytes of fresh outputs
    bool marked = false;    // a dc# record is open for it
    const void* inputs[4] = {nullptr, nullptr, nullptr, nullptr};  // storages it was given
  };
  std::vector<Open> open;
  std::vector<std::pair<std::unique_ptr<at::RecordFunction>, std::string>> marks;
  int64_t serving = -1;  // the node this thread last told the collector it works for

 private:
  static constexpr size_t kSlots = 2048;
  struct Recent {  // by the pointer last seen with that text
    const char* ptr = nullptr;
    size_t known = 0;
  };
  // Inline, stopping at the first difference: std::string's compare calls
  // strlen and memcmp out of line on every operator (half a percent of a step).
  static bool same_text(const std::string& known, const char* name) {
    for (const char* k = known.c_str();; ++k, ++name) {
      if (*k != *name) return false;
      if (*k == '\0') return true;
    }
  }
  static uint64_t fnv(const char* s, bool backward) {
    uint64_t h = backward ? 0x84222325cbf29ce4ull : 1469598103934665603ull;
    for (; *s != '\0'; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
    return h != 0 ? h : 1;  // 0 marks an empty slot
  }
  uint64_t generation_ = ~uint64_t{0};
  size_t used_ = 0;  // filled slots of known_
  Known known_[kSlots];
  Recent recent_[kSlots];
};

NameCache& names() {
  // A pointer in the initial-exec TLS block: one instruction to reach (a
  // thread_local object this size would cost a __tls_get_addr call each time).
  static thread_local NameCache* cache __attribute__((tls_model("initial-exec"))) = nullptr;
  if (cache == nullptr) {
    static thread_local std::unique_ptr<NameCache> owner;  // frees it when the thread ends
    owner.reset(new NameCache());
    cache = owner.get();
  }
  return *cache;
}

}  // namespace
