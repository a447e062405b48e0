// data/rng.h: the counter-based random numbers of the data pipeline (prepare-text and loader).
//
//   uint64_t key = data::derive_key(seed, kStreamMasking, epoch, file, instance);
//   data::Rng rng(key);                       // draw i = splitmix64_mix(key + (i+1) * gamma)
//   double u = rng.uniform();                 // [0, 1), 53 bits
//   int64_t k = rng.below(n);                 // [0, n), exact (Lemire's rejection)
//
// Why not std::mt19937 + std::uniform_int_distribution: the distributions are implementation-
// defined (libstdc++ and libc++ give different numbers), and a 2.5 KB state per stream is
// heavy when every (dupe, document) or (epoch, file, instance) gets its own stream. SplitMix64
// (Steele, Lea, Flood 2014; the generator Java's SplittableRandom uses) is a counter hashed by
// a 64-bit finalizer: output i of the stream keyed k is mix(k + (i + 1) * 0x9E3779B97F4A7C15).
// It passes BigCrush, costs a few ns per draw and is the same on every platform. Keys of
// related streams are made independent by chaining the finalizer over the key parts
// (derive_key), so stream (seed, 1, 2) and (seed, 2, 1) share nothing.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <utility>

namespace unmask::data {

/// SplitMix64's finalizer (a bijection on 64-bit words with full avalanche).
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

/// Key of the stream named by (seed, parts...): k0 = mix(seed + gamma), k_{j+1} = mix(k_j ^
/// mix(part_j + gamma)). Each part is hashed before it is combined, so small integers spread.
inline uint64_t derive_key(uint64_t seed, std::initializer_list<uint64_t> parts) {
  uint64_t k = splitmix64_mix(seed + kGoldenGamma);
  for (uint64_t p : parts) k = splitmix64_mix(k ^ splitmix64_mix(p + kGoldenGamma));
  return k;
}

/// Stream names, so the streams of one seed never coincide.
enum StreamId : uint64_t {
  kStreamDocument = 1,     // prepare-text: (dupe, document) -> instances
  kStreamShuffle = 2,      // prepare-text: the order of all instances
  kStreamFileOrder = 3,    // loader: (epoch) -> file order
  kStreamFileSamples = 4,  // loader: (epoch, file) -> instance order
  kStreamMasking = 5,      // loader: (epoch, file, instance) -> dynamic masks
  kStreamDropPath = 6,     // video classifier: (step, block, branch) -> per-clip drop-path draws
  kStreamMixup = 7,        // video fine-tuning: (step) -> mixup/cutmix choice, lambda, box
  kStreamRank = 8,         // dist: (rank) -> the per-rank seed (masking, augmentation)
};

/// One SplitMix64 stream.
class Rng {
 public:
  explicit Rng(uint64_t key) : state_(key) {}
  uint64_t next() {
    state_ += kGoldenGamma;
    return splitmix64_mix(state_);
  }
  /// Uniform in [0, 1) with 53 random bits (Python's random.random() resolution).
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n), n >= 1, without modulo bias (Lemire 2019).
  uint64_t below(uint64_t n) {
    unsigned __int128 m = (unsigned __int128)next() * n;
    uint64_t low = uint64_t(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
      while (low < threshold) {
        m = (unsigned __int128)next() * n;
        low = uint64_t(m);
      }
    }
    return uint64_t(m >> 64);
  }
  /// Uniform integer in [lo, hi] (both ends, like Python's random.randint).
  int64_t randint(int64_t lo, int64_t hi) { return lo + int64_t(below(uint64_t(hi - lo) + 1)); }
  /// Fisher-Yates shuffle (Python's random.shuffle order: from the back).
  template <typename T> void shuffle(T* data, int64_t n) {
    for (int64_t i = n - 1; i > 0; --i) std::swap(data[i], data[below(uint64_t(i) + 1)]);
  }

 private:
  uint64_t state_;
};

}  // namespace unmask::data
