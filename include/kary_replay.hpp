// kary_replay.hpp: a header-only C++17 wrapper of kary_replay.h (the C ABI of kary-replay),
// for LibTorch and other C++ users.
//
// - RAII: Buffer and Rng own their handles; they move and do not copy.
// - Errors: a failing call throws kary_replay::Error (a std::runtime_error) carrying the
//   kr_status and the library's message. The wrapper checks what only it knows (the sizes of
//   the spans it is given, the column types) before calling the C ABI, and throws
//   KR_E_LENGTH_MISMATCH (sizes) or KR_E_DTYPE_MISMATCH (element types) when they do not fit
//   the schema; nothing is changed then. Arguments are checked in the C ABI's order: the
//   handle, then sizes and values, then pointers. Error::retryable() is true for
//   KR_E_CONTENTION, KR_E_RATE_LIMITED and KR_E_TIMEOUT; retry(f) calls f again while it
//   throws such an error.
// - Rate limits: a Buffer made with kr_config.rate_limit holds the ratio of samples to
//   inserts; insert, insert_batch, sample and sample_into take a Wait (forever by default),
//   close() wakes every waiter with KR_E_CLOSED, rate_stats() reads the counts.
// - Inputs are spans (a pointer and an element count); C++17 has no std::span, so Span is a
//   minimal one that converts from std::vector, std::array and C arrays. ColumnView and
//   ColumnOut name a column's memory with its element type, so a torch::Tensor's data_ptr()
//   can be passed directly (sample straight into a tensor).
// - Threads: as in the C header. One Buffer may be used by any number of threads at once
//   (share it by reference or pointer); an Rng belongs to one thread at a time.
#ifndef KARY_REPLAY_HPP
#define KARY_REPLAY_HPP

#include "kary_replay.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace kary_replay {

// A failed call: the C ABI's status and its message.
class Error : public std::runtime_error {
public:
    Error(kr_status status, const std::string &message)
        : std::runtime_error(message), status_(status) {}
    kr_status status() const noexcept { return status_; }
    // Whether the same call may succeed when made again (KR_E_CONTENTION, KR_E_RATE_LIMITED,
    // KR_E_TIMEOUT).
    bool retryable() const noexcept { return kr_status_is_retryable(status_); }

private:
    kr_status status_;
};

namespace detail {

inline std::string last_error_message() {
    std::size_t len = 0;
    kr_last_error_message(nullptr, 0, &len);
    std::string message(len + 1, '\0');
    kr_last_error_message(message.data(), message.size(), &len);
    message.resize(len);
    return message;
}

inline void check(kr_status status) {
    if (status != KR_OK) {
        throw Error(status, std::string(kr_status_str(status)) + ": " + last_error_message());
    }
}

[[noreturn]] inline void mismatch(const std::string &message) {
    throw Error(KR_E_LENGTH_MISMATCH, std::string(kr_status_str(KR_E_LENGTH_MISMATCH)) + ": " + message);
}

[[noreturn]] inline void dtype_mismatch(const std::string &message) {
    throw Error(KR_E_DTYPE_MISMATCH, std::string(kr_status_str(KR_E_DTYPE_MISMATCH)) + ": " + message);
}

// The handle first, as the C ABI checks it: a moved-from object's methods throw KR_E_NULL
// with the C ABI's message, whatever else is wrong with the call.
inline void require(const void *handle, const char *what) {
    if (handle == nullptr) {
        throw Error(KR_E_NULL, std::string(kr_status_str(KR_E_NULL)) + ": " + what + " is NULL");
    }
}

template <class T> struct dtype_of;
template <> struct dtype_of<std::uint8_t> { static constexpr std::uint32_t value = KR_DTYPE_U8; };
template <> struct dtype_of<std::int32_t> { static constexpr std::uint32_t value = KR_DTYPE_I32; };
template <> struct dtype_of<std::int64_t> { static constexpr std::uint32_t value = KR_DTYPE_I64; };
template <> struct dtype_of<float> { static constexpr std::uint32_t value = KR_DTYPE_F32; };
template <> struct dtype_of<double> { static constexpr std::uint32_t value = KR_DTYPE_F64; };
template <> struct dtype_of<bool> { static constexpr std::uint32_t value = KR_DTYPE_BOOL; };

template <class T, class = void> struct is_dtype : std::false_type {};
template <class T> struct is_dtype<T, std::void_t<decltype(dtype_of<T>::value)>> : std::true_type {};

template <class C>
using element_of = std::remove_pointer_t<decltype(std::declval<C &>().data())>;

inline std::size_t dtype_size(std::uint32_t dtype) {
    switch (dtype) {
    case KR_DTYPE_I32:
    case KR_DTYPE_F32: return 4;
    case KR_DTYPE_I64:
    case KR_DTYPE_F64: return 8;
    default: return 1;
    }
}

inline const char *dtype_name(std::uint32_t dtype) {
    switch (dtype) {
    case KR_DTYPE_U8: return "uint8";
    case KR_DTYPE_I32: return "int32";
    case KR_DTYPE_I64: return "int64";
    case KR_DTYPE_F32: return "float32";
    case KR_DTYPE_F64: return "float64";
    case KR_DTYPE_BOOL: return "bool";
    default: return "unknown";
    }
}

// A save's kr_save_options (keep the newest `keep_last`; the caller's counters) and the
// arrays its pointers point into, alive as long as this object.
struct SaveOptions {
    std::vector<const char *> keys;
    std::vector<std::uint64_t> values;
    kr_save_options options;

    SaveOptions(std::size_t keep_last, const std::vector<std::pair<std::string, std::uint64_t>> &user)
        : options(kr_save_options_default()) {
        for (const auto &kv : user) {
            keys.push_back(kv.first.c_str());
            values.push_back(kv.second);
        }
        options.keep_last = keep_last;
        options.n_user = user.size();
        options.user_keys = keys.empty() ? nullptr : keys.data();
        options.user_values = values.empty() ? nullptr : values.data();
    }
    SaveOptions(const SaveOptions &) = delete;
    SaveOptions &operator=(const SaveOptions &) = delete;
};

}  // namespace detail

// The element type code of T (KR_DTYPE_*), for the types a column can hold.
template <class T> constexpr std::uint32_t dtype_of = detail::dtype_of<T>::value;

// A pointer and an element count (std::span's C++17 stand-in).
template <class T> class Span {
public:
    constexpr Span() noexcept = default;
    constexpr Span(T *data, std::size_t size) noexcept : data_(data), size_(size) {}
    template <std::size_t N> constexpr Span(T (&array)[N]) noexcept : data_(array), size_(N) {}
    template <class C, class = std::enable_if_t<std::is_convertible_v<detail::element_of<C> (*)[], T (*)[]>>>
    constexpr Span(C &container) noexcept : data_(container.data()), size_(container.size()) {}
    template <class C, class = std::enable_if_t<std::is_convertible_v<detail::element_of<const C> (*)[], T (*)[]>>>
    constexpr Span(const C &container) noexcept : data_(container.data()), size_(container.size()) {}

    constexpr T *data() const noexcept { return data_; }
    constexpr std::size_t size() const noexcept { return size_; }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr T &operator[](std::size_t i) const noexcept { return data_[i]; }
    constexpr T *begin() const noexcept { return data_; }
    constexpr T *end() const noexcept { return data_ + size_; }

private:
    T *data_ = nullptr;
    std::size_t size_ = 0;
};

