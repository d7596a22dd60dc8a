// A few assertions and a test registry for the collector's C++ unit tests.
// A failed check prints where and what, marks the test failed and goes on
// (safe from any thread); main() runs every registered test.
#pragma once

#include <atomic>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace check {

struct Test {
  const char* name;
  void (*fn)();
};

inline std::vector<Test>& registry() {
  static std::vector<Test> tests;
  return tests;
}

inline std::atomic<int>& failures() {
  static std::atomic<int> n{0};
  return n;
}

struct Register {
  Register(const char* name, void (*fn)()) { registry().push_back(Test{name, fn}); }
};

template <class A, class B>
void fail_eq(const char* file, int line, const char* a_text, const char* b_text, const A& a,
             const B& b) {
  std::ostringstream out;
  out << file << ":" << line << ": CHECK_EQ(" << a_text << ", " << b_text << "): " << a
      << " != " << b << "\n";
  std::fputs(out.str().c_str(), stderr);
  failures().fetch_add(1);
}

inline void fail(const char* file, int line, const char* text) {
  std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", file, line, text);
  failures().fetch_add(1);
}

}  // namespace check

#define TEST(name)                                              \
  static void name();                                           \
  static const check::Register name##_registered(#name, &name); \
  static void name()

#define CHECK(cond)                                      \
  do {                                                   \
    if (!(cond)) check::fail(__FILE__, __LINE__, #cond); \
  } while (0)

#define CHECK_EQ(a, b)                                                                           \
  do {                                                                                           \
    const auto& check_a_ = (a);                                                                  \
    const auto& check_b_ = (b);                                                                  \
    if (!(check_a_ == check_b_)) check::fail_eq(__FILE__, __LINE__, #a, #b, check_a_, check_b_); \
  } while (0)
