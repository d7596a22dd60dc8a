#!/usr/bin/env bash
# make test-native: the C++ sources checked against .clang-format and the
# collector's against .clang-tidy, then the
# collector built with sanitizers, one build tree per sanitizer under build/:
# its C++ unit tests (tests/native), then the collector's contract tests and
# the native capture's tests against that module, loaded into the
# (unsanitized) interpreter with the runtime preloaded.
#
#   tests/native/run.sh [format|tidy|asan|tsan]...   (default: all four)
#
# Suppressions (tests/native/*.supp) name CPython and torch only, never the
# collector.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY=${PYTHON:-$ROOT/.venv/bin/python}
CXX=${CXX:-g++}
JOBS=${JOBS:-$(nproc)}
PYBIND11_DIR=$("$PY" -m pybind11 --cmakedir)
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

# The contract suite: every test that runs against both collectors, and the
# native capture path's tests, memory by context's among them (found by
# name, wherever the suites live).
CONTRACT=$(find tests -name 'test_collector*.py' -o -name 'test_frame_walk.py' -o -name 'test_sampler.py' \
             -o -name 'test_contract_*.py' -o -path 'tests/collect/test_native.py' | sort)
TORCH=$(find tests -path '*torch*' \( -name 'test_native.py' -o -name 'test_backward.py' \
           -o -name 'test_memory.py' \) | sort)

# An interpreter that sees the checkout's Python packages, the sanitized
# module and the environment's other packages, without the editable
# install's finder (which would hand out the environment's own module).
overlay() {  # overlay BUILD_DIR
  local out=$1/root
  rm -rf "$out" && mkdir -p "$out/dc_core"
  for entry in "$ROOT"/dc_core/* "$ROOT"/dc_core/.[!.]*; do
    [ -e "$entry" ] || continue
    case $(basename "$entry") in _native*.so|__pycache__) continue ;; esac
    ln -s "$entry" "$out/dc_core/"
  done
  cp "$1"/_native*.so "$out/dc_core/"
  for entry in dc_torch dc_jax dc_lightning dc_hf tests pyproject.toml; do ln -s "$ROOT/$entry" "$out/"; done
}

# One interpreter environment for both runs (the torch extension's build is
# cached per environment): the environment's packages through a path line,
# not through its .pth files, which would install the editable finder.
VENV=$ROOT/build/native-venv
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv --without-pip "$VENV"
  echo "$SITE" >"$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/environment.pth"
fi

# Every C++ file of ours laid out as .clang-format says, by the clang-format
# constraints.txt pins (another version lays some lines out otherwise).
check_format() {
  local tool=${CLANG_FORMAT:-clang-format} want have file bad=()
  want=$(sed -n 's/^clang-format==//p' constraints.txt)
  have=$("$tool" --version 2>/dev/null | sed -n 's/.*clang-format version \([0-9.]*\).*/\1/p' || true)
  if [ "$have" != "$want" ]; then
    echo "format: needs clang-format $want (constraints.txt), found '${have:-none}': pip install clang-format==$want" >&2
    return 1
  fi
  echo "== format: C++ against .clang-format (clang-format $have)"
  while IFS= read -r file; do
    "$tool" --dry-run --Werror "$file" >/dev/null 2>&1 || bad+=("$file")
  done < <(find native dc_torch/csrc dc_core/include tests/native -type f \
             \( -name '*.h' -o -name '*.hpp' -o -name '*.cc' -o -name '*.cpp' \) | sort)
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: not laid out as .clang-format says (clang-format -i FILE... fixes them):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    return 1
  fi
}

# The collector's sources through clang-tidy (.clang-tidy: its checks, every
# warning an error), by the version constraints.txt pins, with the compile
# commands of a build tree configured for it (configured only, not built).
check_tidy() {
  local tool=${CLANG_TIDY:-clang-tidy} want have build=$ROOT/build/native-tidy
  want=$(sed -n 's/^clang-tidy==//p' constraints.txt)
  have=$("$tool" --version 2>/dev/null | sed -n 's/.*LLVM version \([0-9.]*\).*/\1/p' || true)
  if [ "$have" != "$want" ]; then
    echo "tidy: needs clang-tidy $want (constraints.txt), found '${have:-none}': pip install clang-tidy==$want" >&2
    return 1
  fi
  echo "== tidy: native/ against .clang-tidy (clang-tidy $have)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_CXX_COMPILER="$CXX" \
    -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$PYBIND11_DIR" >"$build.configure.log" || { cat "$build.configure.log"; return 1; }
  "$tool" -p "$build" --quiet native/*.cc
}

# The torch extension, unsanitized, built against this environment's torch
# (it calls the sanitized module through the capture table): once, before
# the first interpreter run.
capture_extension() {
  [ -z "${CAPTURE_READY:-}" ] || return 0
  (cd "$ROOT" && "$VENV/bin/python" -m dc_torch.native) || echo "warning: no native capture; its tests will fail"
  CAPTURE_READY=1
}

run_one() {  # run_one NAME SANITIZERS RUNTIME [PYTEST -k EXPRESSION]
  local name=$1 sanitize=$2 runtime build=$ROOT/build/native-$1 select=${4:-not reference}
  # The sanitizer's runtime first; libstdc++ with it, so the runtime finds
  # the __cxa_throw it wraps (the interpreter itself does not link it).
  runtime="$("$CXX" -print-file-name="$3") $("$CXX" -print-file-name=libstdc++.so)"
  echo "== $name: building the collector and its C++ tests with -fsanitize=$sanitize"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX" \
    -DDC_SANITIZE="$sanitize" -DDC_NATIVE_TESTS=ON -DPython_EXECUTABLE="$PY" \
    -Dpybind11_DIR="$PYBIND11_DIR" >"$build.configure.log" || { cat "$build.configure.log"; return 1; }
  cmake --build "$build" -j "$JOBS"
  echo "== $name: C++ unit tests"
  ASAN_OPTIONS=detect_leaks=1 "$build/tests/native/native_tests"
  echo "== $name: contract and native capture tests against the sanitized module"
  capture_extension
  overlay "$build"
  (cd "$build/root" && ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD="$runtime" "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
     -k "$select" $CONTRACT $TORCH)
}

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Leaks: CPython keeps objects until exit by design, so the interpreter runs
# go without leak checks; the C++ tests keep them, CPython's own suppressed.
export LSAN_OPTIONS=suppressions=$ROOT/tests/native/lsan.supp
# die_after_fork=0: a test forks mid-window and its child starts the sampler,
# which TSan cannot follow (it says so and stops otherwise).
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 die_after_fork=0 suppressions=$ROOT/tests/native/tsan.supp"

for which in "${@:-format tidy asan tsan}"; do
  for w in $which; do
    case $w in
      format) check_format ;;
      tidy) check_tidy ;;
      asan) run_one asan address,undefined libasan.so ;;
      # TSan cannot follow a multi-threaded process into a forked child
      # (DataLoader workers, a fork mid-window): those tests run under ASan.
      # One OpenMP thread: torch's parallel regions run in libgomp, which
      # TSan does not see synchronise.
      tsan) OMP_NUM_THREADS=1 run_one tsan thread libtsan.so "not reference and not fork" ;;
      *) echo "unknown run: $w (format, tidy, asan, tsan)" >&2; exit 2 ;;
    esac
  done
done
echo "== test-native: clean"