// One column of the schema: a name, an element type (KR_DTYPE_*), elements per item.
struct Column {
    std::string name;
    std::uint32_t dtype;
    // Elements per item: the product of dims.
    std::size_t shape;
    // The per-item dimensions ({84, 84} for a frame; {} for a scalar column); empty when
    // the column is made from a width alone (one dimension of `shape`).
    std::vector<std::size_t> dims = {};
};

// A column of element type T: column<float>("obs", 4), or of several dimensions:
// column<std::uint8_t>("frame", {84, 84}).
template <class T> Column column(std::string name, std::size_t shape) {
    return Column{std::move(name), dtype_of<T>, shape};
}
template <class T> Column column(std::string name, std::initializer_list<std::size_t> dims) {
    std::size_t shape = 1;
    for (std::size_t d : dims) shape *= d;
    return Column{std::move(name), dtype_of<T>, shape, std::vector<std::size_t>(dims)};
}

// Read-only column data for insert / insert_batch: item-major, `elements` elements.
struct ColumnView {
    const void *data;
    std::uint32_t dtype;
    std::size_t elements;

    // Raw memory (a tensor's data_ptr(), say) of `elements` elements of type `dtype`.
    ColumnView(const void *data, std::uint32_t dtype, std::size_t elements) noexcept
        : data(data), dtype(dtype), elements(elements) {}
    template <class T, class = std::enable_if_t<detail::is_dtype<T>::value>>
    ColumnView(Span<const T> s) noexcept : data(s.data()), dtype(dtype_of<T>), elements(s.size()) {}
    template <class T, std::size_t N, class = std::enable_if_t<detail::is_dtype<T>::value>>
    ColumnView(const T (&array)[N]) noexcept : data(array), dtype(dtype_of<T>), elements(N) {}
    template <class C, class T = std::remove_const_t<detail::element_of<const C>>,
              class = std::enable_if_t<detail::is_dtype<T>::value>>
    ColumnView(const C &container) noexcept
        : data(container.data()), dtype(dtype_of<T>), elements(container.size()) {}
};

// Writable column memory for sample_into: room for `elements` elements of type `dtype`.
struct ColumnOut {
    void *data;
    std::uint32_t dtype;
    std::size_t elements;

    ColumnOut(void *data, std::uint32_t dtype, std::size_t elements) noexcept
        : data(data), dtype(dtype), elements(elements) {}
    template <class T, class = std::enable_if_t<detail::is_dtype<T>::value>>
    ColumnOut(Span<T> s) noexcept : data(s.data()), dtype(dtype_of<T>), elements(s.size()) {}
    template <class T, std::size_t N, class = std::enable_if_t<detail::is_dtype<T>::value>>
    ColumnOut(T (&array)[N]) noexcept : data(array), dtype(dtype_of<T>), elements(N) {}
    template <class C, class T = detail::element_of<C>,
              class = std::enable_if_t<detail::is_dtype<T>::value && !std::is_const_v<T>>>
    ColumnOut(C &container) noexcept
        : data(container.data()), dtype(dtype_of<T>), elements(container.size()) {}
};

// Where sample_into writes a batch of B: each span is empty (skipped) or holds at least B
// values; `columns` is empty (skipped) or has one entry per schema column with room for
// B x shape elements, into which the sampled rows are copied once, straight from the
// buffer (a tensor's data_ptr(), say). `weights_f32` and `indices_i64` are the weights and
// indices in LibTorch's usual dtypes (float32, int64), so that no cast kernel is needed.
struct SampleOut {
    Span<kr_key> keys;
    Span<std::uint64_t> indices;
    Span<double> weights;
    Span<double> probabilities;
    Span<double> priorities;
    std::vector<ColumnOut> columns;
    // Defaulted (empty) so that the six-member aggregate initialization of earlier
    // versions compiles unchanged, without a missing-initializer warning.
    Span<float> weights_f32 = {};
    Span<std::int64_t> indices_i64 = {};
};

// A sampled batch that owns its memory (Buffer::sample).
struct Sample {
    std::vector<kr_key> keys;
    std::vector<std::uint64_t> indices;
    std::vector<double> weights;
    std::vector<double> probabilities;
    std::vector<double> priorities;
    // Column i's bytes, B x shape elements of its dtype.
    std::vector<std::vector<unsigned char>> column_bytes;
    std::vector<std::uint32_t> column_dtypes;

    std::size_t size() const noexcept { return keys.size(); }

    // Column i as elements of T; throws KR_E_DTYPE_MISMATCH if T is not its type.
    template <class T> Span<const T> column(std::size_t i) const {
        if (i >= column_bytes.size()) {
            throw Error(KR_E_OUT_OF_RANGE, "column " + std::to_string(i) + " does not exist");
        }
        if (column_dtypes[i] != dtype_of<T>) {
            detail::dtype_mismatch(std::string("column ") + std::to_string(i) + " holds " +
                             detail::dtype_name(column_dtypes[i]) + ", not " +
                             detail::dtype_name(dtype_of<T>));
        }
        return Span<const T>(reinterpret_cast<const T *>(column_bytes[i].data()),
                             column_bytes[i].size() / sizeof(T));
    }
};

// A random number generator for sampling; each sampling thread owns one.
class Rng {
public:
    explicit Rng(std::uint64_t seed) { detail::check(kr_rng_new(seed, &handle_)); }
    ~Rng() { kr_rng_free(handle_); }
    Rng(Rng &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Rng &operator=(Rng &&other) noexcept {
        std::swap(handle_, other.handle_);
        return *this;
    }
    Rng(const Rng &) = delete;
    Rng &operator=(const Rng &) = delete;

    kr_rng *get() const noexcept { return handle_; }

private:
    kr_rng *handle_ = nullptr;
};

// The default configuration (kr_config_default()): capacity 2^20, fanout 8, SplitLock.
inline kr_config default_config() noexcept { return kr_config_default(); }

// A replay buffer. Every method but the destructor and the assignments may be called by
// any number of threads at once.
// How long a call waits for the buffer's rate limiter (kr_config.rate_limit): as long as
// it takes (the default), not at all (throws KR_E_RATE_LIMITED when the call does not fit
// now), or at most a duration (throws KR_E_TIMEOUT). Either error is retryable() and leaves
// nothing inserted or sampled. A buffer without a rate limit never waits.
struct Wait {
    double seconds = KR_WAIT_FOREVER;
    static Wait forever() { return Wait{}; }
    static Wait never() { return Wait{0.0}; }
    template <class Rep, class Period> static Wait at_most(std::chrono::duration<Rep, Period> timeout) {
        return Wait{std::max(0.0, std::chrono::duration<double>(timeout).count())};
    }
};

class Buffer {
public:
    Buffer(const kr_config &config, std::vector<Column> schema) : schema_(std::move(schema)) {
        std::vector<kr_column> columns = raw_columns(schema_);
        detail::check(kr_buffer_new(&config, columns.data(), columns.size(), &handle_));
    }
    ~Buffer() { kr_buffer_free(handle_); }
    Buffer(Buffer &&other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), schema_(std::move(other.schema_)) {}
    Buffer &operator=(Buffer &&other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(schema_, other.schema_);
        return *this;
    }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;

    kr_buffer *get() const noexcept { return handle_; }
    const std::vector<Column> &schema() const noexcept { return schema_; }

