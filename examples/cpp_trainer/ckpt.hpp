// Checkpoints of a run (--checkpoint DIR --checkpoint-every N --resume).
//
// Every N env steps the monitor holds the learners at a round's end and then the actors
// (each flushes its writer and parks), so that the buffer holds exactly the transitions of
// the counted env steps and the networks hold every gradient of the batches taken. It then
// writes, in DIR:
//
//   trainer-<step>.pt   the master networks (online and target), the Adam optimizers'
//                       state and the parameter server's round (a torch archive); written
//                       to a temporary name, fsynced, renamed, and the directory fsynced;
//   ckpt-<step>/        the replay buffer in the crate's checkpoint format, whose counters
//                       hold the rest: env steps, samples granted (the rate control),
//                       episodes, priority updates, evaluations, every actor's RNG state,
//                       the trainer file's CRC-32. Its COMMIT is the checkpoint's: a crash
//                       before it leaves the previous checkpoint the newest.
//
// The last three checkpoints are kept (with their trainer files). A run also saves one when
// it ends. --resume starts from the newest committed checkpoint in DIR (a new run when there
// is none): the buffer, networks, optimizers, counters and the actors' RNGs come back;
// episodes restart (environments are reset); the learners' samplers and torch's generator
// are reseeded from the seed and the step; with --priority-delay D the up to D batches per
// learner whose priorities were not yet written back are not in the checkpoint.
#ifndef KARY_TRAINER_CKPT_HPP
#define KARY_TRAINER_CKPT_HPP

#include <fcntl.h>
#include <unistd.h>

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "actor.hpp"
#include "kary_replay.hpp"
#include "param_server.hpp"

