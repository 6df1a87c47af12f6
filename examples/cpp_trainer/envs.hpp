// Native CartPole-v1 and Pendulum-v1, bit-equal to gymnasium 1.4.0 (with its TimeLimit
// wrapper): same constants, explicit Euler, reward and termination on the same state, the
// same float32 observations. ../shared/data/*_reference.csv is the oracle (env_test.cpp).
// What decides the bits: glibc's sin/cos (what NumPy calls for a scalar), no FMA contraction
// (the CMake target passes -ffp-contract=off), the order of every operation as written in
// gymnasium, and for Pendulum the float32 arithmetic NumPy applies to a float32 action.
// No LibTorch here: the environment tests build without it.
#ifndef KARY_TRAINER_ENVS_HPP
#define KARY_TRAINER_ENVS_HPP

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>

namespace trainer {

// xoshiro256** seeded by splitmix64: each actor and evaluator owns one.
class Rng {
public:
    explicit Rng(std::uint64_t seed) {
        for (auto &s : s_) {
            seed += 0x9e3779b97f4a7c15ULL;
            std::uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            s = z ^ (z >> 31);
        }
    }
    std::uint64_t next() {
        const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const std::uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    // The state words (a checkpoint saves them), and a generator in a saved state (not all
    // zero: xoshiro never reaches it).
    std::array<std::uint64_t, 4> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
    static std::optional<Rng> from_state(const std::array<std::uint64_t, 4> &s) {
        if (s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0) return std::nullopt;
        Rng r(0);
        for (int i = 0; i < 4; ++i) r.s_[i] = s[static_cast<std::size_t>(i)];
        return r;
    }
    // Uniform in [0, 1).
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    // Uniform in {0, .., n-1}.
    std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>(uniform() * n); }
    // Standard normal (Box-Muller).
    double normal() {
        double u1 = uniform();
        double u2 = uniform();
        if (u1 < 1e-300) u1 = 1e-300;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    std::uint64_t s_[4];
};

struct StepResult {
    double reward = 0;
    bool terminated = false;  // a terminal state: no bootstrapping from it
    bool truncated = false;   // the time limit: bootstrap, but start a new episode
};

// CartPole-v1: gymnasium.envs.classic_control.CartPoleEnv under TimeLimit(500).
class CartPole {
public:
    static constexpr int kObs = 4;
    static constexpr int kActions = 2;
    static constexpr int kMaxSteps = 500;

    // Uniform(-0.05, 0.05) in each state variable, as gymnasium's reset.
    void reset(Rng &rng) {
        for (double &s : state_) s = rng.uniform(-0.05, 0.05);
        steps_ = 0;
    }
    // Inject a state (the reference test) and restart the time limit.
    void set_state(const std::array<double, 4> &s) {
        state_ = s;
        steps_ = 0;
    }
    const std::array<double, 4> &state() const { return state_; }

    void observe(float *obs) const {
        for (int i = 0; i < 4; ++i) obs[i] = static_cast<float>(state_[i]);
    }

    StepResult step(int action) {
        const double gravity = 9.8, masscart = 1.0, masspole = 0.1;
        const double total_mass = masspole + masscart;
        const double length = 0.5;
        const double polemass_length = masspole * length;
        const double force_mag = 10.0, tau = 0.02;
        const double theta_threshold = 12 * 2 * M_PI / 360;
        const double x_threshold = 2.4;

        double x = state_[0], x_dot = state_[1], theta = state_[2], theta_dot = state_[3];
        const double force = action == 1 ? force_mag : -force_mag;
        const double costheta = std::cos(theta);
        const double sintheta = std::sin(theta);
        const double temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
        const double thetaacc = (gravity * sintheta - costheta * temp) /
                                (length * (4.0 / 3.0 - masspole * (costheta * costheta) / total_mass));
        const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
        // Explicit Euler: positions advance with the old velocities.
        x = x + tau * x_dot;
        x_dot = x_dot + tau * xacc;
        theta = theta + tau * theta_dot;
        theta_dot = theta_dot + tau * thetaacc;
        state_ = {x, x_dot, theta, theta_dot};
        ++steps_;

        StepResult r;
        r.terminated = x < -x_threshold || x > x_threshold || theta < -theta_threshold || theta > theta_threshold;
        r.reward = 1.0;  // also on the terminating step
        r.truncated = steps_ >= kMaxSteps;
        return r;
    }

private:
    std::array<double, 4> state_{};
    int steps_ = 0;
};

// Pendulum-v1: gymnasium.envs.classic_control.PendulumEnv under TimeLimit(200).
class Pendulum {
public:
    static constexpr int kObs = 3;
    static constexpr int kActionDim = 1;
    static constexpr int kMaxSteps = 200;
    static constexpr float kMaxTorque = 2.0f;

    // theta uniform in [-pi, pi], theta_dot uniform in [-1, 1], as gymnasium's reset.
    void reset(Rng &rng) {
        state_ = {rng.uniform(-M_PI, M_PI), rng.uniform(-1.0, 1.0)};
        steps_ = 0;
    }
    void set_state(const std::array<double, 2> &s) {
        state_ = s;
        steps_ = 0;
    }
    const std::array<double, 2> &state() const { return state_; }

    void observe(float *obs) const {
        obs[0] = static_cast<float>(std::cos(state_[0]));
        obs[1] = static_cast<float>(std::sin(state_[0]));
        obs[2] = static_cast<float>(state_[1]);
    }

    // `action` is a float32 torque; the environment clips it to [-2, 2].
    StepResult step(float action) {
        const double max_speed = 8.0, dt = 0.05, g = 10.0, m = 1.0, l = 1.0;
        const double th = state_[0], thdot = state_[1];
        float u = action;
        if (u < -kMaxTorque) u = -kMaxTorque;
        if (u > kMaxTorque) u = kMaxTorque;
        // NumPy: 0.001 * u**2 and 3.0 * u stay float32 for a float32 u (NEP 50).
        const float u_cost = 0.001f * (u * u);
        const float u_torque = 3.0f * u;
        const double n = angle_normalize(th);
        const double costs = n * n + 0.1 * (thdot * thdot) + static_cast<double>(u_cost);
        (void)m;
        double newthdot = thdot + (3 * g / (2 * l) * std::sin(th) + static_cast<double>(u_torque)) * dt;
        if (newthdot < -max_speed) newthdot = -max_speed;
        if (newthdot > max_speed) newthdot = max_speed;
        const double newth = th + newthdot * dt;
        state_ = {newth, newthdot};
        ++steps_;

        StepResult r;
        r.reward = -costs;
        r.terminated = false;
        r.truncated = steps_ >= kMaxSteps;
        return r;
    }

    // ((x + pi) mod 2 pi) - pi with NumPy's floor remainder (npy_divmod).
    static double angle_normalize(double x) {
        const double a = x + M_PI;
        const double b = 2 * M_PI;
        double mod = std::fmod(a, b);
        if (mod != 0) {
            if ((b < 0) != (mod < 0)) mod += b;
        } else {
            mod = std::copysign(0.0, b);
        }
        return mod - M_PI;
    }

private:
    std::array<double, 2> state_{};
    int steps_ = 0;
};

}  // namespace trainer

#endif  // KARY_TRAINER_ENVS_HPP