    // Insert one item (one view per column, `shape` elements each) with a raw priority, or
    // the default priority when none is given. Returns the item's key.
    kr_key insert(Span<const ColumnView> columns, std::optional<double> priority = std::nullopt,
                  Wait wait = Wait::forever()) const {
        detail::require(handle_, "buffer");
        std::vector<const void *> pointers = inputs(schema_, columns, 1);
        kr_key key{};
        detail::check(kr_buffer_insert_batch_wait(handle_, pointers.data(), pointers.size(), 1,
                                                  priority ? &*priority : nullptr, wait.seconds, &key));
        return key;
    }
    kr_key insert(std::initializer_list<ColumnView> columns, std::optional<double> priority = std::nullopt,
                  Wait wait = Wait::forever()) const {
        return insert(Span<const ColumnView>(columns.begin(), columns.size()), priority, wait);
    }

    // Insert `items` items: one view per column of items x shape elements, item-major, and
    // no priorities (default priorities) or `items` raw priorities. Returns their keys.
    std::vector<kr_key> insert_batch(Span<const ColumnView> columns, std::size_t items,
                                     std::optional<Span<const double>> priorities = std::nullopt,
                                     Wait wait = Wait::forever()) const {
        detail::require(handle_, "buffer");
        std::vector<const void *> pointers = inputs(schema_, columns, items);
        // The check reads the span only when one was given (an optional's empty payload
        // is uninitialized, and a combined test would read it).
        const double *given = nullptr;
        if (priorities.has_value()) {
            if (priorities->size() != items) {
                detail::mismatch(std::to_string(priorities->size()) + " priorities for " +
                                 std::to_string(items) + " items");
            }
            given = priorities->data();
        }
        std::vector<kr_key> keys(items);
        detail::check(kr_buffer_insert_batch_wait(handle_, pointers.data(), pointers.size(), items, given,
                                                  wait.seconds, keys.data()));
        return keys;
    }
    std::vector<kr_key> insert_batch(std::initializer_list<ColumnView> columns, std::size_t items,
                                     std::optional<Span<const double>> priorities = std::nullopt,
                                     Wait wait = Wait::forever()) const {
        return insert_batch(Span<const ColumnView>(columns.begin(), columns.size()), items, priorities, wait);
    }

    // Sample `batch` items into caller memory (tensors, say): see SampleOut.
    void sample_into(Rng &rng, std::size_t batch, double beta, std::uint32_t mode, const SampleOut &out,
                     Wait wait = Wait::forever()) const {
        detail::require(handle_, "buffer");
        std::vector<void *> destinations;
        kr_sample_out raw = raw_out(out, batch, destinations);
        detail::check(kr_buffer_sample_wait(handle_, rng.get(), batch, beta, mode, wait.seconds, &raw));
    }

    // Sample `batch` items into a Sample that owns its memory.
    Sample sample(Rng &rng, std::size_t batch, double beta, std::uint32_t mode = KR_SAMPLE_STRATIFIED,
                  Wait wait = Wait::forever()) const {
        detail::require(handle_, "buffer");
        Sample s;
        sample_into(rng, batch, beta, mode, owned(s, batch), wait);
        return s;
    }

    // Close the rate limiter: every waiting and later insert and sample throws KR_E_CLOSED
    // (see kr_buffer_close); without a rate limit nothing happens.
    void close() const { detail::check(kr_buffer_close(handle_)); }
    // The rate limiter's counts and state (`limited` false without one).
    kr_rate_stats rate_stats() const { return get_value<kr_rate_stats>(kr_buffer_rate_stats); }

    // Total, length, capacity, inserts, smallest positive priority (0: none) and running
    // maximum, each read once: what a Coordinator plans with (see kr_buffer_stats).
    kr_stats stats() const { return get_value<kr_stats>(kr_buffer_stats); }

    // A shard's part of a Coordinator's plan: one item at each of `fractions` (each in
    // [0, 1)) of this buffer's own total, written as sample_into writes (weights 1,
    // probabilities within this buffer). Returns the stats the descent read: their `total`
    // is the reply's (see kr_buffer_sample_at).
    kr_stats sample_at_into(Rng &rng, Span<const double> fractions, const SampleOut &out) const {
        detail::require(handle_, "buffer");
        std::vector<void *> destinations;
        kr_sample_out raw = raw_out(out, fractions.size(), destinations);
        kr_stats stats{};
        detail::check(kr_buffer_sample_at(handle_, rng.get(), fractions.data(), fractions.size(), &raw, &stats));
        return stats;
    }

    // sample_at_into, into a Sample that owns its memory; `stats` gets the descent's stats.
    Sample sample_at(Rng &rng, Span<const double> fractions, kr_stats &stats) const {
        detail::require(handle_, "buffer");
        Sample s;
        stats = sample_at_into(rng, fractions, owned(s, fractions.size()));
        return s;
    }

    // Set raw priorities by key; stale keys are dropped and counted.
    kr_update_report update_priorities(Span<const kr_key> keys, Span<const double> priorities) const {
        detail::require(handle_, "buffer");
        if (keys.size() != priorities.size()) {
            detail::mismatch(std::to_string(priorities.size()) + " priorities for " +
                             std::to_string(keys.size()) + " keys");
        }
        kr_update_report report{};
        detail::check(kr_buffer_update_priorities(handle_, keys.data(), priorities.data(), keys.size(), &report));
        return report;
    }

    // Delete the items `keys` name (kr_buffer_delete): their keys go stale, no sample
    // returns them, len() stops counting them. Stale keys are counted; a key the buffer
    // never made throws and deletes nothing. (`delete` is a C++ keyword: hence `remove`.)
    kr_update_report remove(Span<const kr_key> keys) const {
        detail::require(handle_, "buffer");
        kr_update_report report{};
        detail::check(kr_buffer_delete(handle_, keys.data(), keys.size(), &report));
        return report;
    }

    // Retire every item whose policy version (kr_config.version_column) is below `version`
    // and raise the buffer's floor to it (kr_buffer_retire_before): returns the items this
    // call retired. A buffer whose items carry no version throws.
    std::uint64_t retire_before(std::int64_t version) const {
        detail::require(handle_, "buffer");
        std::uint64_t retired = 0;
        detail::check(kr_buffer_retire_before(handle_, version, &retired));
        return retired;
    }

    // The policy-version floor (INT64_MIN until the first retire_before); throws when the
    // items carry no version.
    std::int64_t version_floor() const { return get_value<std::int64_t>(kr_buffer_version_floor); }

    // One column of a write back: its position in the schema, and keys.size() x shape
    // elements of its dtype, item-major.
    struct Rewrite {
        std::size_t column;
        const void *data;
    };

    // Overwrite some columns of the items `keys` name, in place (kr_buffer_write_back): keys
    // and priorities unchanged, no sample sees half a row; stale keys are counted and
    // skipped. A foreign key or a column that does not match throws and writes nothing.
    kr_update_report write_back(Span<const kr_key> keys, const std::vector<Rewrite> &columns) const {
        detail::require(handle_, "buffer");
        std::vector<std::size_t> positions;
        std::vector<const void *> data;
        for (const Rewrite &r : columns) {
            positions.push_back(r.column);
            data.push_back(r.data);
        }
        kr_update_report report{};
        detail::check(kr_buffer_write_back(handle_, keys.data(), keys.size(), positions.data(), data.data(),
                                           columns.size(), &report));
        return report;
    }

