// Runs every registered test (check.h); `native_tests NAME...` runs those only.
#include <Python.h>

#include <cstdio>
#include <cstring>

#include "check.h"

int main(int argc, char** argv) {
  // One interpreter for the tests that read Python frames; the GIL is held
  // between tests.
  Py_InitializeEx(0);
  int ran = 0, failed = 0;
  for (const check::Test& t : check::registry()) {
    bool wanted = argc < 2;
    for (int i = 1; i < argc; ++i) wanted = wanted || std::strcmp(argv[i], t.name) == 0;
    if (!wanted) continue;
    const int before = check::failures().load();
    t.fn();
    const bool ok = check::failures().load() == before;
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", t.name);
    std::fflush(stdout);
    ++ran;
    if (!ok) ++failed;
  }
  if (Py_FinalizeEx() < 0) ++failed;
  std::printf("%d tests, %d failed\n", ran, failed);
  return failed == 0 && ran > 0 ? 0 : 1;
}
