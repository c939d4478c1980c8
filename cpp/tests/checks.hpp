// The counted check of the standalone C++ test drivers (schedule_test, routing_test): each
// failure is printed to stderr; a driver reports the counts and exits non-zero on any.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace nest_tests {

inline int64_t g_failures = 0, g_checks = 0;

inline void check(bool ok, const std::string& what) {
    ++g_checks;
    if (!ok) {
        ++g_failures;
        std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    }
}

}  // namespace nest_tests