    // The stored (alpha-exponentiated) priorities of the items `keys` name: NaN for a key
    // whose item was overwritten since. A key the buffer never made throws.
    std::vector<double> priorities(Span<const kr_key> keys) const {
        detail::require(handle_, "buffer");
        std::vector<double> out(keys.size());
        detail::check(kr_buffer_priorities(handle_, keys.data(), keys.size(), out.data(), nullptr));
        return out;
    }

    // The raw priorities (before the exponent) of the items `keys` name
    // (kr_buffer_raw_priorities): NaN for a key whose item was overwritten since.
    std::vector<double> raw_priorities(Span<const kr_key> keys) const {
        detail::require(handle_, "buffer");
        std::vector<double> out(keys.size());
        detail::check(kr_buffer_raw_priorities(handle_, keys.data(), keys.size(), out.data(), nullptr));
        return out;
    }

    // Change the priority exponent at run time (kr_buffer_set_alpha): every stored priority
    // becomes its raw priority raised to `alpha`, exactly. A bad alpha throws and changes
    // nothing.
    void set_alpha(double alpha) const {
        detail::require(handle_, "buffer");
        detail::check(kr_buffer_set_alpha(handle_, alpha));
    }

    // The priority exponent now (kr_config.alpha until a set_alpha).
    double alpha() const { return get_value<double>(kr_buffer_alpha); }

    // The stored (alpha-exponentiated) priority of slot `index`.
    double priority(std::size_t index) const {
        double p = 0;
        detail::check(kr_buffer_priority(handle_, index, &p));
        return p;
    }

    // The key of the item in slot `index`, if the slot holds one.
    std::optional<kr_key> key(std::size_t index) const {
        kr_key k{};
        bool present = false;
        detail::check(kr_buffer_key(handle_, index, &k, &present));
        return present ? std::optional<kr_key>(k) : std::nullopt;
    }

    std::size_t len() const { return get_value<std::size_t>(kr_buffer_len); }
    std::size_t capacity() const { return get_value<std::size_t>(kr_buffer_capacity); }
    double total_priority() const { return get_value<double>(kr_buffer_total_priority); }
    std::uint64_t inserted() const { return get_value<std::uint64_t>(kr_buffer_inserted); }
    std::size_t memory_bytes() const { return get_value<std::size_t>(kr_buffer_memory_bytes); }
    kr_consistency consistency() const { return get_value<kr_consistency>(kr_buffer_consistency); }
    // The configuration the buffer was made with.
    kr_config config() const { return get_value<kr_config>(kr_buffer_config); }

    // Save a checkpoint in the new directory `dir` (see kr_buffer_save): keep only the newest
    // `keep_last` numbered checkpoints beside it (0: all), with the caller's counters.
    void save(const std::string &dir, std::size_t keep_last = 0,
              const std::vector<std::pair<std::string, std::uint64_t>> &user = {}) const {
        detail::require(handle_, "buffer");
        detail::SaveOptions options(keep_last, user);
        detail::check(kr_buffer_save(handle_, dir.c_str(), &options.options));
    }

    // Load the checkpoint at `dir` into a new buffer of `variant` (any variant saved it).
    static Buffer load(const std::string &dir, std::uint32_t variant = KR_VARIANT_SPLIT_LOCK) {
        kr_buffer *handle = nullptr;
        detail::check(kr_buffer_load(dir.c_str(), variant, &handle));
        return Buffer(handle);
    }

    // Remove every item (old keys stay stale; see kr_buffer_clear); any thread, any time.
    void clear() const { detail::check(kr_buffer_clear(handle_)); }
    // Recompute the tree's sums from the priorities (a repair; see kr_buffer_rebuild).
    void rebuild() const { detail::check(kr_buffer_rebuild(handle_)); }

protected:
    // Adopt a handle (from kr_buffer_load or kr_shm_attach), reading its schema from it.
    explicit Buffer(kr_buffer *handle) : handle_(handle) {
        try {
            std::size_t n = get_value<std::size_t>(kr_buffer_n_columns);
            for (std::size_t i = 0; i < n; ++i) {
                kr_column c{};
                detail::check(kr_buffer_column(handle_, i, &c));
                schema_.push_back(Column{c.name, c.dtype, c.shape, std::vector<std::size_t>(c.dims, c.dims + c.ndim)});
            }
        } catch (...) {
            kr_buffer_free(handle_);
            throw;
        }
    }

    // Adopt a handle made for `schema` (from kr_shm_create).
    Buffer(kr_buffer *handle, std::vector<Column> schema) : handle_(handle), schema_(std::move(schema)) {}

    // `schema` as the C columns (pointing into `schema`).
    static std::vector<kr_column> raw_columns(const std::vector<Column> &schema) {
        std::vector<kr_column> columns;
        columns.reserve(schema.size());
        for (const Column &c : schema) {
            columns.push_back(kr_column{c.name.c_str(), c.dtype, c.shape, c.dims.size(), c.dims.data()});
        }
        return columns;
    }

    template <class T> T get_value(kr_status (*getter)(const kr_buffer *, T *)) const {
        T value{};
        detail::check(getter(handle_, &value));
        return value;
    }

private:
    // Shared with Writer (which keeps its own copy of the schema).
    static void check_column(const std::vector<Column> &schema, std::size_t i, std::uint32_t dtype,
                             std::size_t elements, std::size_t items, bool at_least) {
        const Column &c = schema[i];
        if (dtype != c.dtype) {
            detail::dtype_mismatch("column '" + c.name + "' holds " + detail::dtype_name(c.dtype) + ", given " +
                             detail::dtype_name(dtype));
        }
        if (c.shape != 0 && items > SIZE_MAX / c.shape) {
            detail::mismatch("column '" + c.name + "': items x shape overflows");
        }
        std::size_t want = items * c.shape;
        if (at_least ? elements < want : elements != want) {
            detail::mismatch("column '" + c.name + "' needs " + std::to_string(want) + " elements (" +
                             std::to_string(items) + " x " + std::to_string(c.shape) + "), given " +
                             std::to_string(elements));
        }
    }

    static std::vector<const void *> inputs(const std::vector<Column> &schema, Span<const ColumnView> columns,
                                            std::size_t items) {
        if (columns.size() != schema.size()) {
            detail::mismatch(std::to_string(columns.size()) + " columns given, the schema has " +
                             std::to_string(schema.size()));
        }
        std::vector<const void *> pointers;
        pointers.reserve(columns.size());
        for (std::size_t i = 0; i < columns.size(); ++i) {
            check_column(schema, i, columns[i].dtype, columns[i].elements, items, false);
            pointers.push_back(columns[i].data);
        }
        return pointers;
    }

