// Replays ../shared/data/{cartpole,pendulum}_v1_reference.csv (recorded from gymnasium 1.4.0)
// through the native environments: the state of row t=0 is injected, the recorded actions
// are applied, and every later row must match bit for bit (float64 state, float32
// observation, float64 reward, terminated and truncated flags).
//   env_test DATA_DIR
// Exit 0 when every row matches; otherwise the first mismatches are printed and it exits 1.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "envs.hpp"

namespace {

using Row = std::map<std::string, std::string>;

// Drops a trailing '\r': the reference files have CRLF line ends.
void chomp(std::string &line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
}

std::vector<Row> read_csv(const std::string &path) {
    std::ifstream in(path);
    if (!in) {
        std::fprintf(stderr, "cannot open %s\n", path.c_str());
        std::exit(1);
    }
    std::string line;
    std::getline(in, line);
    chomp(line);
    std::vector<std::string> header;
    {
        std::stringstream ss(line);
        std::string cell;
        while (std::getline(ss, cell, ',')) header.push_back(cell);
    }
    std::vector<Row> rows;
    while (std::getline(in, line)) {
        chomp(line);
        if (line.empty()) continue;
        Row row;
        std::stringstream ss(line);
        std::string cell;
        std::size_t i = 0;
        while (std::getline(ss, cell, ',')) row[header.at(i++)] = cell;
        for (; i < header.size(); ++i) row[header[i]] = "";
        rows.push_back(row);
    }
    return rows;
}

double num(const Row &r, const char *k) { return std::strtod(r.at(k).c_str(), nullptr); }

int failures = 0;
int checked = 0;

template <class T> void same(const char *env, const Row &r, const char *what, T got, T want) {
    ++checked;
    if (std::memcmp(&got, &want, sizeof(T)) != 0) {
        if (++failures <= 20) {
            std::fprintf(stderr, "%s episode %s t=%s: %s is %.17g, gymnasium has %.17g\n", env,
                         r.at("episode").c_str(), r.at("t").c_str(), what, static_cast<double>(got),
                         static_cast<double>(want));
        }
    }
}

void flags(const char *env, const Row &r, const trainer::StepResult &s) {
    same(env, r, "terminated", static_cast<int>(s.terminated), std::atoi(r.at("terminated").c_str()));
    same(env, r, "truncated", static_cast<int>(s.truncated), std::atoi(r.at("truncated").c_str()));
}

int cartpole(const std::string &dir) {
    const char *env = "CartPole-v1";
    trainer::CartPole cp;
    int episodes = 0;
    std::string episode = "";
    bool done = false;
    for (const Row &r : read_csv(dir + "/cartpole_v1_reference.csv")) {
        if (r.at("t") == "0") {
            cp.set_state({num(r, "x"), num(r, "x_dot"), num(r, "theta"), num(r, "theta_dot")});
            episode = r.at("episode");
            ++episodes;
            done = false;
        } else {
            if (done) {
                std::fprintf(stderr, "%s episode %s: a row after the end\n", env, episode.c_str());
                ++failures;
            }
            trainer::StepResult s = cp.step(std::atoi(r.at("action").c_str()));
            same(env, r, "x", cp.state()[0], num(r, "x"));
            same(env, r, "x_dot", cp.state()[1], num(r, "x_dot"));
            same(env, r, "theta", cp.state()[2], num(r, "theta"));
            same(env, r, "theta_dot", cp.state()[3], num(r, "theta_dot"));
            same(env, r, "reward", s.reward, num(r, "reward"));
            flags(env, r, s);
            done = s.terminated || s.truncated;
        }
        float obs[4];
        cp.observe(obs);
        const char *names[4] = {"obs0", "obs1", "obs2", "obs3"};
        for (int i = 0; i < 4; ++i) same(env, r, names[i], obs[i], static_cast<float>(num(r, names[i])));
    }
    return episodes;
}

int pendulum(const std::string &dir) {
    const char *env = "Pendulum-v1";
    trainer::Pendulum p;
    int episodes = 0;
    for (const Row &r : read_csv(dir + "/pendulum_v1_reference.csv")) {
        if (r.at("t") == "0") {
            p.set_state({num(r, "th"), num(r, "thdot")});
            ++episodes;
        } else {
            // The recorded actions are float32 values written as Python floats: exact.
            trainer::StepResult s = p.step(static_cast<float>(num(r, "action")));
            same(env, r, "th", p.state()[0], num(r, "th"));
            same(env, r, "thdot", p.state()[1], num(r, "thdot"));
            same(env, r, "reward", s.reward, num(r, "reward"));
            flags(env, r, s);
        }
        float obs[3];
        p.observe(obs);
        const char *names[3] = {"obs0", "obs1", "obs2"};
        for (int i = 0; i < 3; ++i) same(env, r, names[i], obs[i], static_cast<float>(num(r, names[i])));
    }
    return episodes;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: env_test DATA_DIR (the folder with *_v1_reference.csv)\n");
        return 2;
    }
    const int cp = cartpole(argv[1]);
    const int pd = pendulum(argv[1]);
    if (failures > 0 || cp == 0 || pd == 0) {
        std::fprintf(stderr, "environment test FAILED: %d of %d values differ from gymnasium\n", failures,
                     checked);
        return 1;
    }
    std::printf("CartPole-v1 (%d episodes) and Pendulum-v1 (%d episodes): %d values bit-equal to gymnasium\n",
                cp, pd, checked);
    return 0;
}