namespace trainer {

namespace kr = kary_replay;

// The counters a checkpoint records beside the buffer and the networks.
struct Counters {
    long steps = 0;
    long granted = 0;
    long episodes = 0;
    long priority_updates = 0;
    long stale_updates = 0;
    std::uint64_t evaluations = 0;
};

// What a resumed run starts from (the buffer and the server are loaded by find_checkpoint).
struct Resume {
    std::string dir;
    Counters counters;
};

namespace ckpt_detail {

constexpr std::size_t kKeep = 3;  // checkpoints kept in DIR

inline std::uint32_t crc32(const std::vector<char> &bytes) {
    std::uint32_t crc = 0xFFFFFFFFu;
    for (char c : bytes) {
        crc ^= static_cast<unsigned char>(c);
        for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

inline std::vector<char> read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void fsync_path(const std::string &path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error("cannot open " + path + " to fsync it");
    const int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) throw std::runtime_error("cannot fsync " + path);
}

inline std::string numbered(const std::string &prefix, long step, const std::string &suffix) {
    char name[64];
    std::snprintf(name, sizeof name, "%s%012ld%s", prefix.c_str(), step, suffix.c_str());
    return name;
}

// Removes trainer files whose buffer checkpoint was rotated away (best effort).
inline void remove_orphans(const std::filesystem::path &parent) {
    std::error_code ec;
    for (const auto &entry : std::filesystem::directory_iterator(parent, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("trainer-", 0) != 0 || name.size() < 12 || name.substr(name.size() - 3) != ".pt") continue;
        const std::string step = name.substr(8, name.size() - 11);
        if (!std::filesystem::exists(parent / ("ckpt-" + step))) std::filesystem::remove(entry.path(), ec);
    }
}

}  // namespace ckpt_detail

// Writes a checkpoint of the held run: the trainer file, then the buffer (the sequence
// buffer `seq` with --nstep) with the counters (its COMMIT last). Returns the buffer
// checkpoint's directory, or nothing when one exists for this step already. Throws on an
// I/O error.
inline std::optional<std::string> save_checkpoint(const Options &o, const kr::Buffer &buffer,
                                                  const kr::SequenceBuffer *seq, const ParamServer &server,
                                                  const Counters &c, RngBoard &rngs) {
    namespace fs = std::filesystem;
    const fs::path parent(o.checkpoint);
    const std::string dir = (parent / ckpt_detail::numbered("ckpt-", c.steps, "")).string();
    if (fs::exists(dir)) return std::nullopt;
    fs::create_directories(parent);
    const std::string name = ckpt_detail::numbered("trainer-", c.steps, ".pt");
    const std::string path = (parent / name).string();
    const std::string tmp = (parent / ("." + name + ".tmp")).string();
    {
        torch::serialize::OutputArchive archive;
        server.save(archive);
        archive.save_to(tmp);
    }
    const std::uint32_t crc = ckpt_detail::crc32(ckpt_detail::read_file(tmp));
    ckpt_detail::fsync_path(tmp);
    fs::rename(tmp, path);
    ckpt_detail::fsync_path(parent.string());

    std::vector<std::pair<std::string, std::uint64_t>> user{
        {"kary_trainer", 1},
        {"algo_dqn", o.algo == "dqn" ? 1u : 0u},
        {"env_steps", static_cast<std::uint64_t>(c.steps)},
        {"granted", static_cast<std::uint64_t>(c.granted)},
        {"episodes", static_cast<std::uint64_t>(c.episodes)},
        {"priority_updates", static_cast<std::uint64_t>(c.priority_updates)},
        {"stale_updates", static_cast<std::uint64_t>(c.stale_updates)},
        {"evaluations", c.evaluations},
        {"trainer_crc32", crc},
    };
    {
        std::lock_guard<std::mutex> lock(rngs.mutex);
        user.emplace_back("actors", rngs.actors.size());
        for (std::size_t i = 0; i < rngs.actors.size(); ++i) {
            const auto words = rngs.actors[i].state();
            for (std::size_t w = 0; w < 4; ++w) {
                user.emplace_back("actor_rng." + std::to_string(i) + "." + std::to_string(w), words[w]);
            }
        }
    }
    if (seq) {
        seq->save(dir, ckpt_detail::kKeep, user);
    } else {
        buffer.save(dir, ckpt_detail::kKeep, user);
    }
    ckpt_detail::remove_orphans(parent);
    return dir;
}

// The newest committed checkpoint in --checkpoint, if any: loads its buffer (of --variant)
// into `buffer`, or with --nstep its sequence buffer into `seq`, its networks and
// optimizers into `server`, its actors' RNGs into `rngs`, and returns its counters. Throws
// std::runtime_error on a checkpoint of another run kind or a damaged trainer file.
inline std::optional<Resume> find_checkpoint(const Options &o, std::optional<kr::Buffer> &buffer,
                                             std::optional<kr::SequenceBuffer> &seq, ParamServer &server,
                                             RngBoard &rngs) {
    const std::optional<std::string> dir = kr::latest_checkpoint(o.checkpoint);
    if (!dir) return std::nullopt;
    auto bad = [&](const std::string &what) { return std::runtime_error("checkpoint " + *dir + ": " + what); };
    auto get = [&](const std::string &key) {
        const std::optional<std::uint64_t> v = kr::checkpoint_user_u64(*dir, key);
        if (!v) throw bad("no " + key);
        return *v;
    };
    if (get("kary_trainer") != 1) throw bad("not a checkpoint of the C++ trainer");
    if ((get("algo_dqn") == 1) != (o.algo == "dqn")) throw bad("saved by a run of the other --algo");
    Resume r;
    r.dir = *dir;
    r.counters.steps = static_cast<long>(get("env_steps"));
    r.counters.granted = static_cast<long>(get("granted"));
    r.counters.episodes = static_cast<long>(get("episodes"));
    r.counters.priority_updates = static_cast<long>(get("priority_updates"));
    r.counters.stale_updates = static_cast<long>(get("stale_updates"));
    r.counters.evaluations = get("evaluations");

    const std::string path =
        (std::filesystem::path(o.checkpoint) / ckpt_detail::numbered("trainer-", r.counters.steps, ".pt")).string();
    if (ckpt_detail::crc32(ckpt_detail::read_file(path)) != get("trainer_crc32")) {
        throw std::runtime_error(path + ": CRC-32 mismatch (damaged)");
    }
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    server.load(archive);

    const std::uint64_t n = get("actors");
    {
        std::lock_guard<std::mutex> lock(rngs.mutex);
        for (std::size_t i = 0; i < rngs.actors.size() && i < n; ++i) {
            std::array<std::uint64_t, 4> words{};
            for (std::size_t w = 0; w < 4; ++w) words[w] = get("actor_rng." + std::to_string(i) + "." + std::to_string(w));
            std::optional<trainer::Rng> rng = trainer::Rng::from_state(words);
            if (!rng) throw bad("a bad RNG state");
            rngs.actors[i] = *rng;
        }
        rngs.learner_salt = static_cast<std::uint64_t>(r.counters.steps);
    }

    const std::uint32_t variant = o.variant == "global"  ? KR_VARIANT_GLOBAL_LOCK
                                  : o.variant == "split" ? KR_VARIANT_SPLIT_LOCK
                                                         : KR_VARIANT_LOCK_FREE;
    if (o.nstep > 1) {
        seq.emplace(kr::SequenceBuffer::load(*dir));
    } else {
        buffer.emplace(kr::Buffer::load(*dir, variant));
    }
    return r;
}

}  // namespace trainer

#endif  // KARY_TRAINER_CKPT_HPP