    // `out` as the C outputs for a batch of `batch`, checked against the schema; the column
    // pointers live in `destinations`.
    kr_sample_out raw_out(const SampleOut &out, std::size_t batch, std::vector<void *> &destinations) const {
        check_room(out.keys.size(), batch, "keys");
        check_room(out.indices.size(), batch, "indices");
        check_room(out.weights.size(), batch, "weights");
        check_room(out.probabilities.size(), batch, "probabilities");
        check_room(out.priorities.size(), batch, "priorities");
        check_room(out.weights_f32.size(), batch, "weights_f32");
        check_room(out.indices_i64.size(), batch, "indices_i64");
        if (!out.columns.empty()) {
            if (out.columns.size() != schema_.size()) {
                detail::mismatch(std::to_string(out.columns.size()) + " column outputs for " +
                                 std::to_string(schema_.size()) + " columns");
            }
            for (std::size_t i = 0; i < schema_.size(); ++i) {
                const ColumnOut &c = out.columns[i];
                check_column(schema_, i, c.dtype, c.elements, batch, true);
                destinations.push_back(c.data);
            }
        }
        kr_sample_out raw{};
        raw.keys = out.keys.data();
        raw.indices = out.indices.data();
        raw.weights = out.weights.data();
        raw.probabilities = out.probabilities.data();
        raw.priorities = out.priorities.data();
        raw.columns = destinations.empty() ? nullptr : destinations.data();
        raw.weights_f32 = out.weights_f32.data();
        raw.indices_i64 = out.indices_i64.data();
        return raw;
    }

    // Room in `s` for `batch` items of every output, and the SampleOut that writes there.
    SampleOut owned(Sample &s, std::size_t batch) const {
        s.keys.resize(batch);
        s.indices.resize(batch);
        s.weights.resize(batch);
        s.probabilities.resize(batch);
        s.priorities.resize(batch);
        SampleOut out{s.keys, s.indices, s.weights, s.probabilities, s.priorities, {}};
        for (const Column &c : schema_) {
            std::size_t elements = batch * c.shape;
            s.column_bytes.emplace_back(elements * detail::dtype_size(c.dtype));
            s.column_dtypes.push_back(c.dtype);
            out.columns.emplace_back(s.column_bytes.back().data(), c.dtype, elements);
        }
        return out;
    }

    static void check_room(std::size_t have, std::size_t batch, const char *what) {
        if (have != 0 && have < batch) {
            detail::mismatch(std::string(what) + " has room for " + std::to_string(have) + " of " +
                             std::to_string(batch));
        }
    }

    friend class Writer;
    friend class LaneWriter;

    kr_buffer *handle_ = nullptr;
    std::vector<Column> schema_;
};

// A buffer shared by processes (kr_shm_*): the lock-free buffer in a shared mapping, which
// every process that creates or attaches it uses as a Buffer (insert, sample, update,
// Writer, save...). A process killed at any point costs at most the items it was inserting:
// the other processes' handles recover what it held within about 10 ms. A handle inherited
// across fork attaches again in the child on its first call. Throws Error with
// KR_E_SHARED when a name is taken or unknown or a mapping is not a shared buffer of this
// version's layout, KR_E_ALLOCATION when /dev/shm has no room for it.
class SharedBuffer : public Buffer {
public:
    // Create the shared buffer `name` (a name under /dev/shm: letters, digits, '.', '_',
    // '-'), its whole size reserved now; the name stays until unlink(name).
    static SharedBuffer create(const std::string &name, const kr_config &config, std::vector<Column> schema) {
        return make(name.c_str(), name, config, std::move(schema));
    }
    // Create one with no name (a memfd): other processes reach it through fork or fd().
    static SharedBuffer anonymous(const kr_config &config, std::vector<Column> schema) {
        return make(nullptr, std::string(), config, std::move(schema));
    }
    // Attach to the shared buffer `name` (its configuration and schema read from it).
    static SharedBuffer attach(const std::string &name) {
        kr_buffer *handle = nullptr;
        detail::check(kr_shm_attach(name.c_str(), &handle));
        return SharedBuffer(handle, name);
    }
    // Attach to the shared buffer behind descriptor `fd` (another handle's fd(), inherited or
    // passed over a Unix socket); the descriptor stays the caller's.
    static SharedBuffer attach_fd(int fd) {
        kr_buffer *handle = nullptr;
        detail::check(kr_shm_attach_fd(fd, &handle));
        return SharedBuffer(handle, std::string());
    }
    // Remove the name: handles keep working, no new process can attach by it.
    static void unlink(const std::string &name) { detail::check(kr_shm_unlink(name.c_str())); }

    // The name it was created or attached by (empty for anonymous and attach_fd).
    const std::string &name() const noexcept { return name_; }
    // The mapping's descriptor (close-on-exec), valid while this handle is.
    int fd() const { return get_value<int>(kr_shm_fd); }
    // How many processes are attached now, this one included.
    std::size_t participants() const { return get_value<std::size_t>(kr_shm_participants); }
    // Recover now what dead processes held (the watchdog does it every 10 ms); returns how
    // many participants this call recovered.
    std::size_t recover() const {
        std::size_t n = 0;
        detail::check(kr_shm_recover(get(), &n));
        return n;
    }

private:
    SharedBuffer(kr_buffer *handle, std::string name) : Buffer(handle), name_(std::move(name)) {}
    SharedBuffer(kr_buffer *handle, std::vector<Column> schema, std::string name)
        : Buffer(handle, std::move(schema)), name_(std::move(name)) {}

    static SharedBuffer make(const char *c_name, std::string name, const kr_config &config,
                             std::vector<Column> schema) {
        std::vector<kr_column> columns = raw_columns(schema);
        kr_buffer *handle = nullptr;
        detail::check(kr_shm_create(c_name, &config, columns.data(), columns.size(), &handle));
        return SharedBuffer(handle, std::move(schema), std::move(name));
    }

    std::string name_;
};

// A rate limiter apart from any buffer (kr_rate_limiter): the limit of a kr_config's rate
// fields, continuing from `inserts` and `samples`. insert and sample return true when the
// call was admitted (counted) and false when it was not within `wait` (nothing counted);
// they throw KR_E_CLOSED after close(), and KR_E_INVALID_ARGUMENT for a call past the
// config's rate_insert_batch / rate_sample_batch. Any number of threads at once.
class RateLimiter {
public:
    explicit RateLimiter(const kr_config &config, std::uint64_t inserts = 0, std::uint64_t samples = 0) {
        detail::check(kr_rate_limiter_new(&config, inserts, samples, &handle_));
    }
    ~RateLimiter() { kr_rate_limiter_free(handle_); }
    RateLimiter(RateLimiter &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    RateLimiter &operator=(RateLimiter &&other) noexcept {
        std::swap(handle_, other.handle_);
        return *this;
    }
    RateLimiter(const RateLimiter &) = delete;
    RateLimiter &operator=(const RateLimiter &) = delete;

    kr_rate_limiter *get() const noexcept { return handle_; }

    bool insert(std::uint64_t n, Wait wait = Wait::forever()) const {
        return admitted(kr_rate_limiter_insert(handle_, n, wait.seconds));
    }
    bool sample(std::uint64_t n, Wait wait = Wait::forever()) const {
        return admitted(kr_rate_limiter_sample(handle_, n, wait.seconds));
    }
    void close() const { detail::check(kr_rate_limiter_close(handle_)); }
    kr_rate_stats stats() const {
        kr_rate_stats s{};
        detail::check(kr_rate_limiter_stats(handle_, &s));
        return s;
    }

private:
    static bool admitted(kr_status status) {
        if (status == KR_E_TIMEOUT || status == KR_E_RATE_LIMITED) return false;
        detail::check(status);
        return true;
    }

    kr_rate_limiter *handle_ = nullptr;
};

// An actor thread's staged writer (kr_writer): push() stages one item, and every `batch`
// items go to the buffer in one batch insert (one cursor increment and two tree operations
// per batch instead of per item). Staged items become visible (sampleable, counted by
// len()) only when the writer flushes: when `batch` are staged, on flush(), when a push
// switches between an explicit and the default priority, and in the destructor. RAII: the
// destructor flushes (an error there cannot be reported: call flush() first to see it).
// It keeps the buffer's handle alive, so it may outlive the Buffer object. One thread at
// a time; moves, does not copy.
//   kary_replay::Writer writer(buffer, 64);
//   writer.push({obs_view, action_view}, priority);   // per environment step
class Writer {
public:
    Writer(const Buffer &buffer, std::size_t batch) : schema_(buffer.schema_) {
        detail::check(kr_writer_new(buffer.get(), batch, &handle_));
    }
    ~Writer() { kr_writer_free(handle_); }
    Writer(Writer &&other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), schema_(std::move(other.schema_)) {}
    Writer &operator=(Writer &&other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(schema_, other.schema_);
        return *this;
    }
    Writer(const Writer &) = delete;
    Writer &operator=(const Writer &) = delete;

