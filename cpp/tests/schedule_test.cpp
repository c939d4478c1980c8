// Standalone checks of cpp/schedule.cpp (no pybind11), built and run under AddressSanitizer
// and UndefinedBehaviorSanitizer by scripts/sanitize.sh.
//
//   schedule_test [random_instances] [seed]
//
// Random pipelines: every rank finishes no earlier than its own work, no later than the
// serial sum of every task, and the result does not depend on anything but the input.
// Equal stages: the classic closed forms hold exactly (1F1B (m - 1 + p) T with m >= p,
// interleaved (m v + p - 1) T). Hostile input: every malformed argument is rejected with
// std::invalid_argument.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "checks.hpp"
#include "schedule.hpp"

namespace {

using nest_tests::check;
using nest_tests::g_checks;
using nest_tests::g_failures;

struct Pipeline {
    int64_t pp, vp, m;
    std::vector<double> f, r, b, sf, sb;
    int64_t extra = 0;  // warm-up forwards beyond Megatron's (the combined 1F1B of EP overlap)
};

std::vector<double> run(const Pipeline& x) {
    return nest::pipeline_finish(x.pp, x.vp, x.m, x.f, x.r, x.b, x.sf, x.sb, x.extra);
}

Pipeline random_pipeline(std::mt19937_64& rng) {
    std::uniform_int_distribution<int64_t> pick_p(1, 8), pick_v(1, 4), pick_k(1, 6);
    std::uniform_real_distribution<double> time(0.0, 2.0);
    Pipeline x;
    x.pp = pick_p(rng);
    x.vp = x.pp > 1 ? pick_v(rng) : 1;
    x.m = x.vp > 1 ? x.pp * pick_k(rng) : pick_k(rng) * 3 - 2;
    const size_t n = static_cast<size_t>(x.pp * x.vp);
    for (auto* v : {&x.f, &x.r, &x.b, &x.sf, &x.sb}) {
        v->resize(n);
        for (double& t : *v) t = time(rng) * (rng() % 4 == 0 ? 0.0 : 1.0);
    }
    x.extra = static_cast<int64_t>(rng() % 2);
    return x;
}

void random_checks(std::mt19937_64& rng, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
        const Pipeline x = random_pipeline(rng);
        const std::string where = "random #" + std::to_string(i);
        const std::vector<double> finish = run(x);
        check(finish == run(x), where + ": deterministic");
        check(static_cast<int64_t>(finish.size()) == x.pp, where + ": one finish per rank");
        double serial = 0;
        for (size_t q = 0; q < x.f.size(); ++q) serial += x.f[q] + x.r[q] + x.b[q] + x.sf[q] + x.sb[q];
        serial *= static_cast<double>(x.m);
        for (int64_t d = 0; d < x.pp; ++d) {
            double work = 0;
            for (int64_t q = d; q < x.pp * x.vp; q += x.pp) {
                const size_t k = static_cast<size_t>(q);
                work += x.f[k] + x.r[k] + x.b[k] + (q + 1 < x.pp * x.vp ? x.sf[k] : 0) + (q > 0 ? x.sb[k] : 0);
            }
            work *= static_cast<double>(x.m);
            check(finish[d] >= work * (1 - 1e-12), where + ": a rank finishes after its own work");
            check(finish[d] <= serial * (1 + 1e-12), where + ": no rank finishes after the serial schedule");
        }
    }
}

void closed_form_checks() {
    for (int64_t p = 1; p <= 8; ++p)
        for (int64_t v = 1; v <= (p > 1 ? 4 : 1); ++v)
            for (int64_t k = 1; k <= 4; ++k) {
                const int64_t m = v > 1 ? p * k : p + k - 1;
                const size_t n = static_cast<size_t>(p * v);
                Pipeline x{p, v, m, std::vector<double>(n, 1.0), std::vector<double>(n, 0.0),
                           std::vector<double>(n, 2.0), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
                const double expected = 3.0 * (v == 1 ? static_cast<double>(m - 1 + p) : static_cast<double>(m * v + p - 1));
                const std::vector<double> finish = run(x);
                check(std::fabs(finish[0] - expected) <= 1e-9 * expected,
                      "equal stages p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m) +
                          ": " + std::to_string(finish[0]) + " vs " + std::to_string(expected));
            }
}

void expect_reject(const Pipeline& x, const std::string& what) {
    bool rejected = false;
    try {
        run(x);
    } catch (const std::invalid_argument&) {
        rejected = true;
    }
    check(rejected, "rejects " + what);
}

void hostile_checks(std::mt19937_64& rng) {
    const Pipeline base = [&] {
        Pipeline x;
        do x = random_pipeline(rng);
        while (x.vp == 1);
        return x;
    }();
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    for (double bad : {-1.0, nan, inf, -inf}) {
        for (int which = 0; which < 5; ++which) {
            Pipeline x = base;
            std::vector<double>* arrays[] = {&x.f, &x.r, &x.b, &x.sf, &x.sb};
            (*arrays[which])[rng() % x.f.size()] = bad;
            expect_reject(x, "a bad time in array " + std::to_string(which));
        }
    }
    Pipeline x = base;
    x.b.pop_back();
    expect_reject(x, "a short array");
    x = base;
    x.m = base.pp * 2 + 1;
    expect_reject(x, "micro-batches not divisible by pp when interleaving");
    for (int64_t extra : {-1, 2}) {
        x = base;
        x.extra = extra;
        expect_reject(x, "extra_warmup = " + std::to_string(extra));
    }
    for (int64_t* field : {&x.pp, &x.vp, &x.m}) {
        x = base;
        *field = 0;
        expect_reject(x, "a zero size");
    }
    for (int64_t* field : {&x.pp, &x.vp, &x.m}) {
        x = base;
        *field = int64_t(1) << 40;
        expect_reject(x, "an absurd size");
    }
    x = base;
    x.pp = x.vp = x.m = int64_t(1) << 62;
    expect_reject(x, "sizes whose product overflows");
}

}  // namespace

int main(int argc, char** argv) {
    const int64_t count = argc > 1 ? std::atoll(argv[1]) : 2000;
    const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20261129ULL;
    std::mt19937_64 rng(seed);
    random_checks(rng, count);
    closed_form_checks();
    for (int i = 0; i < 50; ++i) hostile_checks(rng);
    std::printf("schedule_test: seed %llu, %lld random pipelines, checks %lld, failures %lld\n",
                static_cast<unsigned long long>(seed), static_cast<long long>(count),
                static_cast<long long>(g_checks), static_cast<long long>(g_failures));
    return g_failures == 0 ? 0 : 1;
}
