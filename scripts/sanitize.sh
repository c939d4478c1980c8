#!/usr/bin/env bash
# Build the standalone stage-DP fuzz driver (cpp/tests/stage_dp_test.cpp, no pybind11,
# linked directly against cpp/stage_dp.cpp), the schedule driver
# (cpp/tests/schedule_test.cpp against cpp/schedule.cpp) and the routing driver
# (cpp/tests/routing_test.cpp against cpp/routing.cpp) with AddressSanitizer and
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
for mode in $modes; do
    exe="$build/stage_dp_test_omp_$mode"
    case "$mode" in
        on) extra=(-fopenmp -DNEST_HAVE_OPENMP) ;;
        off) extra=() ;;
        *) echo "sanitize.sh: SANITIZE_OPENMP must list 'on' and/or 'off', got '$mode'" >&2; exit 2 ;;
    esac
    echo "== building $exe ($cxx, OpenMP $mode)"
    "$cxx" "${flags[@]}" "${extra[@]}" -I"$root/cpp" \
        "$root/cpp/stage_dp.cpp" "$root/cpp/tests/stage_dp_test.cpp" -o "$exe"
    echo "== running $exe $random $hostile $seed"
    if ! "$exe" "$random" "$hostile" "$seed"; then
        echo "sanitize.sh: FAILED (OpenMP $mode)" >&2
        status=1
    fi
    schedule_exe="$build/schedule_test_omp_$mode"
    "$cxx" "${flags[@]}" "${extra[@]}" -I"$root/cpp" \
        "$root/cpp/schedule.cpp" "$root/cpp/tests/schedule_test.cpp" -o "$schedule_exe"
    echo "== running $schedule_exe $random $seed"
    if ! "$schedule_exe" "$random" "$seed"; then
        echo "sanitize.sh: schedule FAILED (OpenMP $mode)" >&2
        status=1
    fi
    routing_exe="$build/routing_test_omp_$mode"
    "$cxx" "${flags[@]}" "${extra[@]}" -I"$root/cpp" \
        "$root/cpp/routing.cpp" "$root/cpp/tests/routing_test.cpp" -o "$routing_exe"
    echo "== running $routing_exe $random $seed"
    if ! "$routing_exe" "$random" "$seed"; then
        echo "sanitize.sh: routing FAILED (OpenMP $mode)" >&2
        status=1
    fi
done
if [ "$status" -eq 0 ]; then
    echo "sanitize.sh: no sanitizer findings, every check passed"
fi
exit "$status"