    kr_writer *get() const noexcept { return handle_; }

    // Stage one item (one view per column, `shape` elements each) with a raw priority, or
    // the default priority (decided at the flush) when none is given. Returns the number
    // of items this push wrote to the buffer (0 when it only staged); keys() has their
    // keys. Bad input throws and stages nothing.
    std::size_t push(Span<const ColumnView> columns, std::optional<double> priority = std::nullopt) {
        detail::require(handle_, "writer");
        std::vector<const void *> pointers = Buffer::inputs(schema_, columns, 1);
        std::size_t flushed = 0;
        detail::check(kr_writer_push(handle_, pointers.data(), pointers.size(),
                                     priority ? &*priority : nullptr, &flushed));
        return flushed;
    }
    std::size_t push(std::initializer_list<ColumnView> columns, std::optional<double> priority = std::nullopt) {
        return push(Span<const ColumnView>(columns.begin(), columns.size()), priority);
    }

    // Write the staged items now; returns how many were written.
    std::size_t flush() {
        std::size_t flushed = 0;
        detail::check(kr_writer_flush(handle_, &flushed));
        return flushed;
    }

    // Items staged and not yet in the buffer.
    std::size_t staged() const {
        std::size_t n = 0;
        detail::check(kr_writer_staged(handle_, &n));
        return n;
    }

    // The keys of the items the last push() or flush() wrote, in push order.
    std::vector<kr_key> keys() const {
        const kr_key *keys = nullptr;
        std::size_t n = 0;
        detail::check(kr_writer_keys(handle_, &keys, &n));
        return std::vector<kr_key>(keys, keys + n);
    }

private:
    kr_writer *handle_ = nullptr;
    std::vector<Column> schema_;
};

// The names a SequenceBuffer's configuration refers to, beside kr_seq_config's numbers:
// the n-step reward column (with config.nstep > 0), the stacked columns and their frames,
// and the columns whose next observation a sample returns.
struct SequenceOptions {
    kr_seq_config config = kr_seq_config_default();
    std::string reward = {};
    std::vector<std::pair<std::string, std::size_t>> stack = {};
    std::vector<std::string> next_of = {};
};

// Lanes of steps stored once and prioritized windows over them (kr_seq): n-step returns,
// sequences and stacked frames that never cross an episode. One LaneWriter per lane;
// sample_into and update_priorities from any number of threads. Moves, does not copy.
//   kary_replay::SequenceOptions o;
//   o.config.lanes = 4; o.config.steps_per_lane = 1 << 16; o.config.nstep = 3;
//   o.reward = "reward"; o.next_of = {"obs"};
//   kary_replay::SequenceBuffer seq(o, {column<float>("obs", 4), column<float>("reward", {})});
class SequenceBuffer {
public:
    SequenceBuffer(const SequenceOptions &options, std::vector<Column> schema) : schema_(std::move(schema)) {
        handle_ = make(options, schema_, [](const kr_seq_config *config, const kr_column *columns, std::size_t n,
                                            kr_seq **out) { return kr_seq_new(config, columns, n, out); });
        for (const Column &c : schema_) {
            for (const std::string &n : options.next_of) {
                if (n == c.name) next_of_.push_back(c);
            }
        }
    }
    ~SequenceBuffer() { kr_seq_free(handle_); }
    SequenceBuffer(SequenceBuffer &&other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), schema_(std::move(other.schema_)),
          next_of_(std::move(other.next_of_)) {}
    SequenceBuffer &operator=(SequenceBuffer &&other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(schema_, other.schema_);
        std::swap(next_of_, other.next_of_);
        return *this;
    }
    SequenceBuffer(const SequenceBuffer &) = delete;
    SequenceBuffer &operator=(const SequenceBuffer &) = delete;

    kr_seq *get() const noexcept { return handle_; }
    const std::vector<Column> &schema() const noexcept { return schema_; }

    // Sample `batch` windows into the caller's memory (kr_seq_sample_out says the room each
    // output needs; NULL outputs are skipped). With a rate limit (config.rate), waits as
    // `wait` says for the limiter to admit `batch` windows (kr_seq_sample_wait).
    void sample_into(Rng &rng, std::size_t batch, double beta, const kr_seq_sample_out &out,
                     std::uint32_t mode = KR_SAMPLE_STRATIFIED, Wait wait = Wait::forever()) const {
        detail::require(handle_, "sequence buffer");
        detail::check(kr_seq_sample_wait(handle_, rng.get(), batch, beta, mode, wait.seconds, &out));
    }

    // Close the rate limiter: every lane call and sample waiting for it, and every later
    // one, throws KR_E_CLOSED (kr_seq_close). Nothing happens without a rate limit.
    void close() const { detail::check(kr_seq_close(handle_)); }
    // The rate limiter's counts, in windows (`limited` false without a rate limit).
    kr_rate_stats rate_stats() const {
        kr_rate_stats s{};
        detail::check(kr_seq_rate_stats(handle_, &s));
        return s;
    }

    // Set the raw priorities of the windows `keys` name; stale keys are counted.
    kr_update_report update_priorities(Span<const kr_key> keys, Span<const double> priorities) const {
        if (keys.size() != priorities.size()) {
            detail::mismatch(std::to_string(keys.size()) + " keys, " + std::to_string(priorities.size()) +
                             " priorities");
        }
        kr_update_report report{};
        detail::check(kr_seq_update_priorities(handle_, keys.data(), priorities.data(), keys.size(), &report));
        return report;
    }

    // The stored priorities of the windows `keys` name: NaN for a window retired since.
    std::vector<double> priorities(Span<const kr_key> keys) const {
        std::vector<double> out(keys.size());
        detail::check(kr_seq_priorities(handle_, keys.data(), keys.size(), out.data(), nullptr));
        return out;
    }

    // Windows that can be sampled now.
    std::size_t len() const {
        std::size_t n = 0;
        detail::check(kr_seq_len(handle_, &n));
        return n;
    }

    // Save a sequence checkpoint in the new directory `dir` (see kr_seq_save) while lane
    // writers run: keep only the newest `keep_last` numbered checkpoints beside it (0: all),
    // with the caller's counters.
    void save(const std::string &dir, std::size_t keep_last = 0,
              const std::vector<std::pair<std::string, std::uint64_t>> &user = {}) const {
        detail::require(handle_, "sequence buffer");
        detail::SaveOptions options(keep_last, user);
        detail::check(kr_seq_save(handle_, dir.c_str(), &options.options));
    }

