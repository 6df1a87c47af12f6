// 4 actor threads (two inserting one item at a time, two through a staged kr::Writer) and
// 2 learner threads on one buffer of each variant, through the C++ wrapper
// (kary_replay.hpp). Checks:
//   - during the run, every sampled row is whole (no torn read): its payload is the one its
//     id makes, its priority is positive, its key names its slot, its weight is in (0, 1];
//   - afterwards, nothing is lost: every generation 0..inserted was handed out once, each
//     slot holds the newest generation that maps to it, every row a learner saw belongs to
//     the generation its key names, and the tree is exact.
// Run by ffi/tests/run.sh, also under valgrind (with a smaller scale: argv[1]).
#include "kary_replay.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace kr = kary_replay;

namespace {

constexpr int ACTORS = 4;
constexpr int LEARNERS = 2;
constexpr std::size_t PAYLOAD = 8;
constexpr std::size_t BATCH = 32;
// Rows each learner keeps for the end-of-run check (memory stays bounded).
constexpr std::size_t MAX_SEEN = 1 << 18;

std::atomic<int> failures{0};

void fail(const std::string &what) {
    if (failures.fetch_add(1) < 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

// The payload an id makes: every element is a function of the id and its position.
float payload(std::int64_t id, std::size_t j) { return static_cast<float>(id % 100003) + 0.25f * j; }

struct Seen {
    std::uint64_t generation;
    std::int64_t id;
};

void run(std::uint32_t variant, const char *name, std::size_t capacity, int per_actor, int batches) {
    kr_config config = kr::default_config();
    config.capacity = capacity;
    config.fanout = 8;
    config.variant = variant;
    // Integer priorities with alpha 1: every sum is exact, so the tree must be bit-exact at
    // the end (the locked variants update sums by deltas, which rounds otherwise).
    config.alpha = 1.0;
    kr::Buffer buffer(config, {kr::column<std::int64_t>("id", 1), kr::column<float>("payload", PAYLOAD)});

    // generation -> id, as each actor's insert returned it.
    std::vector<std::atomic<std::int64_t>> ids(static_cast<std::size_t>(ACTORS) * per_actor);
    for (auto &id : ids) id.store(-1);
    std::atomic<int> actors_done{0};
    std::vector<std::vector<Seen>> seen(LEARNERS);
    std::atomic<long> sampled{0}, contention{0}, stale{0};

    std::vector<std::thread> threads;
    for (int a = 0; a < ACTORS; ++a) {
        threads.emplace_back([&, a] {
            std::mt19937_64 gen(a);
            std::uniform_int_distribution<int> priority(1, 16);
            auto record = [&](const kr_key &key, std::int64_t id) {
                if (kr_key_insertion(key) >= ids.size()) {
                    fail("generation out of range");
                    return;
                }
                std::int64_t expected = -1;
                if (!ids[kr_key_insertion(key)].compare_exchange_strong(expected, id)) fail("generation handed out twice");
                if (key.index != kr_key_insertion(key) % capacity) fail("key index is not generation % capacity");
            };
            // Odd actors stage their inserts in a Writer (flushing every 4a items), the
            // others insert one at a time; the writer's keys come in push order.
            std::optional<kr::Writer> writer;
            if (a % 2 == 1) writer.emplace(buffer, 4 * a);
            std::vector<std::int64_t> pending;
            auto take_keys = [&](std::size_t flushed) {
                if (flushed == 0) return;
                std::vector<kr_key> keys = writer->keys();
                if (keys.size() != flushed || flushed > pending.size()) {
                    fail("writer keys do not match the items flushed");
                    return;
                }
                for (std::size_t k = 0; k < flushed; ++k) record(keys[k], pending[k]);
                pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(flushed));
            };
            for (int j = 0; j < per_actor; ++j) {
                std::int64_t id = static_cast<std::int64_t>(a) * 1000000 + j;
                std::vector<float> p(PAYLOAD);
                for (std::size_t e = 0; e < PAYLOAD; ++e) p[e] = payload(id, e);
                std::int64_t id_col[1] = {id};
                std::optional<double> prio;
                if (j % 3 != 0) prio = priority(gen);
                if (writer) {
                    pending.push_back(id);
                    take_keys(writer->push({id_col, p}, prio));
                } else {
                    record(buffer.insert({id_col, p}, prio), id);
                }
            }
            if (writer) {
                take_keys(writer->flush());
                if (!pending.empty() || writer->staged() != 0) fail("staged items left after the flush");
            }
            actors_done.fetch_add(1);
        });
    }
    for (int l = 0; l < LEARNERS; ++l) {
        threads.emplace_back([&, l] {
            kr::Rng rng(100 + l);
            std::vector<kr_key> keys(BATCH);
            std::vector<std::uint64_t> indices(BATCH);
            std::vector<double> weights(BATCH), priorities(BATCH), new_priorities(BATCH);
            std::vector<std::int64_t> id_out(BATCH);
            std::vector<float> payload_out(BATCH * PAYLOAD);
            kr::SampleOut out{keys, indices, weights, {}, priorities, {id_out, payload_out}};
            std::mt19937_64 gen(1000 + l);
            std::uniform_int_distribution<int> priority(1, 16);
            int done = 0;
            // Until the actors finish and at least `batches` batches are done.
            while (done < batches || actors_done.load() < ACTORS) {
                // A replay ratio of at most 8 sampled rows per insert while the actors run,
                // as a trainer would keep (and so learners cannot starve the actors).
                if (actors_done.load() < ACTORS &&
                    static_cast<std::uint64_t>(done) * BATCH > 8 * buffer.inserted()) {
                    std::this_thread::yield();
                    continue;
                }
                try {
                    buffer.sample_into(rng, BATCH, 0.4, KR_SAMPLE_STRATIFIED, out);
                } catch (const kr::Error &e) {
                    if (e.status() == KR_E_EMPTY) continue;
                    if (e.status() == KR_E_CONTENTION) {
                        contention.fetch_add(1);
                        continue;
                    }
                    fail(std::string("sample threw: ") + e.what());
                    return;
                }
                ++done;
                for (std::size_t r = 0; r < BATCH; ++r) {
                    std::int64_t id = id_out[r];
                    for (std::size_t e = 0; e < PAYLOAD; ++e) {
                        if (payload_out[r * PAYLOAD + e] != payload(id, e)) {
                            fail("torn row: payload does not match its id");
                            break;
                        }
                    }
                    if (!(priorities[r] > 0)) fail("sampled a priority that is not positive");
                    if (indices[r] >= capacity || keys[r].index != indices[r]) fail("bad index");
                    if (kr_key_insertion(keys[r]) % capacity != keys[r].index) fail("key does not name its slot");
                    if (!(weights[r] > 0 && weights[r] <= 1)) fail("weight outside (0, 1]");
                    if (seen[l].size() < MAX_SEEN) seen[l].push_back(Seen{kr_key_insertion(keys[r]), id});
                    new_priorities[r] = priority(gen);
                }
                kr_update_report report = buffer.update_priorities(keys, new_priorities);
                if (report.applied + report.stale != BATCH) fail("update report does not add up");
                stale.fetch_add(static_cast<long>(report.stale));
                sampled.fetch_add(BATCH);
            }
        });
    }
    for (auto &t : threads) t.join();

    const std::uint64_t inserted = buffer.inserted();
    if (inserted != ids.size()) fail("inserted() is not the number of inserts");
    for (std::size_t g = 0; g < ids.size(); ++g) {
        if (ids[g].load() < 0) fail("generation " + std::to_string(g) + " never handed out");
    }
    if (buffer.len() != std::min<std::size_t>(capacity, ids.size())) fail("len()");
    for (std::size_t i = 0; i < capacity && i < ids.size(); ++i) {
        std::optional<kr_key> key = buffer.key(i);
        // The newest generation that maps to slot i.
        std::uint64_t newest = i + (inserted - 1 - i) / capacity * capacity;
        if (!key || kr_key_insertion(*key) != newest) fail("slot " + std::to_string(i) + " lost its newest item");
    }
    for (const auto &rows : seen) {
        for (const Seen &s : rows) {
            if (s.generation >= ids.size() || ids[s.generation].load() != s.id) {
                fail("a sampled row is not the item its key names");
                break;
            }
        }
    }
    // Every row still stored is its own item: sample all of it and compare with the actors' record.
    kr::Rng rng(7);
    kr::Sample all = buffer.sample(rng, 4 * capacity, 0.4, KR_SAMPLE_STRATIFIED);
    kr::Span<const std::int64_t> all_ids = all.column<std::int64_t>(0);
    for (std::size_t r = 0; r < all.size(); ++r) {
        if (ids[kr_key_insertion(all.keys[r])].load() != all_ids[r]) fail("stored row is not its item");
    }
    // Priorities by key: each sampled item's stored priority, as the sample reported it (no
    // thread runs now).
    std::vector<double> by_key = buffer.priorities(all.keys);
    for (std::size_t r = 0; r < all.size(); ++r) {
        if (by_key[r] != all.priorities[r]) fail("a priority read by key is not the sampled one");
    }
    // Without replacement: every stored item exactly once, each with its own row.
    kr::Sample every = buffer.sample(rng, capacity, 0.4, KR_SAMPLE_WITHOUT_REPLACEMENT);
    std::vector<bool> drawn(capacity, false);
    kr::Span<const std::int64_t> every_ids = every.column<std::int64_t>(0);
    for (std::size_t r = 0; r < every.size(); ++r) {
        std::size_t slot = static_cast<std::size_t>(every.keys[r].index);
        if (slot >= capacity || drawn[slot]) fail("an item twice in a sample without replacement");
        else drawn[slot] = true;
        if (ids[kr_key_insertion(every.keys[r])].load() != every_ids[r]) fail("stored row is not its item");
    }
    try {
        buffer.sample(rng, capacity + 1, 0.4, KR_SAMPLE_WITHOUT_REPLACEMENT);
        fail("a sample without replacement larger than the buffer did not throw");
    } catch (const kr::Error &e) {
        if (e.status() != KR_E_INVALID_ARGUMENT) fail("wrong status for too large a sample without replacement");
    }
    // Delete half the items by key: they go stale, len drops by as many, and a sample of
    // every item left without replacement finds none of them.
    std::size_t half = every.size() / 2;
    std::vector<kr_key> doomed(every.keys.begin(), every.keys.begin() + static_cast<std::ptrdiff_t>(half));
    kr_update_report removed = buffer.remove(doomed);
    if (removed.applied != half || removed.stale != 0) fail("remove did not delete every current key");
    if (buffer.remove(doomed).stale != half) fail("a deleted key is not stale");
    if (buffer.len() != every.size() - half) fail("len does not leave the deleted items out");
    kr::Sample rest = buffer.sample(rng, every.size() - half, 0.4, KR_SAMPLE_WITHOUT_REPLACEMENT);
    for (std::size_t r = 0; r < rest.size(); ++r) {
        for (const kr_key &k : doomed) {
            if (k.index == rest.keys[r].index) fail("a deleted item was sampled");
        }
    }
    // Write back the payload of the items left, in place: their keys and priorities stay,
    // and a sample of all of them reads the new rows.
    std::vector<float> relabelled(rest.size() * PAYLOAD, -0.5f);
    kr_update_report rewritten = buffer.write_back(rest.keys, {{1, relabelled.data()}});
    if (rewritten.applied != rest.size() || rewritten.stale != 0) fail("write_back missed a current key");
    if (buffer.write_back(doomed, {{1, relabelled.data()}}).stale != half) fail("write_back wrote a deleted item");
    kr::Sample again = buffer.sample(rng, rest.size(), 0.4, KR_SAMPLE_WITHOUT_REPLACEMENT);
    kr::Span<const float> again_payload = again.column<float>(1);
    for (std::size_t e = 0; e < again_payload.size(); ++e) {
        if (again_payload[e] != -0.5f) fail("a row was not written back");
    }
    kr_consistency c = buffer.consistency();
    if (!c.exact || !c.extrema_exact) {
        fail(std::string(name) + ": tree not exact at quiescence (max abs error " + std::to_string(c.max_abs_error) +
             ", max rel error " + std::to_string(c.max_rel_error) + ", extrema exact " +
             std::to_string(c.extrema_exact) + ")");
    }
    std::printf("threaded %-10s capacity %6zu: %d actors x %d inserts, %d learners sampled %ld rows "
                "(%ld stale updates, %ld contention retries)\n",
                name, capacity, ACTORS, per_actor, LEARNERS, sampled.load(), stale.load(), contention.load());
}

}  // namespace

int main(int argc, char **argv) {
    double scale = argc > 1 ? std::atof(argv[1]) : 1.0;
    int per_actor = std::max(50, static_cast<int>(20000 * scale));
    int batches = std::max(20, static_cast<int>(2000 * scale));
    // The error model through the wrapper: a wrong size throws before the C call.
    try {
        kr::Buffer b(kr::default_config(), {kr::column<float>("x", 2)});
        std::vector<float> one(3);
        b.insert({one});
        fail("a wrong-size column did not throw");
    } catch (const kr::Error &e) {
        if (e.status() != KR_E_LENGTH_MISMATCH) fail("wrong status for a wrong size");
    }
    // A wrong element type is its own status.
    try {
        kr::Buffer b(kr::default_config(), {kr::column<float>("x", 2)});
        std::vector<double> two(2);
        b.insert({two});
        fail("a wrong-type column did not throw");
    } catch (const kr::Error &e) {
        if (e.status() != KR_E_DTYPE_MISMATCH) fail("wrong status for a wrong type");
    }
    // A column of dimensions: handed back by schema(), kept by a checkpoint and a load.
    {
        kr::Buffer b(kr::default_config(), {kr::column<std::uint8_t>("frame", {2, 3}), kr::column<float>("r", 1)});
        const std::vector<std::size_t> dims{2, 3};
        if (b.schema()[0].shape != 6 || b.schema()[0].dims != dims) fail("the frame's dims");
        std::vector<std::uint8_t> frame{1, 2, 3, 4, 5, 6};
        std::vector<float> r{1.0f};
        b.insert({frame, r});
        auto dir = std::filesystem::temp_directory_path() / ("kr-cpp-dims-" + std::to_string(getpid()));
        std::filesystem::remove_all(dir);
        b.save((dir / "c").string());
        kr::Buffer loaded = kr::Buffer::load((dir / "c").string());
        if (loaded.schema()[0].dims != dims || loaded.schema()[1].dims != std::vector<std::size_t>{1}) {
            fail("a load's dims");
        }
        std::filesystem::remove_all(dir);
    }
    // A policy-version window: an actor thread inserts items of lagging versions while this
    // thread raises the floor; no sample after a raise returns an item below it, inserts
    // below it throw, and at the end every stored item is at or above the floor.
    {
        kr_config config = kr::default_config();
        config.capacity = 256;
        config.version_column = "version";
        kr::Buffer b(config, {kr::column<float>("x", 1), kr::column<std::int64_t>("version", 1)});
        if (b.version_floor() != INT64_MIN) fail("a new buffer's floor");
        std::atomic<std::int64_t> policy{0};
        std::atomic<bool> stop{false};
        std::atomic<int> refused{0};
        std::thread actor([&] {
            std::mt19937 gen(7);
            std::vector<float> x(4, 0.0f);
            for (int i = 0; i < 2000 && !stop.load(); ++i) {
                std::vector<std::int64_t> v(4, policy.load() - static_cast<std::int64_t>(gen() % 4));
                try {
                    b.insert_batch({x, v}, 4);
                } catch (const kr::Error &e) {
                    if (e.status() != KR_E_INVALID_ARGUMENT) fail(std::string("actor: ") + e.what());
                    refused.fetch_add(1);
                }
                std::this_thread::sleep_for(std::chrono::microseconds(20)); // the learner moves meanwhile
            }
        });
        kr::Rng rng(3);
        for (std::int64_t round = 1; round <= 200; ++round) {
            std::this_thread::sleep_for(std::chrono::microseconds(200)); // the actor inserts meanwhile
            policy.store(round);
            b.retire_before(round - 1);
            if (b.version_floor() != round - 1) fail("the floor did not rise");
            try {
                kr::Sample s = b.sample(rng, 8, 0.4, KR_SAMPLE_INDEPENDENT);
                kr::Span<const std::int64_t> versions = s.column<std::int64_t>(1);
                for (std::size_t r = 0; r < s.size(); ++r) {
                    if (versions[r] < round - 1) fail("a sample returned an item below the floor");
                }
            } catch (const kr::Error &e) {
                if (!e.retryable() && e.status() != KR_E_EMPTY) fail(std::string("learner: ") + e.what());
            }
        }
        stop.store(true);
        actor.join();
        if (refused.load() == 0) fail("no insert met the floor");
        if (b.len() > 0) {
            kr::Sample all = b.sample(rng, b.len(), 0.4, KR_SAMPLE_WITHOUT_REPLACEMENT);
            kr::Span<const std::int64_t> versions = all.column<std::int64_t>(1);
            for (std::size_t r = 0; r < all.size(); ++r) {
                if (versions[r] < b.version_floor()) fail("an item below the floor survived");
            }
        }
        kr::Buffer plain(kr::default_config(), {kr::column<float>("x", 1)});
        try {
            plain.retire_before(1);
            fail("retire_before without a version column did not throw");
        } catch (const kr::Error &e) {
            if (e.status() != KR_E_INVALID_ARGUMENT) fail("wrong status for retire_before without versions");
        }
    }
    // Shuffled passes shared by learners: two threads draw 64 batches of 16 in all from 256
    // items, 4 whole passes, so each item is drawn exactly 4 times.
    {
        kr_config config = kr::default_config();
        config.capacity = 256;
        kr::Buffer b(config, {kr::column<std::int64_t>("id", 1)});
        std::vector<std::int64_t> ids(256);
        for (std::int64_t i = 0; i < 256; ++i) ids[static_cast<std::size_t>(i)] = i;
        b.insert_batch({ids}, 256);
        std::vector<int> times(256, 0);
        std::mutex times_lock;
        auto learner = [&](std::uint64_t seed) {
            kr::Rng rng(seed);
            for (int i = 0; i < 32; ++i) {
                kr::Sample s = b.sample(rng, 16, 0.4, KR_SAMPLE_SHUFFLED);
                kr::Span<const std::int64_t> id = s.column<std::int64_t>(0);
                std::lock_guard<std::mutex> hold(times_lock);
                for (std::size_t r = 0; r < s.size(); ++r) times[static_cast<std::size_t>(id[r])] += 1;
            }
        };
        std::thread other(learner, 21);
        learner(22);
        other.join();
        for (int t : times) {
            if (t != 4) fail("a shuffled pass drew an item other than once");
        }
    }
    // A priority queue drained by two learners at once: a max-heap with one draw each hands
    // every item to one learner once, and each learner's batches come largest first.
    {
        kr_config config = kr::default_config();
        config.capacity = 256;
        config.max_times_sampled = 1;
        config.max_heap = 1;
        kr::Buffer b(config, {kr::column<std::int64_t>("id", 1)});
        std::vector<std::int64_t> ids(256);
        std::vector<double> p(256);
        for (std::int64_t i = 0; i < 256; ++i) {
            ids[static_cast<std::size_t>(i)] = i;
            p[static_cast<std::size_t>(i)] = 1.0 + static_cast<double>((i * 37) % 256);
        }
        b.insert_batch({ids}, 256, kr::Span<const double>(p.data(), p.size()));
        std::vector<int> times(256, 0);
        std::mutex times_lock;
        auto learner = [&](std::uint64_t seed) {
            kr::Rng rng(seed);
            for (int i = 0; i < 8; ++i) {
                kr::Sample s = b.sample(rng, 16, 0.4, KR_SAMPLE_MAX_HEAP);
                kr::Span<const std::int64_t> id = s.column<std::int64_t>(0);
                for (std::size_t r = 1; r < s.size(); ++r) {
                    if (p[static_cast<std::size_t>(id[r])] > p[static_cast<std::size_t>(id[r - 1])])
                        fail("a max-heap batch is not largest first");
                }
                std::lock_guard<std::mutex> hold(times_lock);
                for (std::size_t r = 0; r < s.size(); ++r) times[static_cast<std::size_t>(id[r])] += 1;
            }
        };
        std::thread other(learner, 31);
        learner(32);
        other.join();
        for (int t : times) {
            if (t != 1) fail("a max-heap queue handed an item out other than once");
        }
        if (b.len() != 0) fail("the drained max-heap is not empty");
    }
    // Alpha at run time: an actor thread inserts while this thread changes alpha; at the end
    // every stored priority is its raw priority's power under the last alpha.
    {
        kr_config config = kr::default_config();
        config.capacity = 128;
        kr::Buffer b(config, {kr::column<float>("x", 1)});
        std::atomic<bool> stop{false};
        std::thread actor([&] {
            std::vector<float> x(4, 1.0f);
            std::vector<double> p(4);
            for (int i = 0; !stop.load(); ++i) {
                for (int j = 0; j < 4; ++j) p[static_cast<std::size_t>(j)] = 0.5 + (i + j) % 9;
                b.insert_batch({x}, 4, kr::Span<const double>(p.data(), p.size()));
                std::this_thread::sleep_for(std::chrono::microseconds(20));
            }
        });
        const double alphas[4] = {0.3, 1.0, 0.75, 0.5};
        for (int round = 0; round < 40; ++round) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            b.set_alpha(alphas[round % 4]);
        }
        stop.store(true);
        actor.join();
        if (b.alpha() != 0.5) fail("alpha is not the last one set");
        kr::Rng rng(5);
        kr::Sample s = b.sample(rng, 64, 0.4, KR_SAMPLE_SHUFFLED);
        std::vector<kr_key> keys = s.keys;
        std::vector<double> raw = b.raw_priorities(keys);
        std::vector<double> stored = b.priorities(keys);
        for (std::size_t i = 0; i < keys.size(); ++i) {
            if (stored[i] != std::pow(raw[i], 0.5)) fail("a stored priority is not its raw priority's power");
        }
        try {
            b.set_alpha(std::nan(""));
            fail("a NaN alpha did not throw");
        } catch (const kr::Error &e) {
            if (e.status() != KR_E_INVALID_ARGUMENT) fail("wrong status for a NaN alpha");
        }
    }
    // Values before pointers: a batch of 0 (whose owned columns are empty, NULL) is an
    // invalid argument, not a NULL destination.
    {
        kr::Buffer b(kr::default_config(), {kr::column<float>("x", 2)});
        std::vector<float> two{1.0f, 2.0f};
        b.insert({two});
        kr::Rng rng(1);
        try {
            (void)b.sample(rng, 0, 0.4);
            fail("a batch of 0 did not throw");
        } catch (const kr::Error &e) {
            if (e.status() != KR_E_INVALID_ARGUMENT || e.retryable()) {
                fail(std::string("wrong error for a batch of 0: ") + e.what());
            }
        }
        // retry(): a retryable error is tried again, up to the limit; others propagate.
        int calls = 0;
        int got = kr::retry([&] {
            if (++calls < 3) throw kr::Error(KR_E_CONTENTION, "busy");
            return 7;
        });
        if (got != 7 || calls != 3) fail("retry did not retry a contention");
        calls = 0;
        try {
            kr::retry([&] { ++calls; throw kr::Error(KR_E_EMPTY, "empty"); }, 5);
        } catch (const kr::Error &e) {
            if (e.status() != KR_E_EMPTY || calls != 1) fail("retry retried a final error");
        }
        calls = 0;
        try {
            kr::retry([&] { ++calls; throw kr::Error(KR_E_CONTENTION, "busy"); }, 4);
        } catch (const kr::Error &e) {
            if (calls != 4) fail("retry did not stop at its limit");
        }
    }
    // A moved-from Buffer or Writer reports its NULL handle first (KR_E_NULL, as len() and
    // flush() do), not the columns it no longer knows the schema of.
    {
        kr::Buffer b(kr::default_config(), {kr::column<float>("x", 2)});
        kr::Writer w(b, 4);
        kr::Buffer moved_b(std::move(b));
        kr::Writer moved_w(std::move(w));
        std::vector<float> two{1.0f, 2.0f};
        std::vector<float> out_x(2);
        kr::Rng rng(1);
        kr::SampleOut out{{}, {}, {}, {}, {}, {kr::ColumnOut(out_x)}};
        auto expect_null = [](const char *what, auto &&call) {
            try {
                call();
                fail(std::string(what) + " on a moved-from object did not throw");
            } catch (const kr::Error &e) {
                if (e.status() != KR_E_NULL) fail(std::string(what) + ": wrong error " + e.what());
            }
        };
        expect_null("insert", [&] { b.insert({two}); });
        expect_null("insert_batch", [&] { b.insert_batch({two}, 1); });
        expect_null("sample_into", [&] { b.sample_into(rng, 1, 0.4, KR_SAMPLE_STRATIFIED, out); });
        expect_null("sample", [&] { (void)b.sample(rng, 1, 0.4); });
        expect_null("len", [&] { (void)b.len(); });
        expect_null("push", [&] { w.push({two}); });
        expect_null("flush", [&] { w.flush(); });
        // The objects moved into still work.
        moved_w.push({two});
        if (moved_w.flush() != 1 || moved_b.len() != 1) fail("a moved-to Writer or Buffer does not work");
    }
    // Checkpoints through the wrapper: save, load into another variant, verify, latest, the
    // caller's counters; a missing checkpoint and an existing target throw KR_E_IO.
    {
        kr_config config = kr::default_config();
        config.capacity = 16;
        kr::Buffer b(config, {kr::column<float>("x", 2), kr::column<std::int64_t>("id", 1)});
        for (std::int64_t i = 0; i < 20; ++i) {
            std::vector<float> x{float(i), -float(i)};
            std::vector<std::int64_t> id{i};
            b.insert({x, id}, 1.0 + double(i % 4));
        }
        const std::filesystem::path parent =
            std::filesystem::temp_directory_path() / ("kr-cpp-ckpt-" + std::to_string(::getpid()));
        std::filesystem::remove_all(parent);
        const std::string dir = (parent / "ckpt-000000000020").string();
        b.save(dir, 2, {{"env_steps", 20}});
        kr::Buffer l = kr::Buffer::load(dir, KR_VARIANT_LOCK_FREE);
        if (l.len() != b.len() || l.inserted() != b.inserted() || l.total_priority() != b.total_priority())
            fail("a loaded buffer differs");
        for (std::size_t i = 0; i < 16; ++i) {
            if (l.priority(i) != b.priority(i) || l.key(i)->generation != b.key(i)->generation)
                fail("a loaded slot differs");
        }
        if (l.schema().size() != 2 || l.schema()[1].name != "id" || l.schema()[1].dtype != KR_DTYPE_I64)
            fail("a loaded schema differs");
        if (kr::verify(dir).len != 16) fail("verify");
        auto latest = kr::latest_checkpoint(parent.string());
        if (!latest || *latest != dir) fail("latest_checkpoint");
        if (kr::checkpoint_user_u64(dir, "env_steps") != std::optional<std::uint64_t>(20)) fail("user counter");
        try {
            (void)kr::Buffer::load((parent / "nothing").string());
            fail("loading nothing did not throw");
        } catch (const kr::Error &e) {
            if (e.status() != KR_E_IO) fail(std::string("wrong error for a missing checkpoint: ") + e.what());
        }
        try {
            b.save(dir);
            fail("saving onto a checkpoint did not throw");
        } catch (const kr::Error &e) {
            if (e.status() != KR_E_IO) fail(std::string("wrong error for an existing target: ") + e.what());
        }
        std::filesystem::remove_all(parent);
    }
    try {
        kr_config bad = kr::default_config();
        bad.fanout = 5;
        kr::Buffer b(bad, {kr::column<float>("x", 2)});
        fail("fanout 5 did not throw");
    } catch (const kr::Error &e) {
        if (e.status() != KR_E_INVALID_ARGUMENT || std::string(e.what()).find("fanout") == std::string::npos) {
            fail(std::string("wrong error for fanout 5: ") + e.what());
        }
    }
    for (auto [variant, name] : {std::pair{KR_VARIANT_GLOBAL_LOCK, "GlobalLock"},
                                 std::pair{KR_VARIANT_SPLIT_LOCK, "SplitLock"},
                                 std::pair{KR_VARIANT_LOCK_FREE, "LockFree"}}) {
        // No eviction (everything kept), then heavy eviction (capacity 61).
        run(variant, name, static_cast<std::size_t>(ACTORS) * per_actor, per_actor, batches);
        run(variant, name, 61, per_actor, batches);
    }
    if (failures.load() != 0) {
        std::fprintf(stderr, "threaded: %d failures\n", failures.load());
        return 1;
    }
    std::printf("threaded: ok\n");
    return 0;
}
