// What dladdr answers, from a sorted index: the loaded object holding an
// address and the exported symbol containing it.
//
// glibc's dladdr scans every dynamic symbol of the object per call, 0.7 ms in
// libtorch_cpu (74k symbols): a sampled stack of fifty new return addresses
// kept the sampler thread from ticking for tens of milliseconds. Here each
// object's dynamic symbols are read once, from its loaded image (the file
// only says where its .dynsym and .dynstr sections lie), and sorted by
// address; a lookup is a binary search. The answer is dladdr's own: the
// symbol containing the address with the highest start, the first in the
// table among equal starts. Where the index cannot say for sure (an object
// without section headers, or not a file; symbols nested deeper than a few
// levels) it answers "ask dladdr", and the caller does.
//
// One thread's (the sampler's): nothing here is locked. Every lookup first
// checks the loader's counters of objects added and removed (one object
// visited), so a library loaded or unloaded since is seen.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dc {

class SymbolIndex {
 public:
  enum Answer : int8_t {
    FOUND,    // object and symbol
    NO_NAME,  // object known, no exported symbol contains the address
    UNKNOWN,  // not in any loaded object
    ASK,      // the index cannot tell: ask dladdr
  };
  struct Hit {
    const std::string* file = nullptr;  // as dladdr's dli_fname (valid until the next lookup)
    uintptr_t base = 0;                 // as dladdr's dli_fbase
    const char* name = nullptr;         // mangled, in the object's loaded image (FOUND)
    uintptr_t start = 0;                // the symbol's address (FOUND)
  };

  Answer lookup(uintptr_t addr, Hit* out);

 private:
  struct Entry {
    uintptr_t start, end;  // end == start: a symbol of size 0 (it matches only its start)
    uintptr_t reach;       // the highest end of this entry and every one before it
    uint32_t order;        // index in the object's symbol table
    uint32_t name;         // offset in its string table
  };
  struct Object {
    std::string file, path;        // dladdr's name for it; the path to read it from
    uintptr_t bias = 0, base = 0;  // load bias; lowest mapped page
    std::vector<std::pair<uintptr_t, uintptr_t>> segments;  // PT_LOAD, absolute [start, end)
    int state = 0;                  // 0: not read yet, 1: indexed, -1: ask dladdr
    const char* strings = nullptr;  // its string table, in the loaded image
    std::vector<Entry> entries;     // by (start, order)

    bool maps(uintptr_t start, uintptr_t size) const;
  };

  Object* object_at(uintptr_t addr);
  void refresh_if_changed();
  static bool index(Object* o);

  std::vector<Object> objects_;
  unsigned long long loads_ = 0, unloads_ = 0;  // dl_iterate_phdr's counters at the last read
};

}  // namespace dc
