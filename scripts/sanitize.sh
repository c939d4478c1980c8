#!/usr/bin/env bash
# Build the standalone stage-DP fuzz driver (cpp/tests/stage_dp_test.cpp, no pybind11,
# linked directly against cpp/stage_dp.cpp), the schedule driver
# (cpp/tests/schedule_test.cpp against cpp/schedule.cpp) and the routing driver
# (cpp/tests/routing_test.cpp against cpp/routing.cpp and cpp/graphs.cpp) with AddressSanitizer and
# UndefinedBehaviorSanitizer, with OpenMP on and off, and run them. Exits non-zero on any
# sanitizer finding or failed check.
#
#   scripts/sanitize.sh [random_instances] [hostile_instances] [seed]
#
# Environment: CXX (default g++), SANITIZE_BUILD (build directory, default
# build/sanitize), SANITIZE_OPENMP ("on off" by default; "on" or "off" for one build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cxx="${CXX:-g++}"
build="${SANITIZE_BUILD:-$root/build/sanitize}"
random="${1:-3000}"
hostile="${2:-3000}"
seed="${3:-20240601}"
modes="${SANITIZE_OPENMP:-on off}"
mkdir -p "$build"

# -fno-sanitize-recover=all: the first finding aborts the run with a non-zero status.
# float-cast-overflow is not part of -fsanitize=undefined in GCC; the DP converts doubles
# to int64 (G(w)), so it is enabled explicitly. -ffp-contract=off as in CMakeLists.txt:
# the driver's brute force must round exactly like the DP.
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -ffp-contract=off -fno-fast-math
       -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all
       -Wall -Wextra -Werror)

# halt_on_error/abort_on_error: never continue after a finding; detect_leaks: LeakSanitizer.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

status=0
# drive NAME "SOURCES" ARGS...: build cpp/tests/NAME.cpp against cpp/SOURCE for each of the
# space-separated SOURCES for this mode, run it with ARGS, and record a failure
drive() {
    local name="$1" exe="$build/$1_omp_$mode" sources=() source
    for source in $2; do sources+=("$root/cpp/$source"); done
    shift 2
    echo "== building $exe ($cxx, OpenMP $mode)"
    "$cxx" "${flags[@]}" "${extra[@]}" -I"$root/cpp" "${sources[@]}" "$root/cpp/tests/$name.cpp" -o "$exe"
    echo "== running $exe $*"
    if ! "$exe" "$@"; then
        echo "sanitize.sh: $name FAILED (OpenMP $mode)" >&2
        status=1
    fi
}
for mode in $modes; do
    case "$mode" in
        on) extra=(-fopenmp -DNEST_HAVE_OPENMP) ;;
        off) extra=() ;;
        *) echo "sanitize.sh: SANITIZE_OPENMP must list 'on' and/or 'off', got '$mode'" >&2; exit 2 ;;
    esac
    drive stage_dp_test stage_dp.cpp "$random" "$hostile" "$seed"
    drive schedule_test schedule.cpp "$random" "$seed"
    drive routing_test "routing.cpp graphs.cpp" "$random" "$seed"
done
if [ "$status" -eq 0 ]; then
    echo "sanitize.sh: no sanitizer findings, every check passed"
fi
exit "$status"