    // Load the sequence checkpoint at `dir` (see kr_seq_load): every lane where it stood,
    // every window, priority and key; the schema and next_of columns are read from it.
    static SequenceBuffer load(const std::string &dir) {
        kr_seq *handle = nullptr;
        detail::check(kr_seq_load(dir.c_str(), &handle));
        return SequenceBuffer(handle);
    }

    // The configuration (a loaded buffer's is its checkpoint's); its names point into the
    // buffer and live as long as it does.
    kr_seq_config config() const {
        kr_seq_config c{};
        detail::check(kr_seq_config_of(handle_, &c));
        return c;
    }

    // Steps written over all lanes (final-observation rows included).
    std::uint64_t steps_written() const {
        std::uint64_t n = 0;
        detail::check(kr_seq_steps_written(handle_, &n));
        return n;
    }

    // The lane and first step of the window `key` names.
    std::pair<std::size_t, std::uint64_t> window_of(kr_key key) const {
        std::size_t lane = 0;
        std::uint64_t start = 0;
        detail::check(kr_seq_window_of(handle_, key, &lane, &start));
        return {lane, start};
    }

protected:
    // The handle `create` makes (kr_seq_new or kr_seq_shm_create) for `options` and `schema`.
    template <class Create>
    static kr_seq *make(const SequenceOptions &options, const std::vector<Column> &schema, Create create) {
        std::vector<kr_column> columns;
        for (const Column &c : schema) {
            columns.push_back(kr_column{c.name.c_str(), c.dtype, c.shape, c.dims.size(), c.dims.data()});
        }
        kr_seq_config config = options.config;
        config.reward = options.config.nstep > 0 ? options.reward.c_str() : nullptr;
        std::vector<const char *> stack_names;
        std::vector<std::size_t> stack_frames;
        for (const auto &s : options.stack) {
            stack_names.push_back(s.first.c_str());
            stack_frames.push_back(s.second);
        }
        config.stack_columns = stack_names.data();
        config.stack_frames = stack_frames.data();
        config.n_stack = stack_names.size();
        std::vector<const char *> next_names;
        for (const std::string &n : options.next_of) next_names.push_back(n.c_str());
        config.next_of = next_names.data();
        config.n_next_of = next_names.size();
        kr_seq *handle = nullptr;
        detail::check(create(&config, columns.data(), columns.size(), &handle));
        return handle;
    }

    // Adopt a handle (from kr_seq_load, kr_seq_shm_create or kr_seq_shm_attach), reading its
    // schema and next_of columns from it.
    explicit SequenceBuffer(kr_seq *handle) : handle_(handle) {
        try {
            std::size_t n = 0;
            detail::check(kr_seq_n_columns(handle_, &n));
            for (std::size_t i = 0; i < n; ++i) {
                kr_column c{};
                detail::check(kr_seq_column(handle_, i, &c));
                schema_.push_back(Column{c.name, c.dtype, c.shape, std::vector<std::size_t>(c.dims, c.dims + c.ndim)});
            }
            kr_seq_config config{};
            detail::check(kr_seq_config_of(handle_, &config));
            for (const Column &c : schema_) {
                for (std::size_t j = 0; j < config.n_next_of; ++j) {
                    if (c.name == config.next_of[j]) next_of_.push_back(c);
                }
            }
        } catch (...) {
            kr_seq_free(handle_);
            throw;
        }
    }

private:
    friend class LaneWriter;

    kr_seq *handle_ = nullptr;
    std::vector<Column> schema_;
    std::vector<Column> next_of_;
};

// A sequence buffer shared by processes (kr_seq_shm_*): lanes written by actor processes,
// windows sampled and updated by learner processes, each using it as a SequenceBuffer
// (LaneWriter, sample_into, update_priorities, save...). One LaneWriter per lane across every
// process; each window is installed as soon as it completes. A process killed at any point
// costs the step it was writing and the windows of its episode that waited for later steps:
// the other processes' handles recover its lane within about 10 ms, and the lane takes a
// new writer. Throws Error with KR_E_SHARED when a name is taken or unknown or a mapping is
// not a shared sequence buffer of this version's layout.
class SharedSequenceBuffer : public SequenceBuffer {
public:
    // Create the shared sequence buffer `name` (a name under /dev/shm), its whole size
    // reserved now; the name stays until unlink(name).
    static SharedSequenceBuffer create(const std::string &name, const SequenceOptions &options,
                                       std::vector<Column> schema) {
        kr_seq *handle = make(options, schema, [&](const kr_seq_config *config, const kr_column *columns,
                                                   std::size_t n, kr_seq **out) {
            return kr_seq_shm_create(name.c_str(), config, columns, n, out);
        });
        return SharedSequenceBuffer(handle, name);
    }
    // Attach to the shared sequence buffer `name` (its configuration and schema read from it).
    static SharedSequenceBuffer attach(const std::string &name) {
        kr_seq *handle = nullptr;
        detail::check(kr_seq_shm_attach(name.c_str(), &handle));
        return SharedSequenceBuffer(handle, name);
    }
    // Remove the name: handles keep working, no new process can attach by it.
    static void unlink(const std::string &name) { detail::check(kr_shm_unlink(name.c_str())); }

    // The name it was created or attached by.
    const std::string &name() const noexcept { return name_; }
    // How many processes are attached now, this one included.
    std::size_t participants() const {
        std::size_t n = 0;
        detail::check(kr_seq_shm_participants(get(), &n));
        return n;
    }
    // Recover now what dead processes held (the watchdog does it every 10 ms); returns how
    // many participants this call recovered.
    std::size_t recover() const {
        std::size_t n = 0;
        detail::check(kr_seq_shm_recover(get(), &n));
        return n;
    }

private:
    SharedSequenceBuffer(kr_seq *handle, std::string name) : SequenceBuffer(handle), name_(std::move(name)) {}

    std::string name_;
};

// The writer of one lane of a SequenceBuffer (kr_lane): RAII, the lane is given back (where
// it stands) by the destructor. One thread at a time; moves, does not copy.
//   kary_replay::LaneWriter lane(seq, 0);
//   lane.push({obs_view, reward_view});            // per environment step
//   lane.end_episode({final_obs_view}, truncated); // at an episode's end
class LaneWriter {
public:
    LaneWriter(const SequenceBuffer &buffer, std::size_t lane) : schema_(buffer.schema_), next_of_(buffer.next_of_) {
        detail::check(kr_seq_lane(buffer.get(), lane, &handle_));
    }
    ~LaneWriter() { kr_lane_free(handle_); }
    LaneWriter(LaneWriter &&other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), schema_(std::move(other.schema_)),
          next_of_(std::move(other.next_of_)) {}
    LaneWriter &operator=(LaneWriter &&other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(schema_, other.schema_);
        std::swap(next_of_, other.next_of_);
        return *this;
    }
    LaneWriter(const LaneWriter &) = delete;
    LaneWriter &operator=(const LaneWriter &) = delete;

    kr_lane *get() const noexcept { return handle_; }

    // Append one step (one view per column, `shape` elements each). With a rate limit, a
    // step that completes a window waits as `wait` says for the limiter to admit it.
    void push(Span<const ColumnView> step, Wait wait = Wait::forever()) {
        detail::require(handle_, "lane");
        std::vector<const void *> pointers = Buffer::inputs(schema_, step, 1);
        detail::check(kr_lane_push_wait(handle_, pointers.data(), pointers.size(), wait.seconds));
    }
    void push(std::initializer_list<ColumnView> step, Wait wait = Wait::forever()) {
        push(Span<const ColumnView>(step.begin(), step.size()), wait);
    }

