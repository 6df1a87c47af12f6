// The design-space exploration's solver: the paper's equation 5.
// No LibTorch (framework_test.cpp tests it).
#ifndef KARY_TRAINER_EQUATION5_HPP
#define KARY_TRAINER_EQUATION5_HPP

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trainer {

// Design-space exploration: the paper's equation 5,
//   f_a(x_a) = update_interval x f_l(x_l),  x_a + x_l <= M,
// with f_a in env steps/s, f_l in gradient steps/s (all learners together) and
// update_interval = B / R env steps per gradient step. Integer thread counts rarely meet the
// equality, so the exhaustive search takes the pair whose balanced rate
// min(f_a(x_a), update_interval f_l(x_l)) (the env steps/s the run can hold at ratio R) is
// highest, and among pairs within 2% of it the one with the smaller mismatch, then fewer
// threads.
struct DseChoice {
    int actors = 1, learners = 1;
    double balanced = 0;  // env steps/s at the replay ratio
    double mismatch = 0;  // |log(f_a / (update_interval f_l))|
};

inline DseChoice solve_equation5(const std::vector<double> &f_a, const std::vector<double> &f_l,
                                 double update_interval, int m) {
    // f_a[x-1] and f_l[x-1] are the profiles for x threads.
    DseChoice best;
    best.balanced = -1;
    for (int xa = 1; xa <= static_cast<int>(f_a.size()); ++xa) {
        for (int xl = 1; xl <= static_cast<int>(f_l.size()); ++xl) {
            if (xa + xl > m) continue;
            const double a = f_a[xa - 1];
            const double l = update_interval * f_l[xl - 1];
            DseChoice c{xa, xl, std::min(a, l), std::fabs(std::log(std::max(a, 1e-12) / std::max(l, 1e-12)))};
            bool better;
            if (best.balanced < 0 || c.balanced > best.balanced * 1.02) {
                better = true;
            } else if (c.balanced >= best.balanced / 1.02) {
                better = c.mismatch < best.mismatch - 1e-9 ||
                         (std::fabs(c.mismatch - best.mismatch) <= 1e-9 && xa + xl < best.actors + best.learners);
            } else {
                better = false;
            }
            if (better) best = c;
        }
    }
    if (best.balanced < 0) throw std::invalid_argument("equation 5 needs M >= 2 and non-empty profiles");
    return best;
}

}  // namespace trainer

#endif  // KARY_TRAINER_EQUATION5_HPP
