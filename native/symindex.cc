#include "symindex.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace dc {

namespace {

// Entries looked at below an address's nearest start before the index gives
// the question to dladdr: only symbols nested inside larger ones get there.
constexpr int kMaxWalk = 64;

bool read_at(int fd, void* out, size_t size, off_t offset) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = pread(fd, p, size, offset);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

struct Counters {
  unsigned long long loads = 0, unloads = 0;
};

}  // namespace

bool SymbolIndex::Object::maps(uintptr_t start, uintptr_t size) const {
  for (const auto& [lo, hi] : segments)
    if (start >= lo && start < hi && size <= hi - start) return true;
  return false;
}

void SymbolIndex::refresh_if_changed() {
  // The loader counts every object it adds and removes; reading the counters
  // visits one object only.
  Counters now;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        *static_cast<Counters*>(data) = Counters{info->dlpi_adds, info->dlpi_subs};
        return 1;
      },
      &now);
  if (!objects_.empty() && now.loads == loads_ && now.unloads == unloads_) return;
  loads_ = now.loads;
  unloads_ = now.unloads;
  std::vector<Object> read;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        Object o;
        o.bias = info->dlpi_addr;
        uintptr_t lowest = UINTPTR_MAX;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) & ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          o.segments.emplace_back(o.bias + ph.p_vaddr, o.bias + ph.p_vaddr + ph.p_memsz);
          lowest = std::min<uintptr_t>(lowest, ph.p_vaddr);
        }
        if (o.segments.empty()) return 0;
        const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
        o.base = o.bias + (lowest & ~(page - 1));
        const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        if (name[0] != '\0') {
          o.file = o.path = name;
        } else {
          // The main program: dladdr names it as the process was started.
          Dl_info dl;
          if (dladdr(reinterpret_cast<void*>(o.segments.front().first), &dl) != 0 &&
              dl.dli_fname != nullptr)
            o.file = dl.dli_fname;
          o.path = "/proc/self/exe";
        }
        static_cast<std::vector<Object>*>(data)->push_back(std::move(o));
        return 0;
      },
      &read);
  // What was indexed before stays, where the same object is still there.
  for (Object& o : read)
    for (Object& old : objects_)
      if (old.state != 0 && old.bias == o.bias && old.path == o.path &&
          old.segments == o.segments) {
        o = std::move(old);
        break;
      }
  objects_ = std::move(read);
}

SymbolIndex::Object* SymbolIndex::object_at(uintptr_t addr) {
  refresh_if_changed();
  for (Object& o : objects_)
    if (o.maps(addr, 1)) return &o;
  return nullptr;
}

bool SymbolIndex::index(Object* o) {
  // The file says where the dynamic symbols and their names lie; both are
  // read from the loaded image, so a file replaced since cannot mislead.
  const int fd = open(o->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ElfW(Ehdr) eh;
  std::vector<ElfW(Shdr)> sections;
  bool ok = read_at(fd, &eh, sizeof(eh), 0) && std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
            eh.e_shentsize == sizeof(ElfW(Shdr)) && eh.e_shnum > 0 && eh.e_shoff > 0;
  if (ok) {
    sections.resize(eh.e_shnum);
    ok = read_at(fd, sections.data(), sizeof(ElfW(Shdr)) * eh.e_shnum,
                 static_cast<off_t>(eh.e_shoff));
  }
  close(fd);
  // The image must be this file: its header, mapped at the object's base, matches.
  if (!ok || !o->maps(o->base, sizeof(eh)) ||
      std::memcmp(reinterpret_cast<const void*>(o->base), &eh, sizeof(eh)) != 0)
    return false;
  const auto dynsym = std::find_if(sections.begin(), sections.end(),
                                   [](const ElfW(Shdr) & s) { return s.sh_type == SHT_DYNSYM; });
  if (dynsym == sections.end() || dynsym->sh_entsize != sizeof(ElfW(Sym)) ||
      dynsym->sh_link >= sections.size())
    return false;
  const ElfW(Shdr) & strtab = sections[dynsym->sh_link];
  if (strtab.sh_type != SHT_STRTAB || !o->maps(o->bias + dynsym->sh_addr, dynsym->sh_size) ||
      !o->maps(o->bias + strtab.sh_addr, strtab.sh_size))
    return false;
  const auto* syms = reinterpret_cast<const ElfW(Sym)*>(o->bias + dynsym->sh_addr);
  const size_t count = std::min<size_t>(dynsym->sh_size / sizeof(ElfW(Sym)), UINT32_MAX);
  o->strings = reinterpret_cast<const char*>(o->bias + strtab.sh_addr);
  // The symbols dladdr weighs: defined, not absolute, not thread-local.
  for (size_t i = 0; i < count; ++i) {
    const ElfW(Sym) & s = syms[i];
    if (s.st_shndx == SHN_UNDEF || s.st_shndx == SHN_ABS || s.st_value == 0 ||
        ELF64_ST_TYPE(s.st_info) == STT_TLS || ELF64_ST_TYPE(s.st_info) == STT_SECTION ||
        s.st_name >= strtab.sh_size)
      continue;
    const uintptr_t start = o->bias + s.st_value;
    o->entries.push_back(Entry{start, start + s.st_size, 0, static_cast<uint32_t>(i), s.st_name});
  }
  std::sort(o->entries.begin(), o->entries.end(), [](const Entry& a, const Entry& b) {
    return a.start != b.start ? a.start < b.start : a.order < b.order;
  });
  uintptr_t reach = 0;
  for (Entry& e : o->entries) e.reach = reach = std::max(reach, e.end);
  return true;
}

SymbolIndex::Answer SymbolIndex::lookup(uintptr_t addr, Hit* out) {
  Object* o = object_at(addr);
  if (o == nullptr) return UNKNOWN;
  if (o->state == 0) o->state = index(o) ? 1 : -1;
  if (o->state < 0) return ASK;
  out->file = &o->file;
  out->base = o->base;
  // dladdr's answer: of the symbols containing the address, the highest
  // start; of those, the first in the table. Walking down from the nearest
  // start, `reach` says when nothing further down can contain it.
  const auto& entries = o->entries;
  auto it = std::upper_bound(entries.begin(), entries.end(), addr,
                             [](uintptr_t a, const Entry& e) { return a < e.start; });
  const Entry* best = nullptr;
  for (int walked = 0; it != entries.begin(); ++walked) {
    const Entry& e = *--it;
    if (best != nullptr && e.start != best->start) break;
    if (best == nullptr && e.reach <= addr && e.start != addr) return NO_NAME;
    if (e.start == addr || addr < e.end) best = &e;
    if (best == nullptr && walked >= kMaxWalk) return ASK;
  }
  if (best == nullptr) return NO_NAME;
  out->name = o->strings + best->name;
  out->start = best->start;
  return FOUND;
}

}  // namespace dc