    // End the episode: one view per next_of column (schema order), the true next
    // observation; `truncated` when cut by a time limit. With a rate limit, the windows it
    // completes are admitted first, waiting as `wait` says.
    void end_episode(Span<const ColumnView> final_obs, bool truncated = false, Wait wait = Wait::forever()) {
        detail::require(handle_, "lane");
        std::vector<const void *> pointers = Buffer::inputs(next_of_, final_obs, 1);
        detail::check(kr_lane_end_episode_wait(handle_, pointers.data(), pointers.size(), truncated, wait.seconds));
    }
    void end_episode(std::initializer_list<ColumnView> final_obs, bool truncated = false,
                     Wait wait = Wait::forever()) {
        end_episode(Span<const ColumnView>(final_obs.begin(), final_obs.size()), truncated, wait);
    }

    // Install complete windows in batches of `windows`; flush() installs what is staged.
    void set_batch(std::size_t windows) { detail::check(kr_lane_set_batch(handle_, windows)); }
    void flush() { detail::check(kr_lane_flush(handle_)); }
    // No step after this (KR_E_CLOSED).
    void close() { detail::check(kr_lane_close(handle_)); }
    // The lane's position in its timeline.
    std::uint64_t position() const {
        std::uint64_t p = 0;
        detail::check(kr_lane_position(handle_, &p));
        return p;
    }

private:
    kr_lane *handle_ = nullptr;
    std::vector<Column> schema_;
    std::vector<Column> next_of_;
};

// Plans and finishes samples of the union of several buffers (shards), drawn exactly as
// one buffer holding them all would draw (kr_coordinator_*). The shards may be anywhere:
// only kr_stats, fractions and priorities travel between them and the coordinator.
//   coordinator.plan(stats, B, rng);                       // stats[k] = shard k's stats()
//   kr_stats at = shard[k].sample_at_into(rng, coordinator.fractions(k), out_k);
//   replies[k] = kr_reply{priorities_k, n_k, at.total};
//   auto finished = coordinator.finish(replies, beta);    // the batch's weights
// One thread at a time; moves, does not copy.
class Coordinator {
public:
    Coordinator() { detail::check(kr_coordinator_new(&handle_)); }
    ~Coordinator() { kr_coordinator_free(handle_); }
    Coordinator(Coordinator &&other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), batch_(other.batch_) {}
    Coordinator &operator=(Coordinator &&other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(batch_, other.batch_);
        return *this;
    }
    Coordinator(const Coordinator &) = delete;
    Coordinator &operator=(const Coordinator &) = delete;

    kr_coordinator *get() const noexcept { return handle_; }

    // Plan `batch` draws over shards whose stats are `stats` (see kr_coordinator_plan).
    void plan(Span<const kr_stats> stats, std::size_t batch, Rng &rng, std::uint32_t mode = KR_SAMPLE_STRATIFIED) {
        detail::require(handle_, "coordinator");
        batch_ = 0;
        detail::check(kr_coordinator_plan(handle_, stats.data(), stats.size(), batch, mode, rng.get()));
        batch_ = batch;
    }

    // Shard `shard`'s fractions in the last plan (empty when it got no draw), valid until
    // the next plan.
    Span<const double> fractions(std::size_t shard) const {
        const double *f = nullptr;
        std::size_t n = 0;
        detail::check(kr_coordinator_fractions(handle_, shard, &f, &n));
        return n == 0 ? Span<const double>() : Span<const double>(f, n);
    }

    // The batch's probabilities and importance weights into caller memory (each span empty:
    // skipped, else room for the plan's batch); replies[k] is shard k's reply (see
    // kr_coordinator_finish).
    void finish_into(Span<const kr_reply> replies, double beta, std::uint32_t weight_normalization,
                     Span<double> probabilities, Span<double> weights, Span<float> weights_f32 = {}) {
        detail::require(handle_, "coordinator");
        for (auto [have, what] : {std::pair{probabilities.size(), "probabilities"},
                                  std::pair{weights.size(), "weights"}, std::pair{weights_f32.size(), "weights_f32"}}) {
            if (have != 0 && have < batch_) {
                detail::mismatch(std::string(what) + " has room for " + std::to_string(have) + " of " +
                                 std::to_string(batch_));
            }
        }
        detail::check(kr_coordinator_finish(handle_, replies.data(), replies.size(), beta, weight_normalization,
                                            batch_, probabilities.data(), weights.data(), weights_f32.data()));
    }

    // The batch's probabilities and importance weights, in shard order.
    struct Finished {
        std::vector<double> probabilities;
        std::vector<double> weights;
    };
    Finished finish(Span<const kr_reply> replies, double beta, std::uint32_t weight_normalization = KR_WEIGHTS_GLOBAL) {
        Finished f{std::vector<double>(batch_), std::vector<double>(batch_)};
        finish_into(replies, beta, weight_normalization, f.probabilities, f.weights);
        return f;
    }

private:
    kr_coordinator *handle_ = nullptr;
    std::size_t batch_ = 0;  // the last successful plan's batch
};

// Read and check the checkpoint at `dir` whole, as a load does (see kr_checkpoint_verify).
inline kr_checkpoint_report verify(const std::string &dir) {
    kr_checkpoint_report report{};
    detail::check(kr_checkpoint_verify(dir.c_str(), &report));
    return report;
}

// The newest committed numbered checkpoint in `parent`, if any (see kr_checkpoint_latest).
inline std::optional<std::string> latest_checkpoint(const std::string &parent) {
    std::size_t needed = 0;
    bool found = false;
    kr_status s = kr_checkpoint_latest(parent.c_str(), nullptr, 0, &needed, &found);
    if (s == KR_OK) return std::nullopt;
    if (s != KR_E_LENGTH_MISMATCH) detail::check(s);
    std::string path(needed + 1, '\0');
    detail::check(kr_checkpoint_latest(parent.c_str(), path.data(), path.size(), &needed, &found));
    if (!found) return std::nullopt;
    path.resize(needed);
    return path;
}

// The counter `key` saved with the checkpoint at `dir`, if it was.
inline std::optional<std::uint64_t> checkpoint_user_u64(const std::string &dir, const std::string &key) {
    std::uint64_t value = 0;
    bool present = false;
    detail::check(kr_checkpoint_user_u64(dir.c_str(), key.c_str(), &value, &present));
    return present ? std::optional<std::uint64_t>(value) : std::nullopt;
}

// Calls f() and returns what it returns; while it throws an Error that is retryable()
// (KR_E_CONTENTION: sampling gave up on slots that writers held), yields and calls it again,
// at most `attempts` times in all. Any other error, or the last attempt's, propagates.
//   auto s = kary_replay::retry([&] { return buffer.sample(rng, 256, 0.4); });
template <class F> auto retry(F &&f, int attempts = 64) -> decltype(f()) {
    for (int attempt = 1;; ++attempt) {
        try {
            return f();
        } catch (const Error &e) {
            if (!e.retryable() || attempt >= attempts) throw;
            std::this_thread::yield();
        }
    }
}

}  // namespace kary_replay

#endif  // KARY_REPLAY_HPP
